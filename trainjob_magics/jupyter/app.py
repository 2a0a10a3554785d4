"""Wiring the extension into a running Jupyter server: the inventory, its wake-ups on the
server's event loop, and the handlers under the base URL."""

from __future__ import annotations

import asyncio
from typing import Any

from jupyter_server.utils import url_path_join

from ..engine import SessionInventory
from .config import TrainJobSessions
from .handlers import CloseHandler, GpusHandler, JobHandler, SessionsHandler
from .kernels_file import read_namespaces
from .waiters import Waiters

API_ROOT = "trainjob-magics/api"
INVENTORY_KEY = "trainjob_magics_inventory"
WAITERS_KEY = "trainjob_magics_waiters"
SETTINGS_KEY = "trainjob_magics_settings"


def load(serverapp: Any) -> None:
    """Start the inventory (its watches run in daemon threads) and add the handlers."""
    settings = TrainJobSessions(parent=serverapp)
    namespaces = [*settings.namespaces, *read_namespaces(serverapp.runtime_dir)]
    inventory = SessionInventory(
        config_file=settings.kubeconfig or None,
        context=settings.context or None,
        namespaces=namespaces,
        all_users=settings.all_users,
    )
    loop = asyncio.get_event_loop()
    waiters = Waiters()
    inventory.listeners.append(lambda: loop.call_soon_threadsafe(waiters.wake))
    web_app = serverapp.web_app
    web_app.settings[INVENTORY_KEY] = inventory
    web_app.settings[WAITERS_KEY] = waiters
    web_app.settings[SETTINGS_KEY] = settings
    base = url_path_join(web_app.settings["base_url"], API_ROOT)
    name = r"(?P<namespace>[a-z0-9][-a-z0-9]{0,62})/(?P<name>[a-z0-9][-a-z0-9.]{0,252})"
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "sessions"), SessionsHandler),
            (url_path_join(base, "sessions", name), JobHandler),
            (url_path_join(base, "sessions", name, "close"), CloseHandler),
            (url_path_join(base, "sessions", name, "gpus"), GpusHandler),
        ],
    )
    serverapp.log.info(
        "trainjob_magics: sessions API at %s (namespaces %s)",
        base,
        ", ".join(inventory.namespaces()) or "none: " + inventory.problem,
    )
