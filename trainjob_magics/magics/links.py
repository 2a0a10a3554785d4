"""The link a forward shows: the local URL, or the Jupyter server's proxied path.

On JupyterHub (and any remote Jupyter) the kernel's ``127.0.0.1`` is not the browser's. With
jupyter-server-proxy installed, the Jupyter server itself proxies ``{base_url}proxy/PORT/`` to
the kernel host's port, so that path works wherever the notebook page does.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os


def server_base_url() -> str | None:
    """The base URL of the Jupyter server running this kernel, when it can be told: JupyterHub's
    ``JUPYTERHUB_SERVICE_PREFIX``, else the running server that started this process."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if prefix:
        return prefix if prefix.endswith("/") else prefix + "/"
    with contextlib.suppress(Exception):
        from jupyter_server.serverapp import list_running_servers

        parent = os.getppid()
        for info in list_running_servers():
            if info.get("pid") == parent:
                base = str(info.get("base_url") or "/")
                return base if base.endswith("/") else base + "/"
    return None


def has_server_proxy() -> bool:
    """Whether jupyter-server-proxy is installed beside this kernel (where the server runs)."""
    try:
        return importlib.util.find_spec("jupyter_server_proxy") is not None
    except (ImportError, ValueError):
        return False


def browser_url(local_url: str, local_port: int, setting: str = "auto") -> str:
    """The link for a forward listening on ``local_port`` (``setting``: see
    ``TrainJobMagics.forward_url``)."""
    choice = (setting or "auto").strip()
    if choice == "direct":
        return local_url
    if choice != "auto":
        return choice.replace("{port}", str(local_port))
    if has_server_proxy():
        base = server_base_url()
        if base is not None:
            return f"{base}proxy/{local_port}/"
    return local_url


__all__ = ["browser_url", "has_server_proxy", "server_base_url"]
