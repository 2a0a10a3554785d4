"""Test controls of the Kueue simulation (callable from any thread): evict, preempt, quota, stop."""

from __future__ import annotations

import time
from typing import Any

from ..core.resources import TRAINJOBS
from . import workload_conditions as C
from .kinds import (
    CLUSTER_QUEUES,
    JOB_UID_LABEL,
    LOCAL_QUEUES,
    WORKLOADS,
)
from .state import SimulationState


class QueueControls(SimulationState):
    """Evict, preempt, set quota, stop a queue (a part of KueueSimulation)."""

    def workload_for(self, trainjob: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The Workload of a TrainJob (by the job-uid label), or None."""
        ns = namespace or self.config.namespace
        tj = self.store.try_get(TRAINJOBS, ns, trainjob)
        if tj is None:
            return None
        for wl in self.store.list(WORKLOADS, ns)[0]:
            if (wl["metadata"].get("labels") or {}).get(JOB_UID_LABEL) == tj["metadata"]["uid"]:
                return wl
        return None

    def evict(
        self,
        trainjob: str,
        reason: str = "PodsReadyTimeout",
        message: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Evict an admitted workload: the TrainJob is suspended, its pods go, it is requeued."""
        with self._lock:
            wl = self.workload_for(trainjob, namespace)
            if wl is None or not C.is_true(wl, C.QUOTA_RESERVED):
                raise ValueError(f"TrainJob {trainjob} has no admitted Workload to evict")
            text = message or {
                "PodsReadyTimeout": "Exceeded the PodsReady timeout "
                f"{wl['metadata']['namespace']}/{wl['metadata']['name']}",
                "ClusterQueueStopped": "The ClusterQueue is stopped",
                "LocalQueueStopped": "The LocalQueue is stopped",
            }.get(reason, f"The workload was evicted: {reason}")
            self._evict(wl, reason, text, time.time())
            wl = self._write(wl)
            tj = self._trainjob(wl)
            if tj is not None:
                self._sync_trainjob(tj, wl, False)
        self._kick()
        return wl

    def preempt(
        self, trainjob: str, namespace: str | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """Preempt a workload as if a higher-priority one needed its quota."""
        wl = self.workload_for(trainjob, namespace)
        if wl is None:
            raise ValueError(f"TrainJob {trainjob} has no Workload")
        preemptor = by or "00000000-0000-0000-0000-000000000000"
        message = (
            f"Preempted to accommodate a workload (UID: {preemptor}, JobUID: {preemptor}) "
            "due to prioritization in the ClusterQueue"
        )
        return self.evict(trainjob, "Preempted", message, namespace)

    def set_quota(
        self,
        quota: dict[str, str | int],
        cluster_queue: str | None = None,
        flavor: str | None = None,
    ) -> None:
        """Set nominal quota (resource -> amount) of a flavor of a ClusterQueue."""
        name = cluster_queue or self.config.cluster_queue
        fname = flavor or self.config.flavor

        def apply(cq: dict[str, Any]) -> None:
            groups = cq["spec"].setdefault("resourceGroups", [])
            for res, amount in quota.items():
                rg = next((g for g in groups if res in g.get("coveredResources", [])), None)
                if rg is None:
                    rg = groups[0] if groups else None
                    if rg is None:
                        rg = {"coveredResources": [], "flavors": [{"name": fname, "resources": []}]}
                        groups.append(rg)
                    rg["coveredResources"].append(res)
                    for fl in rg["flavors"]:
                        fl["resources"].append({"name": res, "nominalQuota": "0"})
                fl = next((f for f in rg["flavors"] if f["name"] == fname), None)
                if fl is None:
                    raise ValueError(f"ClusterQueue {name} has no flavor {fname}")
                for r in fl["resources"]:
                    if r["name"] == res:
                        r["nominalQuota"] = str(amount)

        with self._lock:
            self.store.mutate(CLUSTER_QUEUES, None, name, apply)
        self._kick()

    def set_stop_policy(self, local_queue: str | None = None, policy: str = "Hold") -> None:
        """Stop (``Hold``/``HoldAndDrain``) or resume (``None``) a LocalQueue."""
        name = local_queue or self.config.local_queue or ""

        def apply(lq: dict[str, Any]) -> None:
            lq["spec"]["stopPolicy"] = policy

        self.store.mutate(LOCAL_QUEUES, self.config.namespace, name, apply)
        self._kick()
