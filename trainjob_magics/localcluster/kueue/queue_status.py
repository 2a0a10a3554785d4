"""Queue accounting: ClusterQueue/LocalQueue status (usage, counts, Active) and pending lists."""

from __future__ import annotations

import contextlib
import time
from datetime import datetime
from typing import Any

from ..core.apierror import ApiError
from ..core.quantity import format_quantity
from . import workload_conditions as C
from .kinds import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    WORKLOADS,
)
from .quota_fit import add, flavor_names, nominal, usage_of
from .scheduling import is_stopped
from .state import SimulationState
from .visibility import missing, summary


class QueueStatus(SimulationState):
    """Queue status and the visibility API (a part of KueueSimulation; uses Scheduling's order)."""

    def ordered_pending(self, cq_name: str) -> list[dict[str, Any]]:
        """Pending workloads of a ClusterQueue in queue order (what the visibility API lists)."""
        with self._lock:
            lqs = {
                (o["metadata"]["namespace"], o["metadata"]["name"]): o
                for o in self.store.list(LOCAL_QUEUES)[0]
            }
            items = []
            for wl in self.store.list(WORKLOADS)[0]:
                if C.is_true(wl, C.QUOTA_RESERVED) or C.is_true(wl, C.FINISHED):
                    continue
                if (wl.get("spec") or {}).get("active") is False:
                    continue
                lq = lqs.get((wl["metadata"]["namespace"], wl["spec"].get("queueName", "")))
                if lq is None or lq["spec"].get("clusterQueue") != cq_name:
                    continue
                items.append(wl)
            return self._sorted(items)

    def _update_queues(
        self,
        cqs: dict[str, dict[str, Any]],
        lqs: dict[tuple[str, str], dict[str, Any]],
        flavors: set[str],
    ) -> None:
        wls = self.store.list(WORKLOADS)[0]
        for cq_name, cq in cqs.items():
            mine = [
                w
                for w in wls
                if (w.get("status", {}).get("admission") or {}).get("clusterQueue") == cq_name
                and C.is_true(w, C.QUOTA_RESERVED)
                and not C.is_true(w, C.FINISHED)
            ]
            usage: dict[Any, Any] = {}
            for w in mine:
                usage = add(usage, usage_of(w["status"]["admission"]))
            quota = nominal(cq)
            by_flavor: dict[str, list[dict[str, Any]]] = {}
            for (fname, res), _q in quota.items():
                amount = usage.get((fname, res), 0)
                by_flavor.setdefault(fname, []).append(
                    {"name": res, "total": format_quantity(amount, res), "borrowed": "0"}
                )
            flv = [{"name": f, "resources": r} for f, r in by_flavor.items()]
            status = dict(cq.get("status") or {})
            status.update(
                pendingWorkloads=len(self.ordered_pending(cq_name)),
                reservingWorkloads=len(mine),
                admittedWorkloads=sum(1 for w in mine if C.is_true(w, C.ADMITTED)),
                flavorsReservation=flv,
                flavorsUsage=flv,
            )
            cq = {**cq, "status": status}
            missing_flavors = [f for f in flavor_names(cq) if f not in flavors]
            if is_stopped(cq):
                C.put(cq, "Active", False, "Stopped", "Can't admit new workloads: is stopped.")
            elif missing_flavors:
                C.put(
                    cq,
                    "Active",
                    False,
                    "FlavorNotFound",
                    "Can't admit new workloads: references missing ResourceFlavor(s): "
                    f"{','.join(missing_flavors)}.",
                )
            else:
                C.put(cq, "Active", True, "Ready", "Can admit new workloads")
            with contextlib.suppress(ApiError):
                self.store.replace(CLUSTER_QUEUES, cq, check_rv=False)
        for (ns, name), lq in lqs.items():
            mine = [
                w
                for w in wls
                if w["metadata"]["namespace"] == ns
                and (w.get("spec") or {}).get("queueName") == name
                and not C.is_true(w, C.FINISHED)
            ]
            reserving = [w for w in mine if C.is_true(w, C.QUOTA_RESERVED)]
            status = dict(lq.get("status") or {})
            status.update(
                pendingWorkloads=sum(
                    1
                    for w in mine
                    if not C.is_true(w, C.QUOTA_RESERVED) and w["spec"].get("active") is not False
                ),
                reservingWorkloads=len(reserving),
                admittedWorkloads=sum(1 for w in reserving if C.is_true(w, C.ADMITTED)),
            )
            lq = {**lq, "status": status}
            cq = cqs.get((lq.get("spec") or {}).get("clusterQueue", ""))
            if is_stopped(lq):
                C.put(lq, "Active", False, "Stopped", "LocalQueue is stopped")
            elif cq is None:
                C.put(
                    lq,
                    "Active",
                    False,
                    "ClusterQueueDoesNotExist",
                    "Can't submit new workloads to clusterQueue",
                )
            elif not self._cq_active(cq, flavors):
                C.put(
                    lq,
                    "Active",
                    False,
                    "ClusterQueueIsInactive",
                    "Can't submit new workloads to clusterQueue",
                )
            else:
                C.put(lq, "Active", True, "Ready", "Can submit new workloads to localQueue")
            with contextlib.suppress(ApiError):
                self.store.replace(LOCAL_QUEUES, lq, check_rv=False)

    # -- visibility API ----------------------------------------------------------------------

    def _unseen(self, lq: dict[str, Any]) -> bool:
        """A LocalQueue younger than ``visibility_delay`` seconds (not in the cache yet)."""
        delay = self.config.visibility_delay
        if delay <= 0:
            return False
        created = str((lq.get("metadata") or {}).get("creationTimestamp") or "")
        try:
            born = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return False
        return time.time() - born < delay

    def pending_workloads(
        self,
        version: str,
        plural: str,
        namespace: str | None,
        name: str,
        query: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """GET .../localqueues/NAME/pendingworkloads or .../clusterqueues/NAME/pendingworkloads."""
        query = query or {}
        limit = int(query.get("limit") or 1000)
        offset = int(query.get("offset") or 0)
        if plural == LOCAL_QUEUES.plural:
            lq = self.store.try_get(LOCAL_QUEUES, namespace, name)
            if lq is None or self._unseen(lq):
                # Kueue's queue manager answers 404 for a LocalQueue it has not cached yet
                # (pkg/visibility/api/.../pending_workloads_lq.go)
                raise missing("localqueues", name)
            cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
            ordered = self.ordered_pending(cq_name)
            return summary(
                version, ordered, namespace=namespace, local_queue=name, limit=limit, offset=offset
            )
        if self.store.try_get(CLUSTER_QUEUES, None, name) is None:
            raise missing("clusterqueues", name)
        return summary(
            version,
            self.ordered_pending(name),
            namespace=None,
            local_queue=None,
            limit=limit,
            offset=offset,
        )
