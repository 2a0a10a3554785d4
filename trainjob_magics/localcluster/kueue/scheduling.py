"""Queueing and admission: queue checks, queue order, FIFO/StrictFIFO fitting into quota."""

from __future__ import annotations

from typing import Any

from . import workload_conditions as C
from .quota_fit import add, fit, flavor_names
from .state import SimulationState
from .workloads import resource_requests

CHECKS_PENDING_MSG = "The workload has not all admission checks"


def is_stopped(obj: dict[str, Any]) -> bool:
    """A LocalQueue or ClusterQueue with a stopPolicy other than None."""
    return ((obj.get("spec") or {}).get("stopPolicy") or "None") != "None"


class Scheduling(SimulationState):
    """Pending reasons and quota admission (a part of KueueSimulation)."""

    def _queue_problem(
        self,
        wl: dict[str, Any],
        lqs: dict[tuple[str, str], dict[str, Any]],
        cqs: dict[str, dict[str, Any]],
        flavors: set[str],
    ) -> tuple[str, str] | None:
        name = (wl.get("spec") or {}).get("queueName", "")
        lq = lqs.get((wl["metadata"]["namespace"], name))
        if lq is None:
            return C.MISCONFIGURED, f"LocalQueue {name} doesn't exist"
        if is_stopped(lq):
            return C.SUSPENDED, f"LocalQueue {name} is stopped"
        cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
        cq = cqs.get(cq_name)
        if cq is None:
            return C.MISCONFIGURED, f"ClusterQueue {cq_name} doesn't exist"
        if not self._cq_active(cq, flavors):
            return C.SUSPENDED, f"ClusterQueue {cq_name} is inactive"
        return None

    @staticmethod
    def _cq_active(cq: dict[str, Any], flavors: set[str]) -> bool:
        return not is_stopped(cq) and all(f in flavors for f in flavor_names(cq))

    def _set_pending(self, wl: dict[str, Any], granular: str, message: str) -> None:
        reason = C.reason_for(granular, self.config.reasons)
        C.put(wl, C.QUOTA_RESERVED, False, reason, message)
        C.put(wl, C.ADMITTED, False, "NoReservation", C.NO_RESERVATION_MSG)
        wl.setdefault("status", {})["resourceRequests"] = resource_requests(wl)
        self._write(wl)

    def _sorted(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Queue order: priority (high first), then time entered the queue (FIFO)."""
        return sorted(
            items,
            key=lambda w: (
                -int((w.get("spec") or {}).get("priority") or 0),
                self._order.get(w["metadata"]["uid"], 1 << 60),
            ),
        )

    def _schedule(
        self, cq: dict[str, Any], ordered: list[dict[str, Any]], used: Any, now: float
    ) -> None:
        strict = (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
        blocked = False
        for wl in ordered:
            uid = wl["metadata"]["uid"]
            at = self._requeue_at.get(uid)
            if at is not None:
                if at > now:
                    continue
                del self._requeue_at[uid]
                C.put(wl, C.REQUEUED, True, "BackoffFinished", "The workload backoff was finished")
                wl["status"].get("requeueState", {}).pop("requeueAt", None)
            result = fit(wl, cq, used)
            if not result.ok or blocked:
                if result.ok:  # StrictFIFO: the head blocks everyone behind it
                    result.reason, result.message = C.WAITING_FOR_QUOTA, self._head_message(wl)
                self._set_pending(wl, result.reason, result.message)
                blocked = blocked or strict
                continue
            used = add(used, result.usage)
            self._admit(wl, cq, result.pod_sets, now)

    @staticmethod
    def _head_message(wl: dict[str, Any]) -> str:
        cond = C.get_cond(wl, C.QUOTA_RESERVED) or {}
        return cond.get("message") or "Workload is waiting behind the head of a StrictFIFO queue"

    def _admit(
        self, wl: dict[str, Any], cq: dict[str, Any], pod_sets: list[dict[str, Any]], now: float
    ) -> None:
        cq_name = cq["metadata"]["name"]
        status = wl.setdefault("status", {})
        status["admission"] = {"clusterQueue": cq_name, "podSetAssignments": pod_sets}
        status.pop("resourceRequests", None)
        C.put(
            wl, C.QUOTA_RESERVED, True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}"
        )
        uid = wl["metadata"]["uid"]
        if self.config.admission_check_delay > 0:
            self._reserved_at[uid] = now
            C.put(wl, C.ADMITTED, False, "UnsatisfiedChecks", CHECKS_PENDING_MSG)
        else:
            C.put(wl, C.ADMITTED, True, "Admitted", C.ADMITTED_MSG)
        for type_ in (C.EVICTED, C.PREEMPTED):
            old = C.get_cond(wl, type_)
            if old is not None and old.get("status") == "True":
                C.put(wl, type_, False, "QuotaReserved", f"Previously: {old.get('message', '')}")
        if C.is_true(wl, C.ADMITTED):
            self._admitted_at[uid] = now
        wl = self._write(wl)
        tj = self._trainjob(wl)
        if tj is not None:
            self._sync_trainjob(tj, wl, C.is_true(wl, C.ADMITTED))
