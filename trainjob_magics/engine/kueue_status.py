"""Kueue queue state: :class:`QueueStatus` and reading it from a Workload's spec and conditions.

Conditions are read for both Kueue reason sets: ``Pending``/``Inadmissible`` (Kueue <= 0.19) and
the granular ones (``WaitingForQuota``, ``Misconfigured``...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .pods import parse_time

# Messages Kueue writes when the queue itself keeps a workload out (not a matter of quota).
QUEUE_PROBLEM = re.compile(
    r"^(LocalQueue|ClusterQueue) (\S*) (doesn't exist|is inactive|is stopped|"
    r"is terminating or missing)$"
)
WAITING_STATES = ("Queued", "Preempted", "Evicted", "Pending")


@dataclass
class QueueStatus:
    """Where a queued TrainJob stands in Kueue.

    ``state``: "Pending" (no Workload yet), "Queued", "QuotaReserved", "Admitted", "Evicted",
    "Preempted", "Inactive" (queue missing/inactive/stopped), "Deactivated", "Finished",
    "Unknown" (Workloads cannot be read). Positions are 0-based; None means unknown.
    """

    state: str
    reason: str = ""
    message: str = ""
    local_queue: str | None = None
    cluster_queue: str | None = None
    workload: str | None = None
    position_in_local_queue: int | None = None
    position_in_cluster_queue: int | None = None
    since: datetime | None = None
    evictions: int = 0
    position_note: str = ""  # why the position is unknown ("forbidden", "not served", ...)
    last_eviction: tuple[str, str] | None = None  # (reason, message) of the latest eviction
    raw_conditions: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def waiting(self) -> bool:
        """True while the job waits for (re)admission."""
        return self.state in WAITING_STATES

    @property
    def admitted(self) -> bool:
        return self.state == "Admitted"

    def position_text(self) -> str:
        """'position 2 in LocalQueue q (3 in ClusterQueue cq)' (1-based), or 'position unknown'."""
        if self.position_in_local_queue is None:
            note = f" ({self.position_note})" if self.position_note else ""
            return f"position unknown{note}"
        text = f"position {self.position_in_local_queue + 1} in LocalQueue {self.local_queue}"
        if self.position_in_cluster_queue is not None:
            text += f" ({self.position_in_cluster_queue + 1} in ClusterQueue"
            text += f" {self.cluster_queue})" if self.cluster_queue else ")"
        return text

    def summary(self) -> str:
        """One line for status displays."""
        where = f" in {self.local_queue}" if self.local_queue else ""
        if self.state == "Queued":
            head = f"Queued{where}, {self.position_text()}"
        elif self.state in ("Preempted", "Evicted"):
            head = f"{self.state} ({self.reason}), waiting for readmission{where}"
            if self.position_in_local_queue is not None:
                head += f", {self.position_text()}"
        elif self.state == "QuotaReserved":
            head = f"Quota reserved in ClusterQueue {self.cluster_queue}"
            if self.message.startswith("Quota reserved"):
                return f"{head}, waiting for admission checks"
        elif self.state == "Admitted":
            head = f"Admitted by ClusterQueue {self.cluster_queue}"
            return head
        else:
            head = f"{self.state}{where}"
        return f"{head}: {self.message}" if self.message else head


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
