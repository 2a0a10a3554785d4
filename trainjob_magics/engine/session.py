"""Interactive TrainJob sessions: :class:`TrainJobSession` (``connect()`` / ``attach()`` in
``connecting.py`` open them)."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from . import jobops
from .errors import (
    ConnectionLostError,
    InvalidInputError,
    NotFoundError,
    PodNotRunningError,
    SessionClosedError,
    SessionPreemptedError,
    TrainJobError,
)
from .exec.client import ExecClient, OnOutput
from .exec.commands import interrupt, run_command
from .exec.fanout import OnPodDone
from .exec.output import MAX_MEMORY_OUTPUT, SpillDir
from .jobops import JobOps
from .kube.names import jobset_selector
from .kube.objects import is_running, pod_name, pod_phase
from .kueue.admission import detect_preemption, preempted_message
from .kueue.api import Visibility, queue_status
from .result import ExecResult, JobStatus, MultiExecResult, StopReport
from .trainjob import readiness
from .trainjob.idle import raise_if_idle, start_heartbeat, stop_heartbeat
from .trainjob.lifecycle import delete_trainjob, fetch_trainjob, wait_pods_gone, wait_trainjob_gone
from .trainjob.readiness import OnStatus, eviction_baseline
from .trainjob.status import job_status
from .trainjob.targets import TargetSpec, list_job_pods
from .trainjob.trainer_pod import TRAINER_CONTAINER, TrainerTarget, select_trainer_pod
from .validation import validate_exec, validate_max_memory_output, validate_timeout

log = logging.getLogger(__name__)


def _container_of(pod: Mapping[str, Any]) -> str:
    """The trainer container (``node``) of a pod, else its first container."""
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    if TRAINER_CONTAINER in names or not names:
        return TRAINER_CONTAINER
    return str(names[0])


class TrainJobSession(JobOps):
    """A running TrainJob whose trainer pod runs commands through pods/exec.

    ``execute`` may be called from any thread; ``close`` is idempotent and also runs when the
    session is used as a context manager. Whole-job methods (``pods``, ``upload``,
    ``download``, ``write_file``, ``logs``) come from :class:`~.jobops.JobOps`.
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        runtime: str,
        api_client: ApiClient,
        trainer_pod: str | Mapping[str, Any],
        container: str | None = None,
        *,
        target: TrainerTarget | None = None,
        started_at: float | None = None,
        queue: str | None = None,
        job_uid: str | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        self.name = name
        self.idle_timeout = idle_timeout  # the idle watchdog's timeout; None: no heartbeats
        self._inflight: dict[str, tuple[str, str | None]] = {}  # exec id -> (pod, container)
        self.queue = queue  # Kueue LocalQueue, None when the job is not queued
        self.job_uid = job_uid
        self._evictions = 0
        self._preempted: SessionPreemptedError | None = None
        self.namespace = namespace
        self.runtime = runtime
        self.api_client = api_client
        if isinstance(trainer_pod, Mapping):
            self._pod = pod_name(trainer_pod)
            self.container = container or _container_of(trainer_pod)
        else:
            self._pod = trainer_pod
            self.container = container or TRAINER_CONTAINER
        self.target = target
        self.started_at = time.monotonic() if started_at is None else started_at
        self._spill = SpillDir(name)
        self._exec = ExecClient(api_client, spill_dir=self._spill)
        self._lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._closed = False
        if queue and job_uid:
            self._evictions = eviction_baseline(api_client, namespace, job_uid)
        self._heartbeat = start_heartbeat(self)

    # -- properties -------------------------------------------------------------------------
    @property
    def pod(self) -> str:
        """Name of the trainer pod commands run in."""
        return self._pod

    @property
    def max_memory_output(self) -> int:
        """Bytes of each output stream ``execute`` keeps in memory (default 64 MiB); the rest
        of a larger output is spilled to a temporary file (``ExecResult.stdout_path``)."""
        return int(self._exec.max_memory_output)

    @max_memory_output.setter
    def max_memory_output(self, value: int) -> None:
        limit = validate_max_memory_output(value)
        self._exec.max_memory_output = MAX_MEMORY_OUTPUT if limit is None else limit

    @property
    def closed(self) -> bool:
        """True once ``close()`` deleted the TrainJob."""
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pod={self._pod!r}"
        return (
            f"TrainJobSession(name={self.name!r}, namespace={self.namespace!r}, "
            f"runtime={self.runtime!r}, {state})"
        )

    # -- commands ---------------------------------------------------------------------------
    def execute(
        self,
        command: str | Sequence[str],
        *,
        container: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        on_output: OnOutput | None = None,
        pods: TargetSpec = None,
        max_memory_output: int | None = None,
        on_done: OnPodDone | None = None,
    ) -> ExecResult | MultiExecResult:
        """Run ``command`` in the trainer pod (a str runs with ``sh -c``, a list as argv).

        ``pods`` other than None/``"trainer"`` (``"all"``, ``"node"``, ``"node-2"``, a pod name,
        a list) runs it on those pods concurrently and returns a :class:`MultiExecResult`;
        ``on_output`` is then called as ``on_output(pod, stream, text)`` and ``on_done`` as
        ``on_done(pod, result, error)`` when a pod's command ends. A timeout or Ctrl-C
        stops the remote command (on every pod). Each output stream keeps at most
        ``max_memory_output`` bytes in memory (default: :attr:`max_memory_output`), the rest
        is spilled to a temporary file.
        """
        if self._closed:
            raise SessionClosedError(
                f"TrainJob session {self.name} is closed; start a new one with connect(...)"
            )
        limit = validate_max_memory_output(max_memory_output)
        if jobops.wants_multi(pods):
            return self._execute_multi(
                command,
                pods,
                container=container,
                stdin=stdin,
                timeout=timeout,
                on_output=on_output,  # type: ignore[arg-type]
                on_done=on_done,
                max_memory_output=limit,
            )
        argv, timeout, data = validate_exec(command, timeout, stdin)
        if self._preempted is not None:
            raise SessionPreemptedError(
                str(self._preempted), queue=self._preempted.queue, partial=None
            )
        with self._lock:
            pod = self._pod
        run = functools.partial(
            self._execute,
            argv=argv,
            run_container=container or self.container,
            data=data,
            timeout=timeout,
            on_output=on_output,
            max_memory_output=limit,
        )
        if not self.queue:
            return run(pod)
        try:
            result = run(pod)
        except (PodNotRunningError, ConnectionLostError) as exc:
            self._check_preempted(getattr(exc, "partial", None))
            raise
        if result.returncode != 0:
            self._check_preempted(result)
        return result

    def _check_preempted(self, partial: ExecResult | None) -> None:
        """Raise SessionPreemptedError (keeping ``partial``) if Kueue took the job away."""
        try:
            trainjob = fetch_trainjob(self.api_client, self.namespace, self.name)
            qs = detect_preemption(
                self.api_client,
                self.namespace,
                self.name,
                self.job_uid or "",
                self.queue,
                self._evictions,
                trainjob,
            )
        except TrainJobError as exc:
            log.debug("preemption check of %s failed: %s", self.name, exc)
            return
        if qs is None:
            return
        err = SessionPreemptedError(preempted_message(self.name, qs), partial=partial, queue=qs)
        self._preempted = err
        raise err

    def _execute(
        self,
        pod: str,
        *,
        argv: list[str],
        run_container: str,
        data: bytes | None,
        timeout: float | None,
        on_output: OnOutput | None,
        max_memory_output: int | None,
    ) -> ExecResult:
        def run(target: str) -> ExecResult:
            return run_command(
                self,
                target,
                argv,
                container=run_container,
                stdin=data,
                timeout=timeout,
                on_output=on_output,
                max_memory_output=max_memory_output,
            )

        try:
            return run(pod)
        except PodNotRunningError as exc:
            # The handshake failed, so the command never started: safe to retry once on a
            # recreated trainer pod (unless Kueue preempted the job: its state is gone; or the
            # job ended itself after going idle).
            if self.queue:
                self._check_preempted(None)
            raise_if_idle(self, exc)
            new_pod = self._reresolve(pod)
            if new_pod == pod:
                raise
            return run(new_pod)

    def interrupt(self) -> list[StopReport]:
        """Stop every command of this session still running in a pod (from any thread): its
        whole process tree gets SIGINT, then SIGTERM, then SIGKILL, about a second apart."""
        return interrupt(self)

    def _list_pods(self) -> list[dict[str, Any]]:
        return list_job_pods(self.api_client, self.namespace, self.name)

    def _reresolve(self, old_pod: str) -> str:
        """Find the current trainer pod after ``old_pod`` failed; raise if none is Running."""
        pods = self._list_pods()
        trainer = select_trainer_pod(pods, self.target)
        if trainer is not None and is_running(trainer):
            with self._lock:
                self._pod = pod_name(trainer)
            return pod_name(trainer)
        if not pods:
            try:
                fetch_trainjob(self.api_client, self.namespace, self.name)
            except NotFoundError:
                raise PodNotRunningError(
                    f"TrainJob {self.name} no longer exists in namespace {self.namespace}; "
                    "start a new session with connect(...)"
                ) from None
        state = f"is {pod_phase(trainer)}" if trainer is not None else "is gone"
        raise PodNotRunningError(
            f"the trainer pod of TrainJob {self.name} ({old_pod}) {state}; check "
            "session.status(), or close() the session and connect again"
        )

    # -- status -----------------------------------------------------------------------------
    def status(self) -> JobStatus:
        """A snapshot of the TrainJob and its pods."""
        try:
            trainjob: dict[str, Any] | None = fetch_trainjob(
                self.api_client, self.namespace, self.name
            )
        except NotFoundError:
            trainjob = None
        pods = self._list_pods()
        status = job_status(
            self.name,
            self.namespace,
            self.runtime,
            trainjob,
            pods,
            self.target,
            self.started_at,
            deleted=trainjob is None,
        )
        if self.queue and self.job_uid and trainjob is not None:
            from .kueue.admission import with_queue

            qs = queue_status(
                self.api_client,
                self.namespace,
                self.job_uid,
                self.queue,
                Visibility(self.api_client),
            )
            status = with_queue(status, qs)
        return status

    def wait_ready(self, timeout: float = 600.0, on_status: OnStatus | None = None) -> str:
        """Wait until the job is (re)admitted and its trainer pod runs; return the pod name.

        After a SessionPreemptedError this picks up the new trainer pod and makes ``execute``
        work again. Raises QueuedTimeoutError / ConnectTimeoutError on timeout.
        """
        if self._closed:
            raise SessionClosedError(
                f"TrainJob session {self.name} is closed; start a new one with connect(...)"
            )
        wait_timeout = validate_timeout(timeout)
        if wait_timeout is None:
            raise InvalidInputError("timeout must be a positive number of seconds, got None")
        pod = readiness.wait_ready(
            self.api_client,
            self.namespace,
            self.name,
            self.target,
            runtime=self.runtime,
            timeout=wait_timeout,
            started=time.monotonic(),
            on_status=on_status,
            queue=self.queue,
            job_uid=self.job_uid,
        )
        with self._lock:
            self._pod = pod_name(pod)
            self.container = _container_of(pod)
        if self.queue and self.job_uid:
            self._evictions = eviction_baseline(self.api_client, self.namespace, self.job_uid)
        self._preempted = None
        return self._pod

    # -- closing ----------------------------------------------------------------------------
    def close(self, timeout: float = 180) -> None:
        """Delete the TrainJob and wait until its pods are gone (warn, not raise, on timeout)."""
        with self._close_lock:
            if self._closed:
                return
            stop_heartbeat(self)
            self._spill.close()  # results still held keep their spill files until collected
            deadline = time.monotonic() + timeout
            delete_trainjob(self.api_client, self.namespace, self.name)
            self._closed = True
            try:
                gone = wait_pods_gone(self.api_client, self.namespace, self.name, deadline)
                gone = gone and wait_trainjob_gone(
                    self.api_client, self.namespace, self.name, deadline
                )
            except TrainJobError as exc:
                log.warning(
                    "TrainJob %s is being deleted but waiting for its pods failed: %s",
                    self.name,
                    exc,
                )
                return
            if not gone:
                log.warning(
                    "TrainJob %s in namespace %s is being deleted but its pods were still there "
                    "after %gs; check with `kubectl get pods -n %s -l %s`",
                    self.name,
                    self.namespace,
                    timeout,
                    self.namespace,
                    jobset_selector(self.name),
                )

    def __enter__(self) -> TrainJobSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
