"""meta.k8s.io/v1 Table answers for kubectl (`Accept: ...;as=Table;g=meta.k8s.io`)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ...core.apierror import ApiError
from ...core.resources import Kind

INCLUDE_OBJECT = ("Object", "Metadata", "None")


def wants_table(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def include_object(query: Any) -> str:
    """`?includeObject=`: Metadata (default), Object or None, as the apiserver's asTable."""
    value = query.get("includeObject") or "Metadata"
    if value not in INCLUDE_OBJECT:
        raise ApiError(400, f'unrecognized includeObject value: "{value}"')
    return value


def human_age(ts: str | None) -> str:
    """kubectl's short duration: 5s, 3m, 2m5s, 4h, 3d..."""
    if not ts:
        return "<unknown>"
    try:
        then = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return "<invalid>"
    s = max(0, int((datetime.now(timezone.utc) - then).total_seconds()))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def _col(name: str, type_: str, desc: str, fmt: str = "", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": fmt, "description": desc, "priority": priority}


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def pod_status_text(pod: dict[str, Any]) -> str:
    """The STATUS column as kubectl's printPod computes it (simplified)."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            t = state["terminated"]
            reason = t.get("reason") or (
                f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}"
            )
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def pod_rows(pod: dict[str, Any]) -> list[Any]:
    status = pod.get("status") or {}
    css = status.get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or []) or len(css)
    ready = sum(1 for cs in css if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount", 0)) for cs in css)
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        pod_status_text(pod),
        restarts,
        human_age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
        "<none>",
        "<none>",
    ]


POD_COLUMNS = [
    _col("Name", "string", "Name must be unique within a namespace.", "name"),
    _col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "string", "The aggregate status of the containers in this pod."),
    _col(
        "Restarts", "string", "The number of times the containers in this pod have been restarted."
    ),
    _col("Age", "string", "CreationTimestamp is a timestamp representing the server time."),
    _col("IP", "string", "IP address allocated to the pod.", priority=1),
    _col("Node", "string", "Name of the Node this pod runs on.", priority=1),
    _col("Nominated Node", "string", "Nominated node name.", priority=1),
    _col("Readiness Gates", "string", "Pod readiness gates.", priority=1),
]


def _json_path(obj: dict[str, Any], path: str) -> Any:
    """The tiny JSONPath subset CRD printer columns use: `.a.b`, `.a[-1:].b`, `.a[0].b`."""
    cur: Any = obj
    for part in path.strip(".").split("."):
        idx = None
        if "[" in part:
            part, _, rest = part.partition("[")
            idx = rest.rstrip("]")
        cur = cur.get(part) if isinstance(cur, dict) else None
        if idx is not None:
            if not isinstance(cur, list) or not cur:
                return None
            cur = cur[-1] if idx == "-1:" else cur[int(idx)] if idx.lstrip("-").isdigit() else None
        if cur is None:
            return None
    return cur


def _cell(col: dict[str, Any], obj: dict[str, Any]) -> Any:
    value = _json_path(obj, col["jsonPath"])
    if value is None:
        return None
    if col.get("type") == "date":
        return human_age(value)
    return value


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "Object":
        return obj
    return _partial(obj) if include == "Metadata" else None


def to_table(
    kind: Kind,
    items: list[dict[str, Any]],
    rv: str,
    include: str = "Metadata",
    headers: bool = True,
) -> dict[str, Any]:
    """A Table for a list of objects of `kind` (pods: kubectl's columns; CRs: printer columns).

    `include` is TableOptions.includeObject; `headers=False` drops columnDefinitions, as the
    apiserver's watch encoder does after the first event (handlers/response.go).
    """
    if kind.key == "pods":
        columns = POD_COLUMNS
        rows = [{"cells": pod_rows(o), "object": _partial(o)} for o in items]
    else:
        printer = list(kind.printer_columns) or [
            {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}
        ]
        columns = [_col("Name", "string", "Name must be unique within a namespace.", "name")]
        columns += [
            _col(c["name"], "string" if c.get("type") == "date" else c.get("type", "string"), "")
            for c in printer
        ]
        rows = [
            {
                "cells": [o["metadata"]["name"]] + [_cell(c, o) for c in printer],
                "object": _partial(o),
            }
            for o in items
        ]
    for row, obj in zip(rows, items, strict=True):
        row["object"] = _row_object(obj, include)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": columns if headers else None,
        "rows": rows,
    }
