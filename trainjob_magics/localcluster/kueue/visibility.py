"""The visibility API: pending workloads of a LocalQueue or ClusterQueue, with positions."""

from __future__ import annotations

from typing import Any

from ..core.apierror import not_found
from .kinds import VISIBILITY_GROUP


def _item(wl: dict[str, Any], pos_cq: int, pos_lq: int) -> dict[str, Any]:
    meta = wl["metadata"]
    keep = ("name", "namespace", "uid", "creationTimestamp", "labels", "ownerReferences")
    return {
        "metadata": {k: meta[k] for k in keep if k in meta},
        "priority": int((wl.get("spec") or {}).get("priority") or 0),
        "localQueueName": (wl.get("spec") or {}).get("queueName", ""),
        "positionInClusterQueue": pos_cq,
        "positionInLocalQueue": pos_lq,
    }


def summary(
    version: str,
    ordered: list[dict[str, Any]],
    *,
    namespace: str | None,
    local_queue: str | None,
    limit: int = 1000,
    offset: int = 0,
) -> dict[str, Any]:
    """PendingWorkloadsSummary for the ClusterQueue order ``ordered`` (0-based positions).

    With ``local_queue`` only that LocalQueue's workloads are listed.
    """
    items: list[dict[str, Any]] = []
    per_lq: dict[tuple[str, str], int] = {}
    for pos_cq, wl in enumerate(ordered):
        key = (wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName", ""))
        pos_lq = per_lq.get(key, 0)
        per_lq[key] = pos_lq + 1
        if local_queue is not None and key != (namespace, local_queue):
            continue
        items.append(_item(wl, pos_cq, pos_lq))
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": f"{VISIBILITY_GROUP}/{version}",
        "metadata": {"creationTimestamp": None},
        "items": items[offset : offset + limit],
    }


def missing(plural: str, name: str) -> Exception:
    return not_found(plural, VISIBILITY_GROUP, name)
