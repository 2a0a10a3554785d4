"""Eviction in two phases: Evicted (quota kept) while pods remain, then release and requeue."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..core.resources import PODS
from . import workload_conditions as C
from .state import SimulationState

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


class Eviction(SimulationState):
    """Eviction of admitted Workloads (a part of KueueSimulation)."""

    def _pods_left(self, tj: dict[str, Any]) -> bool:
        pods, _ = self.store.list(PODS, tj["metadata"]["namespace"])
        name = tj["metadata"]["name"]
        return any((p["metadata"].get("labels") or {}).get(JOBSET_NAME_LABEL) == name for p in pods)

    def _evict(self, wl: dict[str, Any], reason: str, message: str, now: float) -> None:
        """Phase 1: Evicted=True (quota kept until the pods are gone); the job is suspended."""
        uid = wl["metadata"]["uid"]
        C.put(wl, C.EVICTED, True, reason, message)
        if reason == "Preempted":
            C.put(wl, C.PREEMPTED, True, "InClusterQueue", message)
        C.put(wl, C.REQUEUED, False, reason, message)
        status = wl.setdefault("status", {})
        since = self._admitted_at.pop(uid, None)
        if since is not None:
            past = int(status.get("accumulatedPastExecutionTimeSeconds") or 0)
            status["accumulatedPastExecutionTimeSeconds"] = past + int(now - since)
        # schedulingStats: a deactivation counts as reason "Deactivated" with its cause
        # (pkg/workload/workload.go ReportEvictedWorkload; measured on v0.19.2)
        stat_reason, cause = reason, ""
        if reason.startswith("DeactivatedDueTo"):
            stat_reason, cause = "Deactivated", reason[len("DeactivatedDueTo") :]
        stats = status.setdefault("schedulingStats", {}).setdefault("evictions", [])
        for row in stats:
            if row.get("reason") == stat_reason and row.get("underlyingCause", "") == cause:
                row["count"] = int(row.get("count", 0)) + 1
                break
        else:
            stats.append({"reason": stat_reason, "underlyingCause": cause, "count": 1})

    def _finish_eviction(self, wl: dict[str, Any], now: float) -> None:
        """Phase 2 (pods gone): release the quota and requeue (after the backoff, if any)."""
        uid = wl["metadata"]["uid"]
        ev = C.get_cond(wl, C.EVICTED) or {}
        reason, message = ev.get("reason", "Evicted"), ev.get("message", "")
        status = wl["status"]
        status.pop("admission", None)
        # pkg/workload: after an eviction, PendingEvaluation (granular) / Pending (legacy)
        C.put(
            wl,
            C.QUOTA_RESERVED,
            False,
            C.reason_for("PendingEvaluation", self.config.reasons),
            message,
        )
        C.put(wl, C.ADMITTED, False, "NoReservation", C.NO_RESERVATION_MSG)
        if (wl.get("spec") or {}).get("active") is False:
            return
        backoff = self.config.requeue_backoff
        # requeueState counts the backoff requeues of waitForPodsReady and admission checks
        # (pkg/controller/core/workload_controller.go); a preemption leaves it unset (measured
        # on v0.19.2)
        if backoff > 0 or reason in ("PodsReadyTimeout", "AdmissionCheck"):
            count = int((status.get("requeueState") or {}).get("count") or 0) + 1
            status["requeueState"] = {"count": count}
        if backoff > 0:
            at = now + backoff
            self._requeue_at[uid] = at
            status["requeueState"]["requeueAt"] = datetime.fromtimestamp(at, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        elif reason in ("PodsReadyTimeout", "AdmissionCheck"):
            # requeued once the backoff is over (here: at once)
            C.put(wl, C.REQUEUED, True, "BackoffFinished", "The workload backoff was finished")
        else:
            C.put(wl, C.REQUEUED, True, reason, message)
        self._order[uid] = next(self._seq)  # requeued by eviction time: to the back
