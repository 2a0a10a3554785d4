"""events.k8s.io/v1 Events: a view of the core/v1 Event objects, as kube-apiserver serves both
groups from one storage.

Conversion (kubernetes `pkg/apis/events/v1/conversion.go`, `Convert_core_Event_To_v1_Event` and
back, with the generated field-by-field part): `involvedObject` <-> `regarding`, `message` <->
`note`, `source` <-> `deprecatedSource`, `firstTimestamp`/`lastTimestamp`/`count` <->
`deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/`deprecatedCount`, `reportingComponent`
<-> `reportingController`; `eventTime`, `series`, `action`, `reason`, `related`, `type`,
`reportingInstance` and metadata are the same. The v1 JSON always has `eventTime`, `regarding`
and the deprecated timestamps (MicroTime/Time/struct fields without omitempty: null or {}).

Validation of a create or update through events.k8s.io/v1 is the strict one of
`pkg/apis/core/validation/events.go` (ValidateEventCreate, ValidateEventUpdate): through
core/v1 only the legacy checks apply.
"""

from __future__ import annotations

from typing import Any

from ..core.apierror import invalid
from ..core.selectors import field_invalid, is_dns1123_subdomain, is_qualified_name

API_VERSION = "events.k8s.io/v1"
_SAME = ("eventTime", "series", "action", "reason", "related", "type", "reportingInstance")
_RENAMED = (  # core/v1 name, events.k8s.io/v1 name
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
)


def to_v1(event: dict[str, Any]) -> dict[str, Any]:
    """A stored core/v1 Event as events.k8s.io/v1 shows it."""
    out: dict[str, Any] = {"kind": "Event", "apiVersion": API_VERSION}
    out["metadata"] = event.get("metadata") or {}
    for name in _SAME:
        if event.get(name) not in (None, ""):
            out[name] = event[name]
    for core, v1 in _RENAMED:
        if event.get(core) not in (None, "", 0):
            out[v1] = event[core]
    out.setdefault("eventTime", None)
    out.setdefault("regarding", {})
    out.setdefault("deprecatedSource", {})
    out.setdefault("deprecatedFirstTimestamp", None)
    out.setdefault("deprecatedLastTimestamp", None)
    return out


def from_v1(event: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event as the core/v1 object it is stored as."""
    out: dict[str, Any] = {"kind": "Event", "apiVersion": "v1"}
    if "metadata" in event:
        out["metadata"] = event["metadata"]
    for name in _SAME:
        if event.get(name) not in (None, ""):
            out[name] = event[name]
    for core, v1 in _RENAMED:
        if event.get(v1) not in (None, "", 0, {}):
            out[core] = event[v1]
    return out


def _causes(errors: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    return [{"reason": r, "message": m, "field": f} for r, m, f in errors]


def _required(field: str) -> tuple[str, str, str]:
    return ("FieldValueRequired", "Required value", field)


def _invalid(field: str, value: Any, detail: str) -> tuple[str, str, str]:
    return ("FieldValueInvalid", field_invalid(field, value, detail).split(": ", 1)[1], field)


def _legacy(event: dict[str, Any]) -> list[tuple[str, str, str]]:
    """legacyValidateEvent (both groups)."""
    errs: list[tuple[str, str, str]] = []
    meta = event.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    involved = event.get("involvedObject") or {}
    inv_ns = involved.get("namespace") or ""
    if not event.get("eventTime"):
        if (not inv_ns and namespace not in ("", "default")) or (inv_ns and namespace != inv_ns):
            errs.append(
                _invalid("involvedObject.namespace", inv_ns, "does not match event.namespace")
            )
    else:
        if not inv_ns and namespace not in ("default", "kube-system"):
            errs.append(
                _invalid("involvedObject.namespace", inv_ns, "does not match event.namespace")
            )
        controller = event.get("reportingComponent") or ""
        if not controller:
            errs.append(_required("reportingController"))
        for msg in is_qualified_name(controller):
            errs.append(_invalid("reportingController", controller, msg))
        instance = event.get("reportingInstance") or ""
        if not instance:
            errs.append(_required("reportingInstance"))
        if len(instance) > 128:
            errs.append(_invalid("reportingInstance", "", "can have at most 128 characters"))
        action = event.get("action") or ""
        if not action:
            errs.append(_required("action"))
        if len(action) > 128:
            errs.append(_invalid("action", "", "can have at most 128 characters"))
        reason = event.get("reason") or ""
        if not reason:
            errs.append(_required("reason"))
        if len(reason) > 128:
            errs.append(_invalid("reason", "", "can have at most 128 characters"))
        if len(event.get("message") or "") > 1024:
            errs.append(_invalid("message", "", "can have at most 1024 characters"))
    for msg in is_dns1123_subdomain(namespace):
        errs.append(_invalid("namespace", namespace, msg))
    return errs


def _series(event: dict[str, Any]) -> list[tuple[str, str, str]]:
    series = event.get("series")
    if not series:
        return []
    errs = []
    if int(series.get("count") or 0) < 2:
        errs.append(_invalid("series.count", "", "should be at least 2"))
    if not series.get("lastObservedTime"):
        errs.append(_required("series.lastObservedTime"))
    return errs


def validate(event: dict[str, Any], old: dict[str, Any] | None, *, strict: bool, name: str) -> None:
    """422 `Event "name" is invalid: ...` for a create (old None) or an update of the core
    object `event`; `strict` for a request through events.k8s.io/v1."""
    errs = _legacy(event)
    if strict and old is None:
        errs += _series(event)
        if not event.get("eventTime"):
            errs.append(_required("eventTime"))
        if event.get("type") not in ("Normal", "Warning"):
            errs.append(_invalid("type", "", f"has invalid value: {event.get('type') or ''}"))
        for field in ("firstTimestamp", "lastTimestamp", "count"):
            if event.get(field):
                errs.append(_invalid(field, "", "needs to be unset"))
        source = event.get("source") or {}
        if source.get("component") or source.get("host"):
            errs.append(_invalid("source", "", "needs to be unset"))
    elif strict and old is not None:
        if event.get("series") != old.get("series"):
            errs += _series(event)
        for field in (
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ):
            if event.get(field) != old.get(field):
                shown = "reportingController" if field == "reportingComponent" else field
                errs.append(("FieldValueInvalid", "Invalid value: field is immutable", shown))
    if errs:
        raise invalid("Event", "", name, _causes(errs))
