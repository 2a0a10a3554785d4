"""A real ipykernel (jupyter_client) for tests that drive the magics the way Jupyter does."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager


class Kernel:
    """A started ``python3`` kernel with its client channels open.

    Use as a context manager (or call :meth:`stop`): the kernel is shut down politely, and
    killed if it does not go, so no kernel process outlives the test.
    """

    def __init__(self, ready_timeout: float = 60) -> None:
        # Unix sockets in a private directory, as devtools/notebook_run.py: no TCP ports
        self._sockets = tempfile.TemporaryDirectory(prefix="kernel-")
        self.km = KernelManager(
            kernel_name="python3", transport="ipc", ip=str(Path(self._sockets.name) / "kernel")
        )
        self.km.start_kernel()
        self.kc = self.km.client()
        try:
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=ready_timeout)
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(self, code: str, timeout: float = 60) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Execute ``code``; returns the reply content and the iopub messages of the cell."""
        msgs: list[dict[str, Any]] = []
        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=msgs.append)
        return reply["content"], msgs

    def run_text(self, code: str, timeout: float = 60) -> tuple[dict[str, Any], str]:
        """Execute ``code``; returns the reply content and its stream text plus tracebacks."""
        reply, msgs = self.run(code, timeout=timeout)
        return reply, stream_text(msgs)

    def pid(self) -> int:
        """The kernel process id, as the kernel itself reports it."""
        _reply, out = self.run_text("import os; print(os.getpid())")
        return int(out.strip())

    def restart(self, timeout: float = 60) -> None:
        """Kernel > Restart (polite: the kernel's shutdown hooks run)."""
        self.km.restart_kernel(now=False)
        self.kc.wait_for_ready(timeout=timeout)

    def stop(self) -> None:
        """Shut the kernel down politely (shutdown_request), once; kill it if it stays."""
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        if self.km.has_kernel:
            try:
                self.km.shutdown_kernel(now=False)
            except Exception:
                with contextlib.suppress(Exception):
                    self.km.shutdown_kernel(now=True)
        self._sockets.cleanup()


def stream_text(msgs: list[dict[str, Any]]) -> str:
    """Stream output and error tracebacks of a cell's iopub messages, in order."""
    out = []
    for m in msgs:
        if m["msg_type"] == "stream":
            out.append(m["content"]["text"])
        elif m["msg_type"] == "error":
            out.append("\n".join(m["content"]["traceback"]))
    return "".join(out)


def shown_text(msgs: list[dict[str, Any]]) -> str:
    """Everything a cell showed: streams, text/plain of displays and results, tracebacks."""
    out = []
    for m in msgs:
        c = m["content"]
        if m["msg_type"] == "stream":
            out.append(c["text"])
        elif m["msg_type"] in ("display_data", "execute_result", "update_display_data"):
            out.append(c.get("data", {}).get("text/plain", ""))
        elif m["msg_type"] == "error":
            out.append("\n".join(c["traceback"]))
    return "".join(out)


def load_magics_code(kubeconfig: str | Path, **config: Any) -> str:
    """Cell source loading the extension with the kubeconfig and ``TrainJobMagics`` settings."""
    lines = [
        "%load_ext trainjob_magics",
        f"%config TrainJobMagics.kubeconfig = {str(kubeconfig)!r}",
    ]
    lines += [f"%config TrainJobMagics.{key} = {value!r}" for key, value in config.items()]
    return "\n".join(lines)
