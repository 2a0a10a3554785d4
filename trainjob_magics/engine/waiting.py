"""Watch-driven waits: the trainer pod turning Running, and a TrainJob's pods going away.

List first (for a resourceVersion), then watch from it with ``timeoutSeconds``; a 410 Expired
ERROR event or a dropped stream relists. Every decision is made as soon as an event arrives: no
sleeps, no polling.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import urllib3
from kubernetes.client import ApiClient

from .apierrors import request
from .errors import (
    ApiServerError,
    ConnectTimeoutError,
    NotFoundError,
    PodNotRunningError,
    TrainJobFailedError,
)
from .pods import (
    TrainerTarget,
    is_running,
    job_status,
    jobset_selector,
    pod_name,
    pod_phase,
    pods_path,
    select_trainer_pod,
    trainjob_failure,
)
from .result import JobStatus
from .trainjob_body import GROUP, trainjob_path

log = logging.getLogger(__name__)

T = TypeVar("T")
WATCH_CHUNK_SECONDS = 10  # re-check the TrainJob's conditions at least this often
_STREAM_ERRORS = (urllib3.exceptions.HTTPError, OSError, ValueError)


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

    def _apply(self, event: Mapping[str, Any]) -> bool:
        """Apply one event; return False when the watch must restart from a relist."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code not in (410, None):
                log.debug(
                    "watch on %s ended with error %s: %s", self.path, code, obj.get("message")
                )
            return False
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = str(rv)
        if kind == "BOOKMARK":
            return True
        name = pod_name(obj)
        if not name:
            return True
        if kind == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = obj
        return True

    def run(
        self,
        deadline: float,
        check: Callable[[], T | None],
        *,
        refresh: Callable[[], None] | None = None,
    ) -> T | None:
        """Watch until ``check()`` returns non-None (returned) or ``deadline`` passes (None).

        ``check`` runs after every list and every event; ``refresh`` runs before each watch
        request (so at least every WATCH_CHUNK_SECONDS).
        """
        self.relist()
        result = check()
        failures = 0
        while result is None:
            if refresh is not None:
                refresh()
                result = check()
                if result is not None:
                    break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ok, result = self._watch_once(deadline, remaining, check)
            if result is None and not ok:
                failures += 1
                if failures > 1:  # back off only when the server keeps failing
                    time.sleep(min(1.0, 0.05 * 2**failures, max(0.0, deadline - time.monotonic())))
                self.relist()
                result = check()
            elif ok:
                failures = 0
        return result

    def _watch_once(
        self, deadline: float, remaining: float, check: Callable[[], T | None]
    ) -> tuple[bool, T | None]:
        """One watch request: ``(ok, result)``; ok False means relist (410, error, dropped)."""
        seconds = max(1, min(WATCH_CHUNK_SECONDS, math.ceil(remaining)))
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(seconds)),
            *self._selectors(),
        ]
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        resp = self._get("watch", query, stream=True, timeout=(10.0, min(seconds, remaining) + 1.0))
        lines = iter_lines(resp)
        try:
            while True:
                try:
                    line = next(lines, None)
                    if line is None:
                        return True, None
                    event = json.loads(line)
                except _STREAM_ERRORS:  # dropped stream, read timeout, garbage
                    return False, None
                if not self._apply(event):
                    return False, None
                result = check()
                if result is not None:
                    return True, result
                if time.monotonic() >= deadline:
                    return True, None
        finally:
            resp.close()
            resp.release_conn()


def _fingerprint(status: JobStatus) -> tuple[Any, ...]:
    rows = tuple(
        (p.name, p.phase, p.ready, p.waiting_reason, p.restarts, p.node) for p in status.pods
    )
    return (status.state, status.message, status.trainer_pod, rows)


class StatusReporter:
    """Calls ``on_status`` whenever the observed status changes; callback errors are logged."""

    def __init__(self, on_status: Callable[[JobStatus], None] | None) -> None:
        self.on_status = on_status
        self.last: JobStatus | None = None
        self._last_key: tuple[Any, ...] | None = None

    def report(self, status: JobStatus) -> None:
        """Remember ``status`` and pass it on if it differs from the previous one."""
        self.last = status
        key = _fingerprint(status)
        if key == self._last_key:
            return
        self._last_key = key
        if self.on_status is not None:
            try:
                self.on_status(status)
            except Exception:
                log.warning("on_status callback failed", exc_info=True)


