"""Interactive TrainJob sessions: ``connect()``, ``attach()`` and :class:`TrainJobSession`."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from . import jobops, kubeconfig, lifeline
from .apierrors import request
from .errors import (
    ConnectionLostError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    PodNotRunningError,
    SessionClosedError,
    TrainJobError,
)
from .exec_client import ExecClient, OnOutput
from .fanout import MultiExecResult, OnPodDone
from .heartbeat import idle_timeout_of
from .jobops import JobOps
from .kueue import (
    QueueReporter,
    SessionPreemptedError,
    admit_or_raise,
    check_local_queue,
    detect_preemption,
    eviction_count,
    find_workload,
    parse_duration,
    preempted_message,
    queue_labels,
    queue_of,
    queue_status,
)
from .output import MAX_MEMORY_OUTPUT, SpillDir
from .pods import (
    TRAINER_CONTAINER,
    TrainerTarget,
    fetch_jobset,
    fetch_runtime,
    is_running,
    job_status,
    jobset_selector,
    list_runtime_names,
    pod_name,
    pod_phase,
    select_trainer_pod,
    target_from_jobset_spec,
    target_from_runtime,
    unknown_runtime_message,
)
from .remote import DEFAULT_IDLE_TIMEOUT, validate_idle_timeout
from .result import ExecResult, JobStatus
from .targets import TargetSpec, list_job_pods
from .trainjob_body import (
    GROUP,
    build_trainjob,
    generate_name,
    runtime_ref,
    trainjob_path,
)
from .validation import (
    validate_command,
    validate_env,
    validate_exec,
    validate_gpu,
    validate_labels,
    validate_max_memory_output,
    validate_name,
    validate_namespace,
    validate_num_nodes,
    validate_object_name,
    validate_quantity,
    validate_timeout,
)
from .waiting import (
    fetch_trainjob,
    wait_for_trainer_pod,
    wait_pods_gone,
    wait_trainjob_gone,
)

log = logging.getLogger(__name__)

TRAINJOB_RESOURCE = f"trainjobs.{GROUP}"
# Foreground deletion keeps the TrainJob object (and so its name) until the JobSet, Jobs, pods and
# the MPI SSH secret are gone: once close() sees it disappear, reconnecting under the same name
# cannot collide with leftovers of the old job.
DELETE_BODY = {"propagationPolicy": "Foreground"}

OnStatus = Callable[[JobStatus], None]


def _container_of(pod: Mapping[str, Any]) -> str:
    """The trainer container (``node``) of a pod, else its first container."""
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    if TRAINER_CONTAINER in names or not names:
        return TRAINER_CONTAINER
    return str(names[0])


def _delete_hint(name: str, namespace: str) -> str:
    return f"`kubectl delete trainjob {name} -n {namespace}`"


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
            self._evictions = _evictions(api_client, namespace, job_uid)
        self._heartbeat = lifeline.start_heartbeat(self)

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
            return lifeline.run_command(
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
            lifeline.raise_if_idle(self, exc)
            new_pod = self._reresolve(pod)
            if new_pod == pod:
                raise
            return run(new_pod)

    def interrupt(self) -> list[lifeline.StopReport]:
        """Stop every command of this session still running in a pod (from any thread): its
        whole process tree gets SIGINT, then SIGTERM, then SIGKILL, about a second apart."""
        return lifeline.interrupt(self)

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
            from .kueue import Visibility, with_queue

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
        pod = _wait_ready(
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
            self._evictions = _evictions(self.api_client, self.namespace, self.job_uid)
        self._preempted = None
        return self._pod

    # -- closing ----------------------------------------------------------------------------
    def close(self, timeout: float = 180) -> None:
        """Delete the TrainJob and wait until its pods are gone (warn, not raise, on timeout)."""
        with self._close_lock:
            if self._closed:
                return
            lifeline.stop_heartbeat(self)
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


def delete_trainjob(api: ApiClient, namespace: str, name: str) -> bool:
    """Delete a TrainJob (foreground cascade); False when it was already gone."""
    try:
        request(
            api,
            "DELETE",
            trainjob_path(namespace, name),
            verb="delete",
            resource=TRAINJOB_RESOURCE,
            namespace=namespace,
            name=name,
            body=DELETE_BODY,
        )
    except NotFoundError:
        return False
    return True


def connect(
    runtime: str,
    *,
    image: str | None = None,
    num_nodes: int | None = None,
    command: str | Sequence[str] | None = None,
    cpu: str | int | float | None = None,
    memory: str | int | None = None,
    gpu: int | str | None = None,
    env: Mapping[str, str] | None = None,
    name: str | None = None,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    timeout: float = 600.0,
    context: str | None = None,
    config_file: str | None = None,
    on_status: OnStatus | None = None,
    queue: str | None = None,
    priority_class: str | None = None,
    max_runtime: str | int | float | None = None,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
) -> TrainJobSession:
    """Create an interactive TrainJob and return a session once its trainer pod is Running.

    ``command=None`` injects the keep-alive command: an idle watchdog that ends the job after
    ``idle_timeout`` seconds (default 30 min) without a heartbeat from this process (sent while
    it lives); ``idle_timeout=None`` keeps it forever (``sleep infinity``). Raises
    PodNotRunningError when the trainer pod finished, ConnectTimeoutError after ``timeout``
    (the TrainJob is left in place).

    ``queue`` (a Kueue LocalQueue) and ``priority_class`` set Kueue's labels; ``max_runtime``
    (seconds or "8h", "90m") becomes ``kueue.x-k8s.io/max-exec-time-seconds`` with a queue and
    ``spec.activeDeadlineSeconds`` without one (docs/kueue.md). A missing or inactive queue
    raises QueueUnavailableError; a timeout while queued raises QueuedTimeoutError.
    """
    started = time.monotonic()
    validate_object_name(runtime, "runtime name")
    if name is not None:
        validate_name(name)
    if namespace is not None:
        validate_namespace(namespace)
    if image is not None and (not isinstance(image, str) or not image.strip()):
        raise InvalidInputError(f"image must be a non-empty string, got {image!r}")
    nodes = validate_num_nodes(num_nodes)
    trainer_command = validate_command(command, "trainer command")
    resources = {
        "cpu": validate_quantity(cpu, "cpu"),
        "memory": validate_quantity(memory, "memory"),
        "gpu": validate_gpu(gpu),
    }
    env_vars = validate_env(env)
    if queue is not None:
        validate_object_name(queue, "queue name")
    if priority_class is not None:
        validate_object_name(priority_class, "priority class")
    try:
        max_seconds = parse_duration(max_runtime)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    kueue_labels = queue_labels(queue, priority_class, max_seconds if queue else None)
    extra_labels = validate_labels({**(labels or {}), **kueue_labels} or None)
    wait_timeout = validate_timeout(timeout)
    if wait_timeout is None:
        raise InvalidInputError("timeout must be a positive number of seconds, got None")
    idle = validate_idle_timeout(idle_timeout) if trainer_command is None else None

    api, default_namespace = kubeconfig.load(config_file, context)
    ns = namespace or default_namespace
    if queue:
        check_local_queue(api, ns, queue)
    info = fetch_runtime(api, ns, runtime)
    if info is None:
        available = list_runtime_names(api, ns)
        raise InvalidInputError(unknown_runtime_message(runtime, ns, available))
    job_name = name or generate_name()
    body = build_trainjob(
        job_name,
        ns,
        runtime,
        runtime_kind=info.kind,
        image=image,
        num_nodes=nodes,
        command=trainer_command,
        env=env_vars,
        labels=extra_labels,
        idle_timeout=idle,
        **resources,
    )
    if max_seconds and not queue:
        body["spec"]["activeDeadlineSeconds"] = max_seconds
    try:
        created = lifeline.create_trainjob(api, ns, job_name, body)
    except InvalidInputError as exc:
        if exc.status == 409:
            raise InvalidInputError(
                f"TrainJob {job_name} already exists in namespace {ns}: attach to it with "
                f"attach({job_name!r}), pick another name, or delete it with "
                f"{_delete_hint(job_name, ns)}",
                status=409,
                reason="AlreadyExists",
            ) from None
        raise
    target = target_from_runtime(info.obj) if info.obj is not None else None
    if target is None:
        jobset = fetch_jobset(api, ns, job_name)
        target = (
            target_from_jobset_spec(jobset.get("spec") or {}, is_mpi=None)
            if jobset
            else TrainerTarget(None, source="fallback")
        )
    job_uid = str(((created or {}).get("metadata") or {}).get("uid") or "") or None
    try:
        pod = _wait_ready(
            api,
            ns,
            job_name,
            target,
            runtime=runtime,
            timeout=wait_timeout,
            started=started,
            on_status=on_status,
            queue=queue,
            job_uid=job_uid,
            delete_on_unavailable=True,
        )
    except (KeyboardInterrupt, PermissionDeniedError):
        # The caller has no session to close (and cannot watch its pods without RBAC): do not
        # leave the job holding resources.
        try:
            delete_trainjob(api, ns, job_name)
        except TrainJobError as exc:
            log.warning("could not delete TrainJob %s after the interrupt: %s", job_name, exc)
        raise
    return TrainJobSession(
        job_name,
        ns,
        runtime,
        api,
        pod,
        target=target,
        started_at=started,
        queue=queue,
        job_uid=job_uid,
        idle_timeout=idle,
    )


def _evictions(api: ApiClient, namespace: str, job_uid: str) -> int:
    """How often the job's Workload was evicted so far (0 when it cannot be read)."""
    try:
        return eviction_count(find_workload(api, namespace, job_uid))
    except TrainJobError:
        return 0


