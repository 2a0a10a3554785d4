"""meta.k8s.io/v1 Table answers for kubectl (`Accept: ...;as=Table;g=meta.k8s.io`)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from ...core.apierror import ApiError
from ...core.resources import Kind
from .core_tables import PRINTERS

INCLUDE_OBJECT = ("Object", "Metadata", "None")


def wants_table(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def include_object(query: Any) -> str:
    """`?includeObject=`: Metadata (default), Object or None, as the apiserver's asTable."""
    value = query.get("includeObject") or "Metadata"
    if value not in INCLUDE_OBJECT:
        raise ApiError(400, f'unrecognized includeObject value: "{value}"')
    return value


def _parse_time(ts: str) -> datetime | None:
    """An RFC 3339 timestamp (Time or MicroTime) as metav1.Time parses it."""
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%S%z"):
        try:
            then = datetime.strptime(ts, fmt)
        except ValueError:
            continue
        return then if then.tzinfo else then.replace(tzinfo=timezone.utc)
    return None


def human_duration(seconds: float) -> str:
    """apimachinery pkg/util/duration HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        dy = (h // 24) % 365
        return f"{h // 24 // 365}y{dy}d" if dy else f"{h // 24 // 365}y"
    return f"{h // 24 // 365}y"


def human_age(ts: str | None) -> str:
    """printers translateTimestampSince: `<unknown>` for a zero time, else HumanDuration."""
    if not ts:
        return "<unknown>"
    then = _parse_time(ts)
    if then is None:
        return "<invalid>"
    return human_duration((datetime.now(timezone.utc) - then).total_seconds())


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


_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_CREATED_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)

# pkg/printers/internalversion/printers.go: namespaceColumnDefinitions, printNamespace.
NAMESPACE_COLUMNS = [
    _col("Name", "string", _NAME_DOC, "name"),
    _col("Status", "string", "The status of the namespace"),
    _col("Age", "string", _CREATED_DOC),
]

# pkg/printers/internalversion/printers.go: eventColumnDefinitions; the server always prints
# wide (pkg/printers/storage TableConvertor: GenerateOptions{Wide: true}), kubectl hides the
# priority-1 columns unless `-o wide`.
EVENT_COLUMNS = [
    _col(
        "Last Seen",
        "string",
        "The time at which the most recent occurrence of this event was recorded.",
    ),
    _col(
        "Type",
        "string",
        "Type of this event (Normal, Warning), new types could be added in the future",
    ),
    _col(
        "Reason",
        "string",
        "This should be a short, machine understandable string that gives the reason for "
        "the transition into the object's current status.",
    ),
    _col("Object", "string", "The object that this event is about."),
    _col(
        "Subobject",
        "string",
        "If referring to a piece of an object instead of an entire object, this string should "
        "contain a valid JSON/Go field access statement, such as "
        "desiredState.manifest.containers[2].",
        priority=1,
    ),
    _col(
        "Source",
        "string",
        "The component reporting this event. Should be a short machine understandable string.",
        priority=1,
    ),
    _col("Message", "string", "A human-readable description of the status of this operation."),
    _col(
        "First Seen",
        "string",
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
        priority=1,
    ),
    _col("Count", "string", "The number of times this event has occurred.", priority=1),
    _col("Name", "string", _NAME_DOC, "name", priority=1),
]


def event_cells(ev: dict[str, Any]) -> list[Any]:
    """printEvent (wide), from the core/v1 object."""
    first = human_age(ev.get("firstTimestamp"))
    if not ev.get("firstTimestamp"):
        first = human_age(ev.get("eventTime"))
    last = human_age(ev.get("lastTimestamp")) if ev.get("lastTimestamp") else first
    count = int(ev.get("count") or 0)
    series = ev.get("series")
    if series:
        last = human_age(series.get("lastObservedTime"))
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1  # singleton events have no count in the new API
    involved = ev.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = ev.get("source") or {}
    component = source.get("component") or ev.get("reportingComponent") or ""
    instance = source.get("host") or ev.get("reportingInstance") or ""
    return [
        last,
        ev.get("type") or "",
        ev.get("reason") or "",
        target,
        involved.get("fieldPath") or "",
        f"{component}, {instance}" if instance else component,
        str(ev.get("message") or "").strip(),
        first,
        count,
        (ev.get("metadata") or {}).get("name", ""),
    ]


def _json_path(obj: dict[str, Any], path: str) -> Any:
    """The JSONPath subset CRD printer columns use: `.a.b`, `.a[-1:].b`, `.a[0].b`,
    `.a[?(@.k=='v')].b` (the first match)."""
    cur: Any = obj
    for part in re.findall(r"[^.\[]+|\[[^\]]*\]", path.strip(".")):
        if part.startswith("["):
            idx = part[1:-1]
            if not isinstance(cur, list) or not cur:
                return None
            flt = re.fullmatch(r"\?\(@\.([\w.-]+)\s*==\s*['\"](.*)['\"]\)", idx)
            if flt:
                cur = next(
                    (
                        i
                        for i in cur
                        if isinstance(i, dict) and str(i.get(flt.group(1))) == flt.group(2)
                    ),
                    None,
                )
            elif idx == "-1:":
                cur = cur[-1]
            elif idx.lstrip("-").isdigit() and -len(cur) <= int(idx) < len(cur):
                cur = cur[int(idx)]
            else:
                return None
        else:
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur is None:
            return None
    return cur


def _cell(col: dict[str, Any], obj: dict[str, Any]) -> Any:
    """tableconvertor.go: strings as jsonpath prints them, other types by cellForJSONValue
    (a `date` becomes ConvertToHumanReadableDateType, i.e. the age)."""
    value = _json_path(obj, col["jsonPath"])
    if value is None:
        return None
    type_ = col.get("type", "string")
    if type_ == "date":
        return human_age(value) if isinstance(value, str) else None
    if type_ == "string":
        if isinstance(value, bool):
            return "true" if value else "false"
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if type_ == "integer":
        return (
            int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        )
    if type_ == "number":
        return (
            float(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else None
        )
    if type_ == "boolean":
        return value if isinstance(value, bool) else None
    return None


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "Object":
        return obj
    return _partial(obj) if include == "Metadata" else None


def crd_columns(kind: Kind) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The printer columns of a custom resource (apiextensions `serveDefaultColumnsIfEmpty`:
    an Age column of type date when the CRD declares none) and its column definitions."""
    printer = list(kind.printer_columns) or [
        {
            "jsonPath": ".metadata.creationTimestamp",
            "name": "Age",
            "type": "date",
            "description": _CREATED_DOC,
        }
    ]
    columns = [_col("Name", "string", _NAME_DOC, "name")]
    for c in printer:
        desc = c.get("description") or (
            f"Custom resource definition column (in JSONPath format): {c['jsonPath']}"
        )
        columns.append(
            _col(
                c["name"], c.get("type", "string"), desc, c.get("format", ""), c.get("priority", 0)
            )
        )
    return printer, columns


