"""Kueue condition types, reasons and messages (both the legacy and the granular reason sets)."""

from __future__ import annotations

from typing import Any

from ..core.status_conditions import set_condition
from ..core.store import now_rfc3339

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
FINISHED = "Finished"
PODS_READY = "PodsReady"
DEACTIVATION_TARGET = "DeactivationTarget"
PODS_NOT_READY_MSG = "Not all pods are ready or succeeded"
PODS_RECOVERY_MSG = "At least one pod has failed, waiting for recovery"
PODS_READY_MSG = "All pods reached readiness and the workload is running"

# QuotaReserved=False reasons: granular (newer Kueue) -> legacy (Kueue <= 0.19)
WAITING_FOR_QUOTA = "WaitingForQuota"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
NO_MATCHING_FLAVOR = "NoMatchingFlavor"
MISCONFIGURED = "Misconfigured"
SUSPENDED = "Suspended"
PENDING = "Pending"
INADMISSIBLE = "Inadmissible"
LEGACY = {
    WAITING_FOR_QUOTA: PENDING,
    EXCEEDS_MAX_QUOTA: PENDING,
    NO_MATCHING_FLAVOR: PENDING,
    MISCONFIGURED: INADMISSIBLE,
    SUSPENDED: INADMISSIBLE,
    "PendingEvaluation": PENDING,
}

NO_RESERVATION_MSG = "The workload has no reservation"
ADMITTED_MSG = "The workload is admitted"


def reason_for(granular: str, style: str) -> str:
    """The reason a Kueue of ``style`` ("granular" | "legacy") would write."""
    return granular if style == "granular" else LEGACY.get(granular, granular)


def cond(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": now_rfc3339(),
    }


def get_cond(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def is_true(obj: dict[str, Any], type_: str) -> bool:
    c = get_cond(obj, type_)
    return c is not None and c.get("status") == "True"


def put(obj: dict[str, Any], type_: str, status: bool, reason: str, message: str) -> None:
    """Upsert a condition on obj's status (lastTransitionTime kept when status is unchanged)."""
    set_condition(obj.setdefault("status", {}), cond(type_, status, reason, message))
