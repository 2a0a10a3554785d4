"""``SessionInventory``: this user's TrainJobs in every namespace they work in, one shared watch
per namespace, read by every open page; closing one from the sidebar."""

from __future__ import annotations

import contextlib
import getpass
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from ..errors import TrainJobError
from ..exec.client import ExecClient
from ..kube import kubeconfig
from ..kube.names import CLOSED_BY_ANNOTATION, CREATED_BY_ANNOTATION
from ..kueue.api import Visibility, queue_status
from ..kueue.labels import queue_of
from ..trainjob.orphans import close_trainjob
from ..trainjob.runtime import fetch_jobset, jobset_pod_count
from ..validation import validate_name, validate_namespace
from .gpu_sampler import SAMPLE_EVERY, GpuSampler
from .namespace_watch import KernelEnded, NamespaceWatch
from .notes import annotate
from .records import gone_record, pods_of, session_record, unknown_record
from .schema import AnyJobRecord, GoneRecord, GpuReport, Queue, SessionRecord, Snapshot

QUEUE_CACHE_SECONDS = 5.0
# a JobSet's pod count changes only when its TrainJob is resized (suspended, under Kueue)
POD_COUNT_CACHE_SECONDS = 30.0
STOP_SECONDS = 10.0  # the longest stop() waits for the watch threads (a relist in flight)
CLOSED_FROM = "the sidebar"


def utc_now() -> datetime:
    """The time the records are read at."""
    return datetime.now(timezone.utc)


def current_user() -> str:
    """The user name the engine writes as ``created-by``."""
    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