def to_table(
    kind: Kind,
    items: list[dict[str, Any]],
    rv: str,
    include: str = "Metadata",
    headers: bool = True,
    meta: dict[str, Any] | None = None,
    objects: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Table for a list of objects of `kind`: the built-in printers' columns for pods,
    namespaces, events and the kinds of ``core_tables.PRINTERS``, the CRD's printer columns
    otherwise.

    `include` is TableOptions.includeObject; `headers=False` drops columnDefinitions, as the
    apiserver's watch encoder does after the first event (handlers/response.go); `meta` is the
    list's metadata (continue, remainingItemCount); `objects` are the rows' objects when they
    differ from `items` (an events.k8s.io/v1 view of core/v1 Events).
    """
    if kind.key == "pods":
        columns = POD_COLUMNS
        cells = [pod_rows(o) for o in items]
    elif kind.key == "namespaces":
        columns = NAMESPACE_COLUMNS
        cells = [
            [
                o["metadata"]["name"],
                (o.get("status") or {}).get("phase", ""),
                human_age(o["metadata"].get("creationTimestamp")),
            ]
            for o in items
        ]
    elif kind.kind == "Event" and kind.group in ("", "events.k8s.io"):
        columns = EVENT_COLUMNS
        cells = [event_cells(o) for o in items]
    elif kind.group == "" and kind.plural in PRINTERS:
        columns, row = PRINTERS[kind.plural]
        cells = [row(o, human_age) for o in items]
    else:
        printer, columns = crd_columns(kind)
        cells = [[o["metadata"]["name"]] + [_cell(c, o) for c in printer] for o in items]
    rows = [
        {"cells": c, "object": _row_object(obj, include)}
        for c, obj in zip(cells, objects if objects is not None else items, strict=True)
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta if meta is not None else {"resourceVersion": rv},
        "columnDefinitions": columns if headers else None,
        "rows": rows,
    }
