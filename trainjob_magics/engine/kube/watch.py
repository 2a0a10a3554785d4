"""Kubernetes watches: reading a watch stream line by line, resuming from resourceVersion and
relisting on 410 Gone."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import urllib3
from kubernetes.client import ApiClient

from .objects import pod_name
from .requests import request

log = logging.getLogger(__name__)


T = TypeVar("T")


WATCH_CHUNK_SECONDS = 10  # re-check the TrainJob's conditions at least this often


_STREAM_ERRORS = (urllib3.exceptions.HTTPError, OSError, ValueError)


OK, DROPPED, RELIST, ERROR = "ok", "dropped", "relist", "error"  # how one watch request ended


def interrupt(resp: Any) -> None:
    """End a blocking read of ``resp`` in another thread (its socket shut down)."""
    shutdown = getattr(resp, "shutdown", None)  # urllib3 >= 2.3
    if shutdown is not None:
        try:
            shutdown()
            return
        except (OSError, ValueError, RuntimeError):
            pass
    sock = getattr(getattr(resp, "_connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def iter_lines(resp: Any) -> Iterator[bytes]:
    """Yield the non-empty lines of a chunked watch response as they arrive."""
    if getattr(resp, "chunked", False):
        chunks: Iterator[bytes] = resp.stream(amt=None, decode_content=False)
    else:
        chunks = iter(lambda: resp.read1(65536), b"")
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            if end > start:
                yield bytes(buf[start:end])
            start = end + 1
        del buf[:start]
    if buf.strip():
        yield bytes(buf)


class Watcher:
    """Keeps a local copy of a collection (``path`` + selectors) current through a watch."""

    def __init__(
        self,
        api: ApiClient,
        path: str,
        *,
        resource: str,
        namespace: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        self.api = api
        self.path = path
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        # the longest watch request (refresh period)
        self.chunk_seconds: float = WATCH_CHUNK_SECONDS
        self._aborted = False
        self._stream: Any = None  # the watch response being read
        self._lock = threading.Lock()

    def abort(self) -> None:
        """From another thread: end ``run`` at once (its read interrupted), now and later."""
        with self._lock:
            self._aborted = True
            stream = self._stream
        if stream is not None:
            interrupt(stream)

    def _selectors(self) -> list[tuple[str, str]]:
        query = []
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        return query

    def _get(self, verb: str, query: list[tuple[str, str]], **kw: Any) -> Any:
        """GET the collection (``list`` or ``watch``)."""
        return request(
            self.api,
            "GET",
            self.path,
            verb=verb,
            resource=self.resource,
            namespace=self.namespace,
            query=query,
            **kw,
        )

    def relist(self) -> None:
        """Replace the local copy with a fresh list and remember its resourceVersion."""
        data = self._get("list", self._selectors())
        self.objects = {pod_name(item): item for item in data.get("items") or [] if pod_name(item)}
        self.resource_version = str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _apply(self, event: Mapping[str, Any]) -> str:
        """Apply one event: ``"ok"``, ``"relist"`` (410 Gone: the resourceVersion is too old)
        or ``"error"`` (any other ERROR event; relisted too)."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                log.debug("watch on %s expired (410): %s", self.path, obj.get("message"))
                return RELIST
            log.debug("watch on %s ended with error %s: %s", self.path, code, obj.get("message"))
            return ERROR
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = str(rv)
        if kind == "BOOKMARK":
            return OK
        name = pod_name(obj)
        if not name:
            return OK
        if kind == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = obj
        return OK

    def run(
        self,
        deadline: float,
        check: Callable[[], T | None],
        *,
        refresh: Callable[[], None] | None = None,
    ) -> T | None:
        """Watch until ``check()`` returns non-None (returned) or ``deadline`` passes (None).

        ``check`` runs after every list and every event; ``refresh`` runs before each watch
        request (so at least every WATCH_CHUNK_SECONDS). A dropped stream resumes from the
        last resourceVersion; a 410 Gone (or another ERROR event) relists first.
        """
        self.relist()
        result = check()
        failures = 0
        while result is None and not self._aborted:
            if refresh is not None:
                refresh()
                result = check()
                if result is not None:
                    break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            state, result = self._watch_once(deadline, remaining, check)
            if result is not None or self._aborted:
                break
            if state == OK:
                failures = 0
                continue
            failures += 1
            if failures > 1:  # back off only when the server keeps failing
                time.sleep(min(1.0, 0.05 * 2**failures, max(0.0, deadline - time.monotonic())))
            if state == DROPPED and self.resource_version:
                continue  # resume from the resourceVersion we had (the server keeps history)
            self.relist()
            result = check()
        return result

    def _watch_once(
        self, deadline: float, remaining: float, check: Callable[[], T | None]
    ) -> tuple[str, T | None]:
        """One watch request: ``(state, result)``; state ``"ok"`` (ended normally),
        ``"dropped"`` (the stream broke: resume), ``"relist"`` (410) or ``"error"``."""
        seconds = max(1, min(math.ceil(self.chunk_seconds), math.ceil(remaining)))
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(seconds)),
            *self._selectors(),
        ]
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        resp = self._get("watch", query, stream=True, timeout=(10.0, min(seconds, remaining) + 1.0))
        with self._lock:
            self._stream = resp
            if self._aborted:
                interrupt(resp)
        lines = iter_lines(resp)
        try:
            while True:
                try:
                    line = next(lines, None)
                    if line is None:
                        return OK, None
                    event = json.loads(line)
                except _STREAM_ERRORS:  # dropped stream, read timeout, garbage
                    return DROPPED, None
                state = self._apply(event)
                if state != OK:
                    return state, None
                result = check()
                if result is not None:
                    return OK, result
                if time.monotonic() >= deadline:
                    return OK, None
        finally:
            with self._lock:
                self._stream = None
            resp.close()
            resp.release_conn()
