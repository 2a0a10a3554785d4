"""Reading Kubernetes objects as plain dicts: names, phases, labels, timestamps, conditions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

Pod = Mapping[str, Any]


def labels_of(pod: Pod) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def label_index(pod: Pod, key: str) -> str | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(key)
    if value is None:
        value = (meta.get("annotations") or {}).get(key)
    return None if value is None else str(value)


def pod_name(pod: Pod) -> str:
    """``metadata.name`` of a pod."""
    return str((pod.get("metadata") or {}).get("name") or "")


def pod_phase(pod: Pod) -> str:
    """``status.phase`` of a pod (``Unknown`` when absent)."""
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_terminating(pod: Pod) -> bool:
    """True when the pod has a deletionTimestamp."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_running(pod: Pod) -> bool:
    """Running and not being deleted."""
    return pod_phase(pod) == "Running" and not is_terminating(pod)


def parse_time(value: Any) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, ``Z`` suffix) as a datetime; None when absent or bad."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def created_at(pod: Pod) -> datetime | None:
    return parse_time((pod.get("metadata") or {}).get("creationTimestamp"))


def created_ts(pod: Pod) -> float:
    created = created_at(pod)
    return created.timestamp() if created else 0.0


def is_ready(pod: Pod) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def condition_of(trainjob: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (trainjob.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None
