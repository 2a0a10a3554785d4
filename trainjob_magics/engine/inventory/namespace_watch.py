"""One namespace's TrainJobs (of this project) and their pods, kept current by two watches in
two daemon threads; the jobs that went away, with why."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from kubernetes.client import ApiClient

from ..errors import TrainJobError
from ..kube.names import (
    JOBSET_NAME_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_KERNEL_ANNOTATION,
    OWNER_PID_ANNOTATION,
    TRAINJOB_RESOURCE,
    pods_path,
    trainjob_path,
)
from ..kube.watch import Watcher
from .records import gone_reason, gone_record
from .schema import GoneRecord

log = logging.getLogger(__name__)

RETRY_SECONDS = 15.0  # after a failed list (no permission, server down): try again this late
WATCH_SECONDS = 30  # the longest single watch request
FOREVER = 10 * 365 * 86400.0
MAX_GONE = 500  # tombstones kept per namespace
KERNEL_EXIT = "kernel exit"  # the closed-by note a kernel writes when it exits

# (kernel id, pid of the kernel process that made the job) -> whether that kernel process has
# exited or is exiting: a Jupyter server knows it of its own kernels (trainjob_magics/jupyter)
KernelEnded = Callable[[str, str], bool]


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


class NamespaceWatch:
    """``jobs`` and ``pods`` are snapshots (replaced, never mutated) safe to read from any
    thread; ``gone`` maps a vanished job's uid to its record; ``problem`` is one line while
    the namespace cannot be read; ``synced`` once both lists succeeded."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        changed: Callable[[], None],
        kernel_ended: KernelEnded | None = None,
    ) -> None:
        self.namespace = namespace
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.gone: dict[str, GoneRecord] = {}
        # uid -> who closed it, for jobs closed here whose closed-by note could not be written
        # (a Role without `patch` on trainjobs): said as it is, not as a kubectl delete
        self.closed_here: dict[str, str] = {}
        self._kernel_ended = kernel_ended
        self.problem = ""
        self._synced = {"jobs": False, "pods": False}
        self._changed = changed
        self._stop = threading.Event()
        self._lock = threading.Lock()
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
        jobs = Watcher(
            api,
            trainjob_path(namespace),
            resource=TRAINJOB_RESOURCE,
            namespace=namespace,
            label_selector=selector,
        )
        pods = Watcher(
            api,
            pods_path(namespace),
            resource="pods",
            namespace=namespace,
            label_selector=JOBSET_NAME_LABEL,
        )
        self._watchers = (jobs, pods)
        self._threads = [
            threading.Thread(
                target=self._run, args=(w, kind), daemon=True, name=f"tjm-watch-{namespace}-{kind}"
            )
            for w, kind in ((jobs, "jobs"), (pods, "pods"))
        ]
        for t in self._threads:
            t.start()

    @property
    def synced(self) -> bool:
        return all(self._synced.values())

    def stop(self) -> None:
        """End both watches: a blocked read is interrupted, a retry wait cut short."""
        self._stop.set()
        for watcher in self._watchers:
            watcher.abort()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for both threads (after ``stop``); True when ended."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def _run(self, watcher: Watcher, kind: str) -> None:
        watcher.chunk_seconds = WATCH_SECONDS
        seen = [""]

        def check() -> bool | None:
            if self._stop.is_set():
                return True
            if watcher.resource_version != seen[0] or not self._synced[kind]:
                seen[0] = watcher.resource_version
                self._publish(kind, dict(watcher.objects))
            return None

        while not self._stop.is_set():
            try:
                watcher.run(time.monotonic() + FOREVER, check)
            except TrainJobError as exc:
                self._failed(kind, str(exc).splitlines()[0])
            except Exception as exc:  # never let the thread die: the view would freeze
                log.debug("watch of %s in %s failed", kind, self.namespace, exc_info=True)
                self._failed(kind, f"cannot watch {kind} ({type(exc).__name__})")

    def _failed(self, kind: str, line: str) -> None:
        with self._lock:
            changed = self.problem != line
            self.problem = line
        if changed:
            self._changed()
        self._stop.wait(RETRY_SECONDS)

    def _by(self, job: dict[str, Any]) -> str | None:
        """Closed at "kernel exit": a job whose kernel (of this Jupyter server) has exited or is
        exiting: its close at exit deleted it though its closed-by note could not be written
        (a Role without `patch` on trainjobs, or an API server too slow for the few seconds a
        kernel has to exit); None otherwise."""
        notes = (job.get("metadata") or {}).get("annotations") or {}
        kernel = str(notes.get(OWNER_KERNEL_ANNOTATION, ""))
        if not kernel or self._kernel_ended is None:
            return None
        try:
            ended = self._kernel_ended(kernel, str(notes.get(OWNER_PID_ANNOTATION, "")))
        except Exception:  # never let the watch thread die over it
            log.debug("could not tell whether kernel %s ended", kernel, exc_info=True)
            return None
        return KERNEL_EXIT if ended else None

    def _publish(self, kind: str, objects: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            self._synced[kind] = True
            self.problem = ""
            if kind == "pods":
                self.pods = objects
            else:
                now = datetime.now(timezone.utc)
                live = {_uid(o) for o in objects.values()}
                for name, old in self.jobs.items():
                    uid = _uid(old)
                    if uid not in live:
                        self.gone[uid] = gone_record(
                            name,
                            self.namespace,
                            uid,
                            gone_reason(old, self.closed_here.pop(uid, None) or self._by(old)),
                            now,
                        )
                while len(self.gone) > MAX_GONE:
                    self.gone.pop(next(iter(self.gone)))
                self.jobs = objects
        self._changed()
