"""Opening sessions: ``connect()`` creates a TrainJob, ``attach()`` joins an existing one; both
wait until it is ready and return a :class:`~.session.TrainJobSession`."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from kubernetes.client import ApiClient

from .errors import (
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    PodNotRunningError,
    PodStartError,
    QueueUnavailableError,
    TrainJobError,
)
from .exec.scripts import DEFAULT_IDLE_TIMEOUT, validate_idle_timeout
from .kube import kubeconfig
from .kube.retry import DEFAULT_RETRY_SECONDS, validate_retry_seconds, window_of
from .kueue.admission import (
    check_local_queue,
    check_priority_class,
    default_local_queue,
    multikueue_refusal,
)
from .kueue.labels import parse_duration, queue_labels, queue_of
from .session import TrainJobSession
from .trainjob.body import build_trainjob, generate_name, runtime_ref
from .trainjob.idle import idle_timeout_of
from .trainjob.lifecycle import create_trainjob, delete_hint, delete_trainjob, fetch_trainjob
from .trainjob.pending import DEFAULT_IMAGE_PULL_RETRIES
from .trainjob.readiness import OnStatus, wait_ready
from .trainjob.runtime import (
    fetch_runtime,
    list_runtime_names,
    target_from_runtime,
    trainer_target,
    unknown_runtime_message,
)
from .trainjob.trainer_pod import TrainerTarget
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

log = logging.getLogger(__name__)


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
    image_pull_retries: int = DEFAULT_IMAGE_PULL_RETRIES,
    api_retry_seconds: float = DEFAULT_RETRY_SECONDS,
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
    raises QueueUnavailableError; a timeout while queued raises QueuedTimeoutError. A
    trainer pod that cannot start (a bad image name, or ``image_pull_retries`` failed pulls)
    raises PodStartError and the TrainJob is deleted. An API server that answered before and
    becomes unreachable (a restart) is waited for up to ``api_retry_seconds``, here and by
    the session.
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
    wait_timeout = validate_timeout(timeout)
    if wait_timeout is None:
        raise InvalidInputError("timeout must be a positive number of seconds, got None")
    idle = validate_idle_timeout(idle_timeout) if trainer_command is None else None
    retry_seconds = validate_retry_seconds(api_retry_seconds)

    api, default_namespace = kubeconfig.load(config_file, context)
    window_of(api).seconds = retry_seconds
    ns = namespace or default_namespace
    if queue:
        check_local_queue(api, ns, queue)
    # Kueue manages the job with an explicit queue, or through its default LocalQueue: then
    # the maximum run time is Kueue's to enforce (its label), else the Job's deadline.
    managed = queue or default_local_queue(api, ns)
    if managed and priority_class:
        check_priority_class(api, priority_class)
    kueue_labels = queue_labels(queue, priority_class, max_seconds if managed else None)
    extra_labels = validate_labels({**(labels or {}), **kueue_labels} or None)
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
    if max_seconds and not managed:
        body["spec"]["activeDeadlineSeconds"] = max_seconds
    try:
        created = create_trainjob(api, ns, job_name, body)
    except InvalidInputError as exc:
        if exc.status == 409:
            raise InvalidInputError(
                f"TrainJob {job_name} already exists in namespace {ns}: attach to it with "
                f"attach({job_name!r}), pick another name, or delete it with "
                f"{delete_hint(job_name, ns)}",
                status=409,
                reason="AlreadyExists",
            ) from None
        raise
    created = created or {}
    refusal = multikueue_refusal(api, ns, job_name, created)
    if refusal is not None:
        delete_trainjob(api, ns, job_name)
        raise QueueUnavailableError(refusal)
    queue = queue_of(created) or queue  # Kueue's webhook may have set the default queue
    # Just created from the runtime read above: its JobSet is built from that template, so the
    # trainer's replicated job is known without fetching the JobSet (one round trip fewer).
    target = (
        target_from_runtime(info.obj)
        if info.obj is not None
        else trainer_target(api, ns, job_name, None)
    )
    job_uid = str(((created or {}).get("metadata") or {}).get("uid") or "") or None
    return _session_when_ready(
        api,
        ns,
        job_name,
        runtime,
        target,
        timeout=wait_timeout,
        started=started,
        on_status=on_status,
        queue=queue,
        job_uid=job_uid,
        idle_timeout=idle,
        created=True,
        image_pull_retries=image_pull_retries,
    )


def attach(
    name: str,
    namespace: str | None = None,
    context: str | None = None,
    config_file: str | None = None,
    timeout: float = 600.0,
    on_status: OnStatus | None = None,
    api_retry_seconds: float = DEFAULT_RETRY_SECONDS,
) -> TrainJobSession:
    """Return a session on an existing TrainJob, waiting until its trainer pod is Running."""
    started = time.monotonic()
    validate_name(name)
    if namespace is not None:
        validate_namespace(namespace)
    wait_timeout = validate_timeout(timeout)
    if wait_timeout is None:
        raise InvalidInputError("timeout must be a positive number of seconds, got None")
    retry_seconds = validate_retry_seconds(api_retry_seconds)
    api, default_namespace = kubeconfig.load(config_file, context)
    window_of(api).seconds = retry_seconds
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
    info = fetch_runtime(api, ns, runtime) if runtime else None
    target = trainer_target(api, ns, name, info.obj if info is not None else None)
    queue = queue_of(trainjob)
    job_uid = str((trainjob.get("metadata") or {}).get("uid") or "") or None
    return _session_when_ready(
        api,
        ns,
        name,
        runtime,
        target,
        timeout=wait_timeout,
        started=started,
        on_status=on_status,
        queue=queue,
        job_uid=job_uid,
        idle_timeout=idle_timeout_of(trainjob),
        created=False,
    )


def _session_when_ready(
    api: ApiClient,
    namespace: str,
    name: str,
    runtime: str,
    target: TrainerTarget | None,
    *,
    timeout: float,
    started: float,
    on_status: OnStatus | None,
    queue: str | None,
    job_uid: str | None,
    idle_timeout: float | None,
    created: bool,
    image_pull_retries: int = DEFAULT_IMAGE_PULL_RETRIES,
) -> TrainJobSession:
    """Wait until the job is ready and return its session. ``created``: this call created the
    job, so Ctrl-C, a permission error or an unavailable queue deletes it again."""
    try:
        pod = wait_ready(
            api,
            namespace,
            name,
            target,
            runtime=runtime,
            timeout=timeout,
            started=started,
            on_status=on_status,
            queue=queue,
            job_uid=job_uid,
            delete_on_unavailable=created,
            image_pull_retries=image_pull_retries,
        )
    except (KeyboardInterrupt, PermissionDeniedError, PodStartError):
        if created:
            # The caller has no session to close (and cannot watch its pods without RBAC): do
            # not leave the job holding resources.
            try:
                delete_trainjob(api, namespace, name)
            except TrainJobError as exc:
                log.warning("could not delete TrainJob %s after the interrupt: %s", name, exc)
        raise
    return TrainJobSession(
        name,
        namespace,
        runtime,
        api,
        pod,
        target=target,
        started_at=started,
        queue=queue,
        job_uid=job_uid,
        idle_timeout=idle_timeout,
    )
