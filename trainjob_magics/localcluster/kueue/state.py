"""SimulationState: the state the Kueue simulation's parts share, and the Workload read/write."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from typing import Any

from ..core.apierror import ApiError
from ..core.resources import TRAINJOBS
from ..core.store import Store
from .kinds import WORKLOADS
from .simulation_config import KueueConfig


class SimulationState:
    """Attributes KueueSimulation sets, plus the Workload and TrainJob accessors its parts use."""

    store: Store
    config: KueueConfig
    _lock: threading.RLock
    _seq: itertools.count[int]
    _order: dict[str, int]  # workload uid -> place in the queue order
    _requeue_at: dict[str, float]  # workload uid -> not before (epoch seconds)
    _admitted_at: dict[str, float]  # workload uid -> epoch seconds
    _max_exec: dict[str, int]
    _reserved_at: dict[str, float]  # waiting for (simulated) admission checks
    _running: dict[str, list[dict[str, Any]]]  # ClusterQueue -> admitted, not evicted (a pass)
    _preempting: dict[str, int]  # preemptor workload uid -> workloads it waits to preempt
    _loop: asyncio.AbstractEventLoop | None
    _wakeup: asyncio.Event | None

    def _trainjob(self, wl: dict[str, Any]) -> dict[str, Any] | None:
        owner = (wl["metadata"].get("ownerReferences") or [{}])[0]
        tj = self.store.try_get(TRAINJOBS, wl["metadata"]["namespace"], owner.get("name", ""))
        if tj is None or tj["metadata"]["uid"] != owner.get("uid"):
            return None
        return tj

    def _write(self, wl: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.store.replace(WORKLOADS, wl, check_rv=False)
        except ApiError:
            return wl

    def _kick(self) -> None:
        """Ask the loop for a pass soon (thread-safe)."""
        loop, wake = self._loop, self._wakeup
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)
