"""The Jupyter server extension: this user's TrainJob sessions over a REST API under the server's
base URL, for the sidebar, the status bar and the live panels of the lab extension.

The only module of the package that imports jupyter_server; Jupyter loads it through
``jupyter-config/jupyter_server_config.d/trainjob_magics.json``, installed with the package.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "trainjob_magics.jupyter"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "trainjob-magics-labextension"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .app import load

    load(serverapp)


# jupyter_server < 2 looked for this name
load_jupyter_server_extension = _load_jupyter_server_extension
