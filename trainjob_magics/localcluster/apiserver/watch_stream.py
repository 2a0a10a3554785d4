"""Chunked watch streams: resourceVersion, selectors, timeoutSeconds, bookmarks, 410 Expired."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..core.apierror import status_body
from ..core.resources import Kind
from ..core.selectors import Requirement, fields_match, labels_match
from ..core.store import Event, ExpiredError, Store
from .clients.tables import to_table

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass
class WatchParams:
    namespace: str | None
    labels: list[Requirement]
    fields: list[Requirement]
    resource_version: str | None
    timeout: float | None
    bookmarks: bool
    bookmark_interval: float
    table: str | None = None  # includeObject when the client asked for Table events
    send_initial_events: bool = False
    stored: Kind | None = None  # the kind whose objects are watched, when `kind` is a view
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # stored -> view


def parse_rv(value: str | None) -> int | None:
    """None for ""/"0"/absent (start with the current state), else the integer RV (the
    handler has already answered a value that is not one with the cacher's 500)."""
    if value in (None, "", "0") or not value.isdigit():
        return None
    return int(value)


def _matches(p: WatchParams, obj: dict[str, Any] | None) -> bool:
    if obj is None:
        return False
    ns = obj.get("metadata", {}).get("namespace")
    if p.namespace is not None and ns != p.namespace:
        return False
    return labels_match(p.labels, obj) and fields_match(p.fields, obj)


def translate(p: WatchParams, ev: Event) -> tuple[str, dict[str, Any]] | None:
    """The event as this watcher sees it: objects entering/leaving the selection become
    ADDED/DELETED, as the apiserver's watch cache does."""
    now = _matches(p, ev.obj)
    before = _matches(p, ev.old) if ev.old is not None else False
    if ev.type == "MODIFIED":
        if now and before:
            return "MODIFIED", ev.obj
        if now:
            return "ADDED", ev.obj
        if before:
            return "DELETED", ev.obj
        return None
    if ev.type == "DELETED":
        return ("DELETED", ev.obj) if (before or now) else None
    return (ev.type, ev.obj) if now else None


def _line(type_: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": type_, "object": obj}, separators=(",", ":")) + "\n").encode()


async def serve_watch(
    request: web.Request,
    store: Store,
    kind: Kind,
    params: WatchParams,
    stopping: asyncio.Event,
) -> web.StreamResponse:
    """Answer a ?watch=true request with a chunked stream of JSON event lines."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    loop = asyncio.get_running_loop()
    since = parse_rv(params.resource_version)
    if params.send_initial_events:
        since = None  # NotOlderThan: the current state, then a bookmark marking its end
    try:
        initial, start_rv, sub = store.subscribe(params.stored or kind, since, loop)
    except ExpiredError as exc:
        await resp.prepare(request)
        await resp.write(_line("ERROR", status_body(410, str(exc), "Expired")))
        await resp.write_eof()
        return resp
    await resp.prepare(request)
    sent_rv = since if since is not None else start_rv
    deadline = None if params.timeout is None else time.monotonic() + params.timeout
    next_bookmark = time.monotonic() + params.bookmark_interval

    headers = [True]

    def event(type_: str, obj: dict[str, Any]) -> bytes:
        shown = params.convert(obj) if params.convert else obj
        if params.table is None or obj.get("kind") == "Status":
            return _line(type_, shown)
        rv = obj.get("metadata", {}).get("resourceVersion", "")
        table = to_table(kind, [obj], rv, params.table, headers=headers[0], objects=[shown])
        headers[0] = False  # column definitions only on the first event
        return _line(type_, table)

    def bookmark(rv: int, initial_end: bool = False) -> bytes:
        # Only apiVersion, kind and metadata.resourceVersion (+ the initial-events-end
        # annotation for WatchList), as the cacher's bookmark objects (cacher.go).
        obj: dict[str, Any] = {"kind": kind.kind, "apiVersion": kind.api_version}
        obj["metadata"] = {"resourceVersion": str(rv)}
        if initial_end:
            obj["metadata"]["annotations"] = {INITIAL_EVENTS_END: "true"}
        return _line("BOOKMARK", obj)

    try:
        for ev in initial:
            out = translate(params, ev)
            if out:
                await resp.write(event(*out))
        if params.send_initial_events:
            await resp.write(bookmark(start_rv, initial_end=True))
        while not stopping.is_set() and not sub.closed:
            for ev in sub.drain():
                out = translate(params, ev)
                sent_rv = ev.rv
                if out:
                    await resp.write(event(*out))
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if params.bookmarks and now >= next_bookmark:
                rv = store.idle_rv(sub)
                if rv is not None:
                    await resp.write(bookmark(max(rv, sent_rv or 0)))
                    next_bookmark = now + params.bookmark_interval
            wait = 1.0
            if deadline is not None:
                wait = min(wait, deadline - now)
            if params.bookmarks:
                wait = min(wait, max(0.0, next_bookmark - now))
            sub.wakeup.clear()
            if not sub.pending:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(sub.wakeup.wait(), timeout=max(wait, 0.01))
        if params.bookmarks and not (request.transport is None or request.transport.is_closing()):
            rv = store.idle_rv(sub)
            if rv is not None:
                await resp.write(bookmark(rv))
        with contextlib.suppress(ConnectionError, RuntimeError):
            await resp.write_eof()
    except (ConnectionError, RuntimeError):
        pass
    finally:
        store.unsubscribe(sub)
    return resp