def _wait_ready(
    api: ApiClient,
    namespace: str,
    name: str,
    target: TrainerTarget | None,
    *,
    runtime: str,
    timeout: float,
    started: float,
    on_status: OnStatus | None,
    queue: str | None,
    job_uid: str | None,
    delete_on_unavailable: bool = False,
) -> dict[str, Any]:
    """Wait for Kueue admission (queued jobs), then for the trainer pod to run."""
    if not queue or not job_uid:
        return wait_for_trainer_pod(
            api,
            namespace,
            name,
            target,
            runtime=runtime,
            timeout=timeout,
            started_at=started,
            on_status=on_status,
        )
    deadline = time.monotonic() + timeout
    reporter = QueueReporter(on_status)
    admit_or_raise(
        api,
        namespace,
        name,
        job_uid,
        queue,
        runtime=runtime,
        timeout=timeout,
        deadline=deadline,
        started=started,
        reporter=reporter,
        fetch_trainjob=lambda: fetch_trainjob(api, namespace, name),
        delete_job=(lambda: delete_trainjob(api, namespace, name))
        if delete_on_unavailable
        else None,
    )
    return wait_for_trainer_pod(
        api,
        namespace,
        name,
        target,
        runtime=runtime,
        timeout=max(1.0, deadline - time.monotonic()),
        started_at=started,
        on_status=reporter.wrap,
    )


