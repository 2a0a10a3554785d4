"""Kueue queue state: :class:`QueueStatus` and reading it from a Workload's spec and conditions.

Conditions are read for both Kueue reason sets: ``Pending``/``Inadmissible`` (Kueue <= 0.19) and
the granular ones (``WaitingForQuota``, ``Misconfigured``...).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..kube.objects import parse_time
from ..result import QUEUE_PROBLEM, QueueStatus


def _cond(wl: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def _true(wl: Mapping[str, Any], type_: str) -> bool:
    c = _cond(wl, type_)
    return c is not None and c.get("status") == "True"


def _time(cond: Mapping[str, Any] | None) -> datetime | None:
    return parse_time((cond or {}).get("lastTransitionTime"))


def eviction_count(wl: Mapping[str, Any] | None) -> int:
    """How often the Workload was evicted (schedulingStats, else requeueState, else conditions)."""
    if not wl:
        return 0
    status = wl.get("status") or {}
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    if stats:
        return sum(int(s.get("count") or 0) for s in stats)
    count = int((status.get("requeueState") or {}).get("count") or 0)
    if count:
        return count
    return 1 if _cond(wl, "Evicted") is not None else 0


def _last_eviction(wl: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the latest eviction, also after readmission ("Previously: ...")."""
    cond = _cond(wl, "Evicted")
    if cond is None:
        return None
    message = str(cond.get("message") or "").removeprefix("Previously: ")
    reason = str(cond.get("reason") or "")
    if cond.get("status") != "True":
        preempted = _cond(wl, "Preempted")
        stats = ((wl.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
        if preempted is not None:
            reason = "Preempted"
        elif stats:
            reason = str(stats[-1].get("reason") or reason)
    return reason, message


def parse_workload(wl: Mapping[str, Any] | None, local_queue: str | None = None) -> QueueStatus:
    """QueueStatus from a Workload's spec and conditions (positions left unknown)."""
    if wl is None:
        return QueueStatus(
            "Pending",
            message="waiting for Kueue to create the Workload",
            local_queue=local_queue,
        )
    spec = wl.get("spec") or {}
    status = wl.get("status") or {}
    lq = spec.get("queueName") or local_queue
    base: dict[str, Any] = {
        "local_queue": lq,
        "cluster_queue": (status.get("admission") or {}).get("clusterQueue"),
        "workload": (wl.get("metadata") or {}).get("name"),
        "evictions": eviction_count(wl),
        "last_eviction": _last_eviction(wl),
        "raw_conditions": list(status.get("conditions") or []),
    }

    def make(state: str, cond: Mapping[str, Any] | None, message: str | None = None) -> QueueStatus:
        return QueueStatus(
            state,
            reason=str((cond or {}).get("reason") or ""),
            message=str(message if message is not None else (cond or {}).get("message") or ""),
            since=_time(cond),
            **base,
        )

    if _true(wl, "Finished"):
        return make("Finished", _cond(wl, "Finished"))
    # Keyed on Evicted, not Preempted: Kueue evicts without preempting too, e.g. waitForPodsReady
    # (on by default from 0.19, 30 min): Evicted=True, reason PodsReadyTimeout, message
    # "Exceeded the PodsReady timeout NS/NAME" and no Preempted condition
    # (kubernetes-sigs/kueue pkg/controller/core/workload_controller.go reconcileNotReadyTimeout,
    # pkg/workload/evict/evict.go SetEvictedCondition).
    evicted = _cond(wl, "Evicted") if _true(wl, "Evicted") else None
    if spec.get("active") is False:
        return make("Deactivated", evicted or _cond(wl, "QuotaReserved"))
    if evicted is not None:
        state = (
            "Preempted"
            if _true(wl, "Preempted") or evicted.get("reason") == "Preempted"
            else ("Evicted")
        )
        return make(state, evicted)
    if _true(wl, "Admitted"):
        return make("Admitted", _cond(wl, "Admitted"))
    reserved = _cond(wl, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "True":
        return make("QuotaReserved", reserved)
    message = str((reserved or {}).get("message") or "")
    if QUEUE_PROBLEM.match(message):
        return make("Inactive", reserved)
    if reserved is None:
        return make("Queued", None, "waiting for Kueue to evaluate the Workload")
    return make("Queued", reserved)


def queued_fingerprint(qs: QueueStatus | None) -> tuple[Any, ...]:
    """What makes two QueueStatus reports differ for a display."""
    if qs is None:
        return ()
    return (
        qs.state,
        qs.reason,
        qs.message,
        qs.position_in_local_queue,
        qs.position_in_cluster_queue,
        qs.cluster_queue,
        qs.position_note,
    )
