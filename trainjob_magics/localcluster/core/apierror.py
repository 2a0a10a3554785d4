"""metav1.Status error bodies, raised as ApiError inside the local cluster."""

from __future__ import annotations

from typing import Any

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "AlreadyExists",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(
    code: int,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A metav1.Status failure object (an empty reason is omitted, as `reason,omitempty`)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else _REASONS.get(code, ""),
        "code": code,
    }
    if not body["reason"]:
        del body["reason"]
    if details is not None:
        body["details"] = details
    return body


class ApiError(Exception):
    """An API failure carrying the Status body the server answers with."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status_body(code, message, reason, details)


def qualified(plural: str, group: str) -> str:
    """`trainjobs.trainer.kubeflow.org`, or `pods` for the core group."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        f'{qualified(plural, group)} "{name}" not found',
        details={"name": name, "group": group, "kind": plural},
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{qualified(plural, group)} "{name}" already exists',
        details={"name": name, "group": group, "kind": plural},
    )


def conflict(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": the object '
        "has been modified; please apply your changes to the latest version and try again",
        reason="Conflict",
        details={"name": name, "group": group, "kind": plural},
    )


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 Invalid with `Kind.group "name" is invalid: field: msg, ...`."""
    parts = [f"{c.get('field', '')}: {c.get('message', '')}" for c in causes]
    joined = ", ".join(parts)
    if len(parts) > 1:
        joined = "[" + joined + "]"
    qual = f"{kind}.{group}" if group else kind
    return ApiError(
        422,
        f'{qual} "{name}" is invalid: {joined}',
        details={"name": name, "group": group, "kind": kind, "causes": causes},
    )


def forbidden(
    user: str,
    verb: str,
    resource: str,
    group: str,
    name: str | None,
    namespace: str | None,
) -> ApiError:
    """RBAC denial in the exact apiserver wording."""
    base = resource.split("/")[0]
    qual = qualified(base, group)
    subject = f'{qual} "{name}"' if name else qual
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    msg = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}" {scope}'
    )
    details: dict[str, Any] = {"group": group, "kind": base}
    if name:
        details["name"] = name
    return ApiError(403, msg, details=details)
