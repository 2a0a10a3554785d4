"""Request bodies in `application/vnd.kubernetes.protobuf`, as client-go sends them for built-in
types (kubectl 1.32 `create namespace` does, and does not fall back to JSON on a 415).

The encoding (apimachinery `pkg/runtime/serializer/protobuf/protobuf.go`): the 4-byte prefix
`k8s\\0`, then a `runtime.Unknown` message {1: typeMeta {1: apiVersion, 2: kind}, 2: raw,
3: contentEncoding, 4: contentType} whose `raw` is the object in the field numbers of the
`generated.proto` files of k8s.io/api/core/v1 and k8s.io/apimachinery/pkg/apis/meta/v1. The
decoder knows the messages of the built-in kinds the local cluster accepts writes for
(Namespace, Event, DeleteOptions, Secret, ConfigMap, ServiceAccount, and their ObjectMeta);
it yields the object as its JSON form (zero values of `omitempty` fields left out,
timestamps as RFC 3339, `map<string, bytes>` values base64).
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Any

from ..core.apierror import ApiError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
PREFIX = b"k8s\x00"

# message name -> field number -> (json name, type, repeated)
_S = "string"
_MESSAGES: dict[str, dict[int, tuple[str, str, bool]]] = {
    "Unknown": {1: ("typeMeta", "TypeMeta", False), 2: ("raw", "bytes", False)},
    "TypeMeta": {1: ("apiVersion", _S, False), 2: ("kind", _S, False)},
    "ObjectMeta": {
        1: ("name", _S, False),
        2: ("generateName", _S, False),
        3: ("namespace", _S, False),
        4: ("selfLink", _S, False),
        5: ("uid", _S, False),
        6: ("resourceVersion", _S, False),
        7: ("generation", "int64", False),
        8: ("creationTimestamp", "Time", False),
        9: ("deletionTimestamp", "Time", False),
        10: ("deletionGracePeriodSeconds", "int64", False),
        11: ("labels", "map", False),
        12: ("annotations", "map", False),
        13: ("ownerReferences", "OwnerReference", True),
        14: ("finalizers", _S, True),
        17: ("managedFields", "ManagedFieldsEntry", True),
    },
    "OwnerReference": {
        1: ("kind", _S, False),
        3: ("name", _S, False),
        4: ("uid", _S, False),
        5: ("apiVersion", _S, False),
        6: ("controller", "bool", False),
        7: ("blockOwnerDeletion", "bool", False),
    },
    "ManagedFieldsEntry": {
        1: ("manager", _S, False),
        2: ("operation", _S, False),
        3: ("apiVersion", _S, False),
        4: ("time", "Time", False),
        6: ("fieldsType", _S, False),
        7: ("fieldsV1", "FieldsV1", False),
        8: ("subresource", _S, False),
    },
    "Namespace": {
        1: ("metadata", "ObjectMeta", False),
        2: ("spec", "NamespaceSpec", False),
        3: ("status", "NamespaceStatus", False),
    },
    "NamespaceSpec": {1: ("finalizers", _S, True)},
    "NamespaceStatus": {
        1: ("phase", _S, False),
        2: ("conditions", "NamespaceCondition", True),
    },
    "NamespaceCondition": {
        1: ("type", _S, False),
        2: ("status", _S, False),
        4: ("lastTransitionTime", "Time", False),
        5: ("reason", _S, False),
        6: ("message", _S, False),
    },
    "Event": {
        1: ("metadata", "ObjectMeta", False),
        2: ("involvedObject", "ObjectReference", False),
        3: ("reason", _S, False),
        4: ("message", _S, False),
        5: ("source", "EventSource", False),
        6: ("firstTimestamp", "Time", False),
        7: ("lastTimestamp", "Time", False),
        8: ("count", "int32", False),
        9: ("type", _S, False),
        10: ("eventTime", "MicroTime", False),
        11: ("series", "EventSeries", False),
        12: ("action", _S, False),
        13: ("related", "ObjectReference", False),
        14: ("reportingComponent", _S, False),
        15: ("reportingInstance", _S, False),
    },
    "EventV1": {  # k8s.io/api/events/v1 generated.proto
        1: ("metadata", "ObjectMeta", False),
        2: ("eventTime", "MicroTime", False),
        3: ("series", "EventSeries", False),
        4: ("reportingController", _S, False),
        5: ("reportingInstance", _S, False),
        6: ("action", _S, False),
        7: ("reason", _S, False),
        8: ("regarding", "ObjectReference", False),
        9: ("related", "ObjectReference", False),
        10: ("note", _S, False),
        11: ("type", _S, False),
        12: ("deprecatedSource", "EventSource", False),
        13: ("deprecatedFirstTimestamp", "Time", False),
        14: ("deprecatedLastTimestamp", "Time", False),
        15: ("deprecatedCount", "int32", False),
    },
    "ObjectReference": {
        1: ("kind", _S, False),
        2: ("namespace", _S, False),
        3: ("name", _S, False),
        4: ("uid", _S, False),
        5: ("apiVersion", _S, False),
        6: ("resourceVersion", _S, False),
        7: ("fieldPath", _S, False),
    },
    "EventSource": {1: ("component", _S, False), 2: ("host", _S, False)},
    "EventSeries": {1: ("count", "int32", False), 2: ("lastObservedTime", "MicroTime", False)},
    "DeleteOptions": {
        1: ("gracePeriodSeconds", "int64", False),
        2: ("preconditions", "Preconditions", False),
        3: ("orphanDependents", "bool", False),
        4: ("propagationPolicy", _S, False),
        5: ("dryRun", _S, True),
    },
    "Preconditions": {1: ("uid", _S, False), 2: ("resourceVersion", _S, False)},
    # what `kubectl create secret|configmap|serviceaccount` sends
    "Secret": {
        1: ("metadata", "ObjectMeta", False),
        2: ("data", "map_bytes", False),
        3: ("type", _S, False),
        4: ("stringData", "map", False),
        5: ("immutable", "bool", False),
    },
    "ConfigMap": {
        1: ("metadata", "ObjectMeta", False),
        2: ("data", "map", False),
        3: ("binaryData", "map_bytes", False),
        4: ("immutable", "bool", False),
    },
    "ServiceAccount": {
        1: ("metadata", "ObjectMeta", False),
        2: ("secrets", "ObjectReference", True),
        3: ("imagePullSecrets", "LocalObjectReference", True),
        4: ("automountServiceAccountToken", "bool", False),
    },
    "LocalObjectReference": {1: ("name", _S, False)},
}
# (group, kind) -> top-level message, for the kinds whose protobuf bodies are decoded
DECODABLE = {
    ("", "Namespace"): "Namespace",
    ("", "Event"): "Event",
    ("events.k8s.io", "Event"): "EventV1",
    ("", "DeleteOptions"): "DeleteOptions",
    ("", "Secret"): "Secret",
    ("", "ConfigMap"): "ConfigMap",
    ("", "ServiceAccount"): "ServiceAccount",
}
# Fields kept when zero (optional pointers, where 0 is a value).
_KEEP_ZERO = {"gracePeriodSeconds"}  # a pointer field: present means set


class _Malformed(Exception):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Malformed("unexpected EOF")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    out, pos = [], 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise _Malformed("unexpected EOF")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise _Malformed(f"illegal wireType {wire} for field {number}")
        out.append((number, wire, value))
    return out


def _signed(value: int, bits: int) -> int:
    value &= (1 << 64) - 1
    if value >= 1 << 63:
        value -= 1 << 64
    return value if bits == 64 else ((value + (1 << 31)) % (1 << 32)) - (1 << 31)


def _time(data: bytes, micro: bool) -> str | None:
    seconds = nanos = 0
    for number, _, value in _fields(data):
        if number == 1:
            seconds = _signed(value, 64)
        elif number == 2:
            nanos = _signed(value, 32)
    if seconds == 0 and nanos == 0:
        return None  # the zero time marshals as null
    when = datetime.fromtimestamp(seconds, timezone.utc)
    if micro:
        return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{nanos // 1000:06d}Z"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _convert(type_: str, wire: int, value: Any) -> Any:
    if type_ == _S:
        return value.decode("utf-8", "replace")
    if type_ == "bytes":
        return value
    if type_ in ("int64", "int32"):
        return _signed(value, 64 if type_ == "int64" else 32)
    if type_ == "bool":
        return bool(value)
    if type_ == "Time":
        return _time(value, micro=False)
    if type_ == "MicroTime":
        return _time(value, micro=True)
    if type_ == "FieldsV1":
        raw = next((v for n, _, v in _fields(value) if n == 1), b"{}")
        return json.loads(raw or b"{}")
    return decode_message(type_, value)


def decode_message(name: str, data: bytes) -> dict[str, Any]:
    schema = _MESSAGES[name]
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        if number not in schema:
            continue  # unknown fields are dropped, as the generated Unmarshal skips them
        field, type_, repeated = schema[number]
        if type_ in ("map", "map_bytes"):
            entry = {n: v for n, _, v in _fields(value)}
            key = entry.get(1, b"").decode("utf-8", "replace")
            raw = entry.get(2, b"")
            # map<string, bytes> is base64 in JSON, as encoding/json writes []byte
            text = (
                base64.b64encode(raw).decode()
                if type_ == "map_bytes"
                else raw.decode("utf-8", "replace")
            )
            out.setdefault(field, {})[key] = text
            continue
        converted = _convert(type_, wire, value)
        if repeated:
            out.setdefault(field, []).append(converted)
        else:
            out[field] = converted
    return {
        k: v
        for k, v in out.items()
        if k in _KEEP_ZERO or v not in ("", 0, False, None, {}) or isinstance(v, list)
    }


def decode(body: bytes, kind: str, group: str = "") -> dict[str, Any]:
    """The JSON form of a protobuf request body that should hold a `kind` of `group`; 400 as
    the apiserver's protobuf serializer and decoder answer (handlers `transformDecodeError`)."""
    if not body.startswith(PREFIX):
        shown = " ".join(str(b) for b in PREFIX)
        raise ApiError(
            400,
            f"the object provided is unrecognized (must be of type {kind}): provided data does "
            f"not appear to be a protobuf message, expected prefix [{shown}] "
            f"({body[:16].hex()})",
        )
    try:
        unknown = decode_message("Unknown", body[len(PREFIX) :])
        type_meta = unknown.get("typeMeta") or {}
        sent_kind = type_meta.get("kind", "")
        if sent_kind != kind:
            raise ApiError(
                400,
                f"the object provided is unrecognized (must be of type {kind}): "
                f'no kind "{sent_kind}" is registered for version '
                f'"{type_meta.get("apiVersion", "")}"',
            )
        obj = decode_message(DECODABLE[(group, kind)], unknown.get("raw") or b"")
    except _Malformed as exc:
        raise ApiError(
            400, f"the object provided is unrecognized (must be of type {kind}): {exc}"
        ) from None
    obj = {"kind": kind, "apiVersion": type_meta.get("apiVersion") or "v1", **obj}
    if "metadata" in obj:
        _fields_v1_json(obj["metadata"])
    return obj


def _fields_v1_json(meta: dict[str, Any]) -> None:
    for entry in meta.get("managedFields") or []:
        if isinstance(entry.get("fieldsV1"), bytes):
            entry["fieldsV1"] = json.loads(entry["fieldsV1"])


__all__ = ["DECODABLE", "MEDIA_TYPE", "decode", "decode_message"]