def attach(
    name: str,
    namespace: str | None = None,
    context: str | None = None,
    config_file: str | None = None,
    timeout: float = 600.0,
    on_status: OnStatus | None = None,
) -> TrainJobSession:
    """Return a session on an existing TrainJob, waiting until its trainer pod is Running."""
    started = time.monotonic()
    validate_name(name)
    if namespace is not None:
        validate_namespace(namespace)
    wait_timeout = validate_timeout(timeout)
    if wait_timeout is None:
        raise InvalidInputError("timeout must be a positive number of seconds, got None")
    api, default_namespace = kubeconfig.load(config_file, context)
    ns = namespace or default_namespace
    try:
        trainjob = fetch_trainjob(api, ns, name)
    except NotFoundError:
        raise NotFoundError(
            f"TrainJob {name} not found in namespace {ns}; list them with "
            f"`kubectl get trainjobs -n {ns}` or create one with connect(...)",
            status=404,
            reason="NotFound",
        ) from None
    if (trainjob.get("metadata") or {}).get("deletionTimestamp"):
        raise PodNotRunningError(
            f"TrainJob {name} in namespace {ns} is being deleted; "
            "create a new one with connect(...)"
        )
    runtime, _kind = runtime_ref(trainjob)
    target = _attach_target(api, ns, name, runtime)
    queue = queue_of(trainjob)
    job_uid = str((trainjob.get("metadata") or {}).get("uid") or "") or None
    pod = _wait_ready(
        api,
        ns,
        name,
        target,
        runtime=runtime,
        timeout=wait_timeout,
        started=started,
        on_status=on_status,
        queue=queue,
        job_uid=job_uid,
    )
    return TrainJobSession(
        name,
        ns,
        runtime,
        api,
        pod,
        target=target,
        started_at=started,
        queue=queue,
        job_uid=job_uid,
        idle_timeout=idle_timeout_of(trainjob),
    )


def _attach_target(api: ApiClient, namespace: str, name: str, runtime: str) -> TrainerTarget:
    """Trainer target of an existing job: its JobSet, else its runtime, else the fallback."""
    jobset = fetch_jobset(api, namespace, name)
    info = fetch_runtime(api, namespace, runtime) if runtime else None
    is_mpi = None
    if info is not None and info.obj is not None:
        is_mpi = "mpi" in ((info.obj.get("spec") or {}).get("mlPolicy") or {})
    if jobset:
        target = target_from_jobset_spec(jobset.get("spec") or {}, is_mpi=is_mpi)
        return TrainerTarget(target.replicated_job, target.mpi_launcher, source="jobset")
    if info is not None and info.obj is not None:
        return target_from_runtime(info.obj)
    return TrainerTarget(None, source="fallback")
