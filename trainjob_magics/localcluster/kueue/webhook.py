"""The webhook-like step: a TrainJob created with a queue-name label starts suspended."""

from __future__ import annotations

from typing import Any

from ..core.resources import TRAINJOBS, Kind
from .kinds import MANAGER, QUEUE_NAME_LABEL


def queue_name(obj: dict[str, Any]) -> str | None:
    """The LocalQueue a TrainJob asks for (its queue-name label), or None."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL) or None


def kueue_patch(obj: dict[str, Any]) -> dict[str, Any] | None:
    """Kueue's runtimePatches entry of a TrainJob, if any."""
    for patch in (obj.get("spec") or {}).get("runtimePatches") or []:
        if patch.get("manager") == MANAGER:
            return patch
    return None


def trainjob_webhook(
    kind: Kind, op: str, obj: dict[str, Any], old: dict[str, Any] | None
) -> list[str]:
    """Admission hook: on CREATE of a queued TrainJob set suspend=true and add Kueue's patch."""
    if kind.key != TRAINJOBS.key or op != "CREATE" or queue_name(obj) is None:
        return []
    spec = obj.setdefault("spec", {})
    spec["suspend"] = True
    if kueue_patch(obj) is None:
        spec.setdefault("runtimePatches", []).append({"manager": MANAGER})
    return []
