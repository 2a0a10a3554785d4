"""The Jupyter server extension: this user's TrainJob sessions over a REST API under the server's
base URL, for the sidebar, the status bar and the live panels of the lab extension.

The only module of the package that imports jupyter_server; Jupyter loads it through
``jupyter-config/jupyter_server_config.d/trainjob_magics.json``, installed with the package.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import TrainJobSessionsApp

    return [{"module": "trainjob_magics.jupyter", "app": TrainJobSessionsApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "trainjob-magics-labextension"}]
