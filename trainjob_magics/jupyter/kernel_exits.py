"""Which kernels of this Jupyter server have exited or are exiting, for the inventory: a job
whose kernel exited was closed by that kernel's exit even when its closed-by note could not be
written first (a Role without `patch` on trainjobs, or an API server too slow for the seconds
jupyter_client gives a kernel to exit: ``KernelManager.shutdown_wait_time``)."""

from __future__ import annotations

import threading
import time
from typing import Any

# jupyter_server emits it when a start, restart, shutdown or interrupt ends
# (jupyter_server/services/kernels/kernelmanager.py, emit_kernel_action_event)
KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"
REMEMBER_SECONDS = 600.0  # a kernel's restart or shutdown counts this long after it ended


class KernelExits:
    """``ended(kernel_id, pid)``: whether the process ``pid`` of kernel ``kernel_id`` has exited
    or is exiting. Known from the kernel manager (a kernel shutting down; a kernel whose process
    is no longer ``pid``: restarted) and the server's kernel-action events (a restart or shutdown
    that ended, the kernel perhaps gone from the manager)."""

    def __init__(self, kernel_manager: Any, event_logger: Any = None) -> None:
        self._kernels = kernel_manager
        self._lock = threading.Lock()
        self._ended: dict[str, float] = {}  # kernel id -> when its restart or shutdown ended
        if event_logger is not None:
            event_logger.add_listener(schema_id=KERNEL_ACTIONS, listener=self._on_action)

    async def _on_action(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """jupyter_events calls it with these keywords; it must never raise (a listener's
        exception fails the kernel action that emitted the event)."""
        try:
            if data.get("action") in ("restart", "shutdown") and data.get("kernel_id"):
                self.remember(str(data["kernel_id"]))
        except Exception:  # a record for the sidebar is never worth a failed kernel action
            pass

    def remember(self, kernel_id: str) -> None:
        """``kernel_id`` was restarted or shut down just now."""
        now = time.monotonic()
        with self._lock:
            self._ended[kernel_id] = now
            for kid, when in list(self._ended.items()):
                if now - when > REMEMBER_SECONDS:
                    del self._ended[kid]

    def ended(self, kernel_id: str, pid: str) -> bool:
        with self._lock:
            when = self._ended.get(kernel_id)
        if when is not None and time.monotonic() - when <= REMEMBER_SECONDS:
            return True
        try:
            kernel = self._kernels.get_kernel(kernel_id)
        except Exception:  # not a kernel of this server (jupyter_server: a 404 HTTPError)
            return False
        if getattr(kernel, "shutting_down", False):
            return True
        now_pid = getattr(getattr(kernel, "provisioner", None), "pid", None)
        return bool(pid and now_pid and str(now_pid) != pid)  # restarted since it made the job
