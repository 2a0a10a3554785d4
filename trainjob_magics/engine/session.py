"""Interactive TrainJob sessions: ``connect()``, ``attach()`` and :class:`TrainJobSession`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from . import kubeconfig
from .apierrors import request
from .errors import (
    InvalidInputError,
    NotFoundError,
    PodNotRunningError,
    SessionClosedError,
    TrainJobError,
)
from .exec_client import ExecClient, OnOutput
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
    pods_path,
    select_trainer_pod,
    target_from_jobset_spec,
    target_from_runtime,
)
from .result import ExecResult, JobStatus
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
    validate_gpu,
    validate_labels,
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


class TrainJobSession:
    """A running TrainJob whose trainer pod runs commands through pods/exec.

    ``execute`` may be called from any thread; ``close`` is idempotent and also runs when the
    session is used as a context manager.
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
    ) -> None:
        self.name = name
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
        self._exec = ExecClient(api_client)
        self._lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._closed = False

    # -- properties -------------------------------------------------------------------------
    @property
    def pod(self) -> str:
        """Name of the trainer pod commands run in."""
        return self._pod

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
    ) -> ExecResult:
        """Run ``command`` in the trainer pod (a str runs with ``sh -c``, a list as argv)."""
        if self._closed:
            raise SessionClosedError(
                f"TrainJob session {self.name} is closed; start a new one with connect(...)"
            )
        if command is None:
            raise InvalidInputError("command is empty: give a command to run")
        argv = validate_command(command)
        assert argv is not None
        timeout = validate_timeout(timeout)
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8")
        elif stdin is not None and not isinstance(stdin, (bytes, bytearray, memoryview)):
            raise InvalidInputError(f"stdin must be bytes or str, got {type(stdin).__name__}")
        data = bytes(stdin) if stdin is not None else None
        with self._lock:
            pod = self._pod
        run_container = container or self.container
        try:
            return self._exec.run(
                self.namespace,
                pod,
                argv,
                container=run_container,
                stdin=data,
                timeout=timeout,
                on_output=on_output,
            )
        except PodNotRunningError:
            # The handshake failed, so the command never started: safe to retry once on a
            # recreated trainer pod.
            new_pod = self._reresolve(pod)
            if new_pod == pod:
                raise
            return self._exec.run(
                self.namespace,
                new_pod,
                argv,
                container=run_container,
                stdin=data,
                timeout=timeout,
                on_output=on_output,
            )

    def _list_pods(self) -> list[dict[str, Any]]:
        data = request(
            self.api_client,
            "GET",
            pods_path(self.namespace),
            verb="list",
            resource="pods",
            namespace=self.namespace,
            query=[("labelSelector", jobset_selector(self.name))],
        )
        return list(data.get("items") or [])

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
        return job_status(
            self.name,
            self.namespace,
            self.runtime,
            trainjob,
            pods,
            self.target,
            self.started_at,
            deleted=trainjob is None,
        )

    # -- closing ----------------------------------------------------------------------------
    def close(self, timeout: float = 180) -> None:
        """Delete the TrainJob and wait until its pods are gone (warn, not raise, on timeout)."""
        with self._close_lock:
            if self._closed:
                return
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
) -> TrainJobSession:
    """Create an interactive TrainJob and return a session once its trainer pod is Running.

    ``command=None`` injects the keep-alive command. Raises PodNotRunningError when the trainer
    pod finished, ConnectTimeoutError after ``timeout`` (the TrainJob is left in place).
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
    extra_labels = validate_labels(labels)
    wait_timeout = validate_timeout(timeout)
    if wait_timeout is None:
        raise InvalidInputError("timeout must be a positive number of seconds, got None")

    api, default_namespace = kubeconfig.load(config_file, context)
    ns = namespace or default_namespace
    info = fetch_runtime(api, ns, runtime)
    if info is None:
        available = list_runtime_names(api, ns)
        raise InvalidInputError(
            f"unknown runtime {runtime!r} in namespace {ns}; available: "
            f"{', '.join(available) if available else 'none found'}: pass one of them"
        )
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
        **resources,
    )
    try:
        request(
            api,
            "POST",
            trainjob_path(ns),
            verb="create",
            resource=TRAINJOB_RESOURCE,
            namespace=ns,
            name=job_name,
            body=body,
        )
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
    try:
        pod = wait_for_trainer_pod(
            api,
            ns,
            job_name,
            target,
            runtime=runtime,
            timeout=wait_timeout,
            started_at=started,
            on_status=on_status,
        )
    except KeyboardInterrupt:
        # The caller has no session to close: do not leave the job holding resources.
        try:
            delete_trainjob(api, ns, job_name)
        except TrainJobError as exc:
            log.warning("could not delete TrainJob %s after the interrupt: %s", job_name, exc)
        raise
    return TrainJobSession(job_name, ns, runtime, api, pod, target=target, started_at=started)


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
    pod = wait_for_trainer_pod(
        api,
        ns,
        name,
        target,
        runtime=runtime,
        timeout=wait_timeout,
        started_at=started,
        on_status=on_status,
    )
    return TrainJobSession(name, ns, runtime, api, pod, target=target, started_at=started)


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
