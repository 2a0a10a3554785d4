"""List options as kube-apiserver 1.32 applies them: resourceVersion, resourceVersionMatch,
`limit`/`continue` paging with `metadata.remainingItemCount`.

Sources (k8s.io/apiserver v0.32): `pkg/storage/continue.go` (the token: base64url of
`{"v":"meta.k8s.io/v1","rv":N,"start":"<key after the prefix>\\x00"}` and the errors of
DecodeContinue), `pkg/storage/etcd3/store.go` GetList (`invalid continue token: ...`, the RV of
the first page reused by every continuation, `specifying resource version is not allowed when
using continue`, `invalid resource version: ...`), `pkg/storage/etcd3/errors.go` (410 on a
compacted revision, with a fresh `continue` that lists the rest at the latest RV),
`pkg/storage/cacher/cacher.go` (`shouldDelegateList`, `computeListLimit`: resourceVersion=0 is
served from the watch cache with the limit ignored; garbage resourceVersions on the cache path
are a storage.InvalidError, which the handlers answer as a 500 without a reason), and
apimachinery `pkg/apis/meta/internalversion/validation` ValidateListOptions.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from ..core.apierror import ApiError, invalid
from ..core.resources import Kind
from ..core.selectors import Requirement, fields_match, labels_match
from ..core.store import ExpiredError, Store

EXPIRED_LIST = "The resourceVersion for the provided list is too old."
INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)
_GENERIC = "continue key is not valid"


def parse_uint_rv(value: str) -> int:
    """APIObjectVersioner.ParseResourceVersion for a value that is not "" or "0": a
    storage.InvalidError `resourceVersion: Invalid value: "x": strconv.ParseUint: ...`."""
    reason = ""
    if not re.fullmatch(r"[0-9]+", value):
        reason = "invalid syntax"
    elif int(value) >= 1 << 64:
        reason = "value out of range"
    if reason:
        quoted = json.dumps(value)
        raise _InvalidRV(
            f"resourceVersion: Invalid value: {quoted}: strconv.ParseUint: parsing {quoted}: "
            f"{reason}"
        )
    return int(value)


class _InvalidRV(Exception):
    pass


def rv_or_500(value: str | None) -> int | None:
    """The watch cache's parse of `resourceVersion` (None for "" and "0"): a garbage value is
    an error the handlers do not convert, so it is answered as HTTP 500 with no reason
    (responsewriters.ErrorToAPIStatus; kubernetes/kubernetes#139485 is open to make it 400)."""
    if value in (None, "", "0"):
        return None
    try:
        return parse_uint_rv(value)
    except _InvalidRV as err:
        raise ApiError(500, str(err), reason="") from None


def encode_continue(start_key: str, rv: int) -> str:
    data = json.dumps(
        {"v": "meta.k8s.io/v1", "rv": rv, "start": start_key}, separators=(",", ":")
    ).encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def decode_continue(token: str) -> tuple[str, int]:
    """storage.DecodeContinue: the start key (after the list prefix) and the RV, or 400."""

    def bad(detail: str) -> ApiError:
        return ApiError(400, f"invalid continue token: {detail}")

    if not re.fullmatch(r"[A-Za-z0-9_-]*", token) or len(token) % 4 == 1:
        at = next((i for i, c in enumerate(token) if not re.match(r"[A-Za-z0-9_-]", c)), None)
        if at is None:
            at = len(token) - len(token) % 4
        raise bad(f"{_GENERIC}: illegal base64 data at input byte {at}")
    try:
        data = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError) as exc:
        raise bad(f"{_GENERIC}: {exc}") from None
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        pos = getattr(exc, "pos", 0)
        text = data.decode("utf-8", "replace")
        detail = (
            f"invalid character '{text[pos]}' looking for beginning of value"
            if pos < len(text)
            else "unexpected end of JSON input"
        )
        raise bad(f"{_GENERIC}: {detail}") from None
    try:
        if not isinstance(parsed, dict):
            raise TypeError(
                f"json: cannot unmarshal {type(parsed).__name__} into Go value of type "
                "storage.continueToken"
            )
        version = parsed.get("v", "")
        rv = int(parsed.get("rv", 0))
        start = str(parsed.get("start", ""))
    except (ValueError, TypeError) as exc:
        raise bad(f"{_GENERIC}: {exc}") from None
    if version != "meta.k8s.io/v1":
        raise bad(
            f"continue key is not valid: server does not recognize this encoded version {version}"
        )
    if rv == 0:
        raise bad(
            "continue key is not valid: incorrect encoded start resourceVersion "
            "(version meta.k8s.io/v1)"
        )
    if not start:
        raise bad("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
    key = start if start.startswith("/") else "/" + start
    # path.Clean, keeping a trailing NUL byte (part of the key, not of the path)
    if posixpath.normpath(key) != key or "//" in key:
        raise bad(f"{_GENERIC}: {start}")
    return key[1:], rv


@dataclass
class ListPage:
    items: list[dict[str, Any]]
    rv: str
    continue_token: str = ""
    remaining: int | None = None

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {"resourceVersion": self.rv}
        if self.continue_token:
            out["continue"] = self.continue_token
        if self.remaining is not None:
            out["remainingItemCount"] = self.remaining
        return out


def validate_list_options(q: Any) -> None:
    """ValidateListOptions for a list (not a watch): 422 on ListOptions.meta.k8s.io."""
    match = q.get("resourceVersionMatch") or ""
    causes: list[dict[str, str]] = []

    def cause(reason: str, message: str, field: str) -> None:
        causes.append({"reason": reason, "message": message, "field": field})

    if match:
        if not q.get("resourceVersion"):
            cause(
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                "resourceVersionMatch",
            )
        if q.get("continue"):
            cause(
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                "resourceVersionMatch",
            )
        if match not in ("Exact", "NotOlderThan"):
            cause(
                "FieldValueNotSupported",
                f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""',
                "resourceVersionMatch",
            )
        if match == "Exact" and q.get("resourceVersion") == "0":
            cause(
                "FieldValueForbidden",
                'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                "resourceVersionMatch",
            )
    if q.get("sendInitialEvents") is not None:
        cause(
            "FieldValueForbidden",
            "Forbidden: sendInitialEvents is forbidden for list",
            "sendInitialEvents",
        )
    if causes:
        raise invalid("ListOptions", "meta.k8s.io", "", causes)


def _key(kind: Kind, namespace: str | None, obj: dict[str, Any]) -> str:
    """The object's etcd key after the list's prefix (`name`, or `namespace/name` for a list
    across namespaces)."""
    meta = obj.get("metadata") or {}
    if kind.namespaced and namespace is None:
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    return str(meta.get("name", ""))


def list_page(
    store: Store,
    kind: Kind,
    namespace: str | None,
    labels: list[Requirement],
    fields: list[Requirement],
    q: Any,
) -> ListPage:
    """One list answer for the query `q` (limit, continue, resourceVersion, ...Match)."""
    validate_list_options(q)
    limit_text = q.get("limit") or "0"
    if not re.fullmatch(r"[+-]?[0-9]+", limit_text):
        raise ApiError(400, f'strconv.ParseInt: parsing "{limit_text}": invalid syntax')
    limit = int(limit_text)
    token = q.get("continue") or ""
    rv_text = q.get("resourceVersion") or ""
    match = q.get("resourceVersionMatch") or ""
    start, at, paging = "", None, limit > 0
    current = store.resource_version
    if token:  # continuations are served from etcd (cacher.go shouldDelegateList)
        start, token_rv = decode_continue(token)
        if rv_text not in ("", "0"):
            raise ApiError(400, "specifying resource version is not allowed when using continue")
        at = token_rv if token_rv > 0 else None
    elif rv_text not in ("", "0"):
        delegated = (paging and not match) or match == "Exact"
        if delegated:  # etcd at that revision
            try:
                at = parse_uint_rv(rv_text)
            except _InvalidRV as err:
                raise ApiError(400, f"invalid resource version: {err}") from None
        else:  # the watch cache, NotOlderThan: the current state
            rv_or_500(rv_text)
    elif rv_text == "0":
        paging = False  # computeListLimit: the limit is ignored for resourceVersion=0
    if at is not None and at > current:
        at = None
    try:
        objs, list_rv = store.list_at(kind, at, namespace)
    except ExpiredError:
        if token:
            fresh = encode_continue(start, -1)
            err = ApiError(410, INCONSISTENT_CONTINUE, "Expired")
            err.status["metadata"] = {"continue": fresh}
            raise err from None
        raise ApiError(410, EXPIRED_LIST, "Expired") from None
    keyed = sorted(((_key(kind, namespace, o), o) for o in objs), key=lambda ko: ko[0])
    if start:
        keyed = [ko for ko in keyed if ko[0] >= start]
    selected: list[dict[str, Any]] = []
    last_key, more = "", False
    for i, (key, obj) in enumerate(keyed):
        if labels_match(labels, obj) and fields_match(fields, obj):
            selected.append(obj)
            last_key = key
        if paging and len(selected) >= limit:
            more = i < len(keyed) - 1
            break
    page = ListPage(selected, str(list_rv))
    if more:
        page.continue_token = encode_continue(last_key + "\x00", list_rv)
        if not labels and not fields:
            page.remaining = len(keyed) - limit
    return page
