"""A parsed request: its target resource, the user, and the query options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..core.apierror import ApiError, invalid
from ..core.resources import Kind

USER_KEY = web.RequestKey("user", tuple)
FIELD_VALIDATION = ("Ignore", "Warn", "Strict")


def query_bool(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def query_int(value: str | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ApiError(400, f"invalid value for {name}: {value!r}") from exc


@dataclass
class Target:
    """A parsed resource path."""

    kind: Kind
    namespace: str | None
    name: str | None
    sub: str | None

    @property
    def resource(self) -> str:
        return f"{self.kind.plural}/{self.sub}" if self.sub else self.kind.plural


def accepts_json(accept: str) -> bool:
    """Whether an Accept header admits application/json (goautoneg clauses; none means */*)."""
    if not accept.strip():
        return True
    for clause in accept.split(","):
        media = clause.split(";")[0].strip().lower()
        if media in ("*/*", "application/*", "application/json"):
            return True
    return False


def dry_run(request: web.Request) -> bool:
    """`?dryRun=All`: validate and answer, store nothing (other values are 400, as upstream)."""
    values = request.query.getall("dryRun", [])
    for v in values:
        if v != "All":
            raise ApiError(
                400, f'dryRun: Unsupported value: "{v}": supported values: "All"', "BadRequest"
            )
    return bool(values)


def field_validation(request: web.Request, kind: Kind, warnings: list[str]) -> list[str]:
    """Apply `?fieldValidation=` to the pruning warnings (`unknown field "..."`).

    Warn (the default since 1.27) keeps them as Warning headers, Ignore drops them, Strict
    turns them into 400 BadRequest worded like the apiserver's `transformDecodeError`:
    `TrainJob in version "v1alpha1" cannot be handled as a TrainJob: strict decoding error:
    unknown field "spec.x"`.
    """
    mode = request.query.get("fieldValidation") or "Warn"
    if mode not in FIELD_VALIDATION:
        raise ApiError(
            400,
            f'fieldValidation: Unsupported value: "{mode}": supported values: '
            '"Ignore", "Strict", "Warn"',
        )
    unknown = [w for w in warnings if w.startswith("unknown field ")]
    if mode == "Ignore":
        return [w for w in warnings if w not in unknown]
    if mode == "Strict" and unknown:
        raise ApiError(
            400,
            f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
            f"strict decoding error: {', '.join(unknown)}",
        )
    return warnings


def send_initial_events(q: Any) -> bool:
    """`sendInitialEvents` (WatchList), checked like apimachinery's validateWatchOptions."""
    match = q.get("resourceVersionMatch") or ""
    sie = q.get("sendInitialEvents")
    causes: list[dict[str, str]] = []

    def forbidden(detail: str) -> None:
        causes.append(
            {
                "reason": "FieldValueForbidden",
                "message": f"Forbidden: {detail}",
                "field": "resourceVersionMatch",
            }
        )

    if sie is not None and match != "NotOlderThan":
        forbidden("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
    if match:
        if sie is None:
            forbidden(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
            )
        if match != "NotOlderThan":
            causes.append(
                {
                    "reason": "FieldValueNotSupported",
                    "message": f'Unsupported value: "{match}": supported values: "NotOlderThan"',
                    "field": "resourceVersionMatch",
                }
            )
    if causes:
        raise invalid("ListOptions", "meta.k8s.io", "", causes)
    return query_bool(sie)
