"""JSON responses (with Warning headers) and Status bodies for errors."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from ..core.apierror import ApiError

NOT_FOUND = "the server could not find the requested resource"
NOT_ALLOWED = "the server does not allow this method on the requested resource"


def json_response(obj: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers: CIMultiDict[str] = CIMultiDict()
    for w in warnings or []:
        headers.add("Warning", '299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return web.Response(
        body=json.dumps(obj).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def error_response(err: ApiError) -> web.Response:
    """The Status as the apiserver writes it: compact JSON and a newline (apimachinery's json
    serializer is Go's json.Encoder)."""
    return web.Response(
        body=json.dumps(err.status, separators=(",", ":")).encode() + b"\n",
        status=err.code,
        content_type="application/json",
    )


class PageNotFound(Exception):
    """A path no handler serves: Go's http.NotFound, which kube-apiserver's last handler
    (apiserver `util/notfoundhandler`) and apiextensions' crdHandler delegate to."""


def page_not_found() -> web.Response:
    """`404 page not found` as text/plain (net/http `NotFound` / `Error`)."""
    return web.Response(
        status=404,
        body=b"404 page not found\n",
        headers={
            "Content-Type": "text/plain; charset=utf-8",
            "X-Content-Type-Options": "nosniff",
        },
    )