class SessionInventory:
    """Every TrainJob of this user in ``namespaces`` + the kubeconfig's + any added later (those
    a panel or a kernel names). A kubeconfig that cannot be read is one ``problem`` line."""

    def __init__(
        self,
        *,
        config_file: str | None = None,
        context: str | None = None,
        namespaces: Iterable[str] = (),
        all_users: bool = False,
        clock: Callable[[], datetime] = utc_now,
        kernel_ended: KernelEnded | None = None,
    ) -> None:
        """``kernel_ended(kernel_id, pid)``: whether that kernel process of this Jupyter server
        has exited or is exiting (a job of it that vanished unnoted was closed at its exit)."""
        self.config_file, self.context = config_file, context
        self._kernel_ended = kernel_ended
        self._clock = clock
        self.user = None if all_users else current_user()
        self.problem = ""
        self.default_namespace = ""
        self._cond = threading.Condition()
        self._version = 0
        self._watches: dict[str, NamespaceWatch] = {}
        self._stopped = False
        self._queues: dict[str, tuple[float, Queue | None]] = {}
        self._pod_counts: dict[str, tuple[float, int]] = {}  # by TrainJob uid
        self._visibility: Visibility | None = None
        self._gpus: GpuSampler | None = None
        self.listeners: list[Callable[[], None]] = []  # called (any thread) on every change
        self.api: Any = None
        try:
            self.api, self.default_namespace = kubeconfig.load(config_file, context)
        except TrainJobError as exc:
            self.problem = str(exc).splitlines()[0]
            return
        for ns in [self.default_namespace, *namespaces]:
            self.add_namespace(ns)

    # ------------------------------------------------------------------ namespaces

    def add_namespace(self, namespace: str) -> bool:
        """Watch ``namespace`` too (idempotent); False when the name is not a namespace name."""
        if self.api is None:
            return False
        try:
            validate_namespace(namespace)
        except TrainJobError:
            return False
        with self._cond:
            if self._stopped:
                return False
            if namespace not in self._watches:
                self._watches[namespace] = NamespaceWatch(
                    self.api, namespace, self._bump, self._kernel_ended
                )
        return True

    def namespaces(self) -> list[str]:
        with self._cond:
            return list(self._watches)

    def _bump(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):
                listener()

    @property
    def version(self) -> int:
        return self._version

    def wait_change(self, version: int, timeout: float) -> int:
        """Block until the version passes ``version`` or ``timeout``; the version then."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout=timeout)
            return self._version

    # ------------------------------------------------------------------ reading

    def _mine(self, job: dict[str, Any]) -> bool:
        if self.user is None:
            return True
        notes = (job.get("metadata") or {}).get("annotations") or {}
        return notes.get(CREATED_BY_ANNOTATION) == self.user

    def _queue(self, namespace: str, job: dict[str, Any], state: str) -> Queue | None:
        lq = queue_of(job)
        uid = str((job.get("metadata") or {}).get("uid") or "")
        if not lq or state not in ("Suspended", "Pending"):
            return None
        cached = self._queues.get(uid)
        if cached and time.monotonic() - cached[0] < QUEUE_CACHE_SECONDS:
            return cached[1]
        try:
            if self._visibility is None:
                self._visibility = Visibility(self.api)
            qs = queue_status(self.api, namespace, uid, lq, self._visibility)
            found: Queue | None = {
                "localQueue": lq,
                "state": qs.state,
                "position": qs.position_in_local_queue,
                "clusterQueuePosition": qs.position_in_cluster_queue,
                "message": qs.message,
            }
        except TrainJobError as exc:
            found = {"localQueue": lq, "state": "Unknown", "message": str(exc).splitlines()[0]}
        self._queues[uid] = (time.monotonic(), found)
        return found

    def _expected_pods(self, namespace: str, job: dict[str, Any]) -> int:
        """How many pods the job's JobSet runs (0 before it exists or when it cannot be read),
        read again after POD_COUNT_CACHE_SECONDS."""
        meta = job.get("metadata") or {}
        uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
        cached = self._pod_counts.get(uid)
        if cached and time.monotonic() - cached[0] < POD_COUNT_CACHE_SECONDS:
            return cached[1]
        try:
            count = jobset_pod_count(fetch_jobset(self.api, namespace, name))
        except TrainJobError:
            count = cached[1] if cached else 0
        if len(self._pod_counts) > 1000:  # jobs long gone
            self._pod_counts.clear()
        self._pod_counts[uid] = (time.monotonic(), count)
        return count

    def _record(
        self, namespace: str, job: dict[str, Any], pods: Iterable[Any], now: datetime
    ) -> SessionRecord:
        expected = self._expected_pods(namespace, job)
        record = session_record(job, pods, now=now, expected_pods=expected)
        record["queue"] = self._queue(namespace, job, record["state"]) or record["queue"]
        return record

    def snapshot(self) -> Snapshot:
        """``{version, sessions, gone, problems, namespaces, user}`` for the REST API."""
        now = self._clock()
        sessions: list[SessionRecord] = []
        gone: list[GoneRecord] = []
        problems = [self.problem] if self.problem else []
        version = self._version
        for ns, watch in list(self._watches.items()):
            if watch.problem:
                problems.append(f"namespace {ns}: {watch.problem}")
            pods = list(watch.pods.values())
            for job in watch.jobs.values():
                if not self._mine(job):
                    continue
                sessions.append(self._record(ns, job, pods, now))
            gone += list(watch.gone.values())
        sessions.sort(key=lambda r: (r["created"] or "", r["name"]))
        return {
            "version": version,
            "sessions": sessions,
            "gone": gone[-100:],
            "problems": problems,
            "namespaces": self.namespaces(),
            "user": self.user,
        }

    def job(self, namespace: str, name: str, uid: str = "") -> AnyJobRecord:
        """One job's record by name (and uid: a newer job of the same name is not it); a gone
        record when it is not on the cluster; ``state: "Unknown"`` while the namespace is not
        read yet or cannot be read."""
        self.add_namespace(namespace)
        watch = self._watches.get(namespace)
        if watch is None:
            return unknown_record(
                name, namespace, uid, self.problem or f"{namespace!r} is not a namespace name"
            )
        job = watch.jobs.get(name)
        if job is not None and (not uid or (job.get("metadata") or {}).get("uid") == uid):
            return self._record(namespace, job, watch.pods.values(), self._clock())
        if uid and uid in watch.gone:
            return watch.gone[uid]
        if not watch.synced:
            return unknown_record(name, namespace, uid, watch.problem or "reading the namespace")
        reason = (
            "replaced by a newer TrainJob of the same name"
            if job is not None
            else "not on the cluster: deleted before this Jupyter server saw it"
        )
        return gone_record(name, namespace, uid, reason, None)

    # ------------------------------------------------------------------ GPUs

    def gpus(self, namespace: str, name: str, uid: str = "") -> GpuReport:
        """Each GPU's utilisation and memory in the job's pods that request GPUs, for a panel
        that is visible: one exec per pod at most every 10 s whoever asks, none in a pod where
        one of our commands runs (the pod's own check); ``pods: []`` when nothing is sampled."""
        record: GpuReport = {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "sampleEvery": SAMPLE_EVERY,
            "pods": [],
        }
        self.add_namespace(namespace)
        watch = self._watches.get(namespace)
        job = watch.jobs.get(name) if watch is not None else None
        if watch is None or job is None or (uid and (job.get("metadata") or {}).get("uid") != uid):
            record["problem"] = "not on the cluster (or not read yet)"
            return record
        with self._cond:
            if self._gpus is None:
                self._gpus = GpuSampler(ExecClient(self.api))
            sampler = self._gpus
        pods = pods_of(name, list(watch.pods.values()))
        record["pods"] = [p.as_dict() for p in sampler.sample(namespace, pods)]
        return record

    # ------------------------------------------------------------------ closing

    def close(self, namespace: str, name: str, timeout: float = 120.0) -> str:
        """Close a TrainJob of this project (saying it was closed from the sidebar)."""
        validate_namespace(namespace)
        validate_name(name)
        if self.api is None:
            raise TrainJobError(self.problem or "no kubeconfig")
        # close_trainjob says what is wrong (not found, not ours, no permission)
        try:
            annotate(self.api, namespace, name, {CLOSED_BY_ANNOTATION: CLOSED_FROM})
        except TrainJobError:  # e.g. no `patch` on trainjobs: this server remembers it instead
            watch = self._watches.get(namespace)
            job = watch.jobs.get(name) if watch is not None else None
            if watch is not None and job is not None:
                watch.closed_here[(job.get("metadata") or {}).get("uid", "")] = CLOSED_FROM
        return close_trainjob(
            name, namespace, context=self.context, config_file=self.config_file, timeout=timeout
        )

    def stop(self, timeout: float = STOP_SECONDS) -> bool:
        """End every watch and wait up to ``timeout`` seconds for their threads; no namespace
        is watched after this. True when every thread ended."""
        with self._cond:
            self._stopped = True
            watches = list(self._watches.values())
        for watch in watches:
            watch.stop()
        deadline = time.monotonic() + timeout
        ended = True
        for watch in watches:
            ended = watch.join(max(0.0, deadline - time.monotonic())) and ended
        self._bump()
        return ended
