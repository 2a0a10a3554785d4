"""Wiring the extension into a running Jupyter server, as an ``ExtensionApp`` (after
jupyter-scheduler): the inventory, its wake-ups on the server's event loop, the handlers under
the base URL, and the inventory's watch threads stopped when the server stops."""

from __future__ import annotations

import asyncio

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join

from ..engine import SessionInventory
from .config import TrainJobSessions
from .handlers import CloseHandler, GpusHandler, JobHandler, SessionsHandler
from .kernel_exits import KernelExits
from .kernels_file import read_namespaces
from .waiters import Waiters

API_ROOT = "trainjob-magics/api"
INVENTORY_KEY = "trainjob_magics_inventory"
WAITERS_KEY = "trainjob_magics_waiters"
SETTINGS_KEY = "trainjob_magics_settings"
NAME = r"(?P<namespace>[a-z0-9][-a-z0-9]{0,62})/(?P<name>[a-z0-9][-a-z0-9.]{0,252})"


class TrainJobSessionsApp(ExtensionApp):
    """The sessions API (``trainjob-magics/api/...``) of this user's TrainJobs."""

    name = "trainjob_magics"
    load_other_extensions = True

    def initialize_settings(self) -> None:
        """Start the inventory (its watches run in daemon threads until the server stops)."""
        serverapp = self.serverapp
        assert serverapp is not None
        config = TrainJobSessions(parent=serverapp)
        namespaces = [*config.namespaces, *read_namespaces(serverapp.runtime_dir)]
        inventory = SessionInventory(
            config_file=config.kubeconfig or None,
            context=config.context or None,
            namespaces=namespaces,
            all_users=config.all_users,
            kernel_ended=KernelExits(
                serverapp.kernel_manager, getattr(serverapp, "event_logger", None)
            ).ended,
        )
        loop = asyncio.get_event_loop()
        waiters = Waiters()
        inventory.listeners.append(lambda: loop.call_soon_threadsafe(waiters.wake))
        self.settings.update({INVENTORY_KEY: inventory, WAITERS_KEY: waiters, SETTINGS_KEY: config})
        self.log.info(
            "trainjob_magics: sessions API at %s (namespaces %s)",
            url_path_join(serverapp.web_app.settings["base_url"], API_ROOT),
            ", ".join(inventory.namespaces()) or "none: " + inventory.problem,
        )

    def initialize_handlers(self) -> None:
        """The four routes (the server prefixes its base URL)."""
        self.handlers.extend(
            [
                (url_path_join(API_ROOT, "sessions"), SessionsHandler),
                (url_path_join(API_ROOT, "sessions", NAME), JobHandler),
                (url_path_join(API_ROOT, "sessions", NAME, "close"), CloseHandler),
                (url_path_join(API_ROOT, "sessions", NAME, "gpus"), GpusHandler),
            ]
        )

    async def stop_extension(self) -> None:
        """End the inventory's watch threads (and answer the long-polls waiting on them)."""
        inventory: SessionInventory | None = self.settings.get(INVENTORY_KEY)
        if inventory is None:
            return
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, inventory.stop):
            self.log.warning("trainjob_magics: a watch thread did not end in time")