def fetch_trainjob(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """GET the TrainJob (raises NotFoundError when it does not exist)."""
    return request(
        api,
        "GET",
        trainjob_path(namespace, name),
        verb="get",
        resource=f"trainjobs.{GROUP}",
        namespace=namespace,
        name=name,
    )


def delete_hint(name: str, namespace: str) -> str:
    return f"`kubectl delete trainjob {name} -n {namespace}`"


def wait_for_trainer_pod(
    api: ApiClient,
    namespace: str,
    name: str,
    target: TrainerTarget | None,
    *,
    runtime: str,
    timeout: float,
    started_at: float | None = None,
    on_status: Callable[[JobStatus], None] | None = None,
) -> dict[str, Any]:
    """Block until the trainer pod of TrainJob ``name`` is Running and return it.

    Raises PodNotRunningError (pod Succeeded/Failed, job deleted), TrainJobFailedError
    (Failed condition) or ConnectTimeoutError (the TrainJob is left in place).
    """
    started = time.monotonic() if started_at is None else started_at
    deadline = time.monotonic() + timeout
    reporter = StatusReporter(on_status)
    watcher = Watcher(
        api,
        pods_path(namespace),
        resource="pods",
        namespace=namespace,
        label_selector=jobset_selector(name),
    )
    trainjob: dict[str, Any] = {}

    def refresh() -> None:
        nonlocal trainjob
        try:
            trainjob = fetch_trainjob(api, namespace, name)
        except NotFoundError:
            reporter.report(
                job_status(name, namespace, runtime, None, [], target, started, deleted=True)
            )
            raise PodNotRunningError(
                f"TrainJob {name} was deleted in namespace {namespace} while waiting for its "
                "trainer pod; create it again with connect(...)"
            ) from None
        failure = trainjob_failure(trainjob)
        if failure is not None:
            reporter.report(
                job_status(
                    name, namespace, runtime, trainjob, watcher.objects.values(), target, started
                )
            )
            raise TrainJobFailedError(
                f"TrainJob {name} failed: {failure}; delete it with {delete_hint(name, namespace)}"
                " and connect again"
            )

    def check() -> dict[str, Any] | None:
        pods = list(watcher.objects.values())
        reporter.report(job_status(name, namespace, runtime, trainjob, pods, target, started))
        trainer = select_trainer_pod(pods, target)
        if trainer is None:
            return None
        if is_running(trainer):
            return trainer
        phase = pod_phase(trainer)
        if phase in ("Succeeded", "Failed"):
            raise PodNotRunningError(
                f"trainer pod {pod_name(trainer)} of TrainJob {name} already finished ({phase}) "
                "and cannot run commands; use a command that keeps running (or the default), "
                f"and delete the job with {delete_hint(name, namespace)}"
            )
        return None

    pod = watcher.run(deadline, check, refresh=refresh)
    if pod is None:
        last = reporter.last.message if reporter.last is not None else "no status"
        raise ConnectTimeoutError(
            f"the trainer pod of TrainJob {name} was not Running after {timeout:g}s ({last}); "
            f"the TrainJob still exists: keep waiting with attach({name!r}, "
            f"namespace={namespace!r}), or delete it with session.close() or "
            f"{delete_hint(name, namespace)}"
        )
    return pod


def wait_pods_gone(api: ApiClient, namespace: str, name: str, deadline: float) -> bool:
    """Watch until no pod of TrainJob ``name`` is left; False on timeout."""
    watcher = Watcher(
        api,
        pods_path(namespace),
        resource="pods",
        namespace=namespace,
        label_selector=jobset_selector(name),
    )
    return bool(watcher.run(deadline, lambda: True if not watcher.objects else None))


def wait_trainjob_gone(api: ApiClient, namespace: str, name: str, deadline: float) -> bool:
    """Watch until the TrainJob object itself is gone; False on timeout."""
    watcher = Watcher(
        api,
        trainjob_path(namespace),
        resource=f"trainjobs.{GROUP}",
        namespace=namespace,
        field_selector=f"metadata.name={name}",
    )
    return bool(watcher.run(deadline, lambda: True if name not in watcher.objects else None))


__all__ = [
    "ApiServerError",
    "StatusReporter",
    "Watcher",
    "fetch_trainjob",
    "wait_for_trainer_pod",
    "wait_pods_gone",
    "wait_trainjob_gone",
]
