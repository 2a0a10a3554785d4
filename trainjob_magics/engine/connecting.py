"""Opening sessions: ``connect()`` creates a TrainJob, ``attach()`` joins an existing one; both
wait until it is ready and return a :class:`~.session.TrainJobSession`."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

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
from .inventory.notes import note_session
from .kube import kubeconfig
from .kube.names import CLOSED_BY_ANNOTATION
from .kube.retry import DEFAULT_RETRY_SECONDS, validate_retry_seconds, window_of
from .kueue.admission import (
    check_local_queue,
    check_priority_class,
    default_local_queue,
    multikueue_refusal,
)
from .kueue.discovery import kueue_api
from .kueue.labels import parse_duration, queue_labels, queue_of
from .session import TrainJobSession
from .trainjob.body import build_trainjob, generate_name, runtime_ref
from .trainjob.dryrun import DRY_RUN_QUERY, clean_manifest
from .trainjob.idle import idle_timeout_of
from .trainjob.idle_stop import validate_idle_stop
from .trainjob.lifecycle import create_trainjob, delete_hint, delete_trainjob, fetch_trainjob
from .trainjob.notebook_pod import owner_reference
from .trainjob.overrides import apply_shaping, replicated_jobs
from .trainjob.pending import DEFAULT_IMAGE_PULL_RETRIES
from .trainjob.prechecks import env_from_env, precheck
from .trainjob.readiness import OnStatus, wait_ready
from .trainjob.runtime import (
    fetch_runtime,
    list_runtime_names,
    target_from_runtime,
    trainer_target,
    unknown_runtime_message,
)
from .trainjob.served import RUNTIME_PATCHES, SPEC_OVERRIDES, TEMPLATE_OVERRIDES, TrainerAPI
from .trainjob.served import trainer_api as served_trainer_api
from .trainjob.shaping import PodShaping, build_shaping
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
    labels: Mapping[str, str] | Sequence[str] | None = None,
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
    annotations: Mapping[str, str] | Sequence[str] | None = None,
    volumes: str | Sequence[str] | None = None,
    shm_size: str | None = None,
    service_account: str | None = None,
    node_selector: Mapping[str, str] | Sequence[str] | None = None,
    tolerations: str | Sequence[str] | None = None,
    image_pull_secrets: str | Sequence[str] | None = None,
    env_from: str | Sequence[str] | None = None,
    pod_patch: str | Mapping[str, Any] | None = None,
    dry_run: bool = False,
    idle_stop: float | str | None = None,
) -> Any:
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

    Pod shaping (docs/python-api.md): ``volumes`` (``"pvc:NAME:/path[:ro]"``,
    ``"configmap:NAME:/path"``, ``"secret:NAME:/path"``, ``"emptydir:/path[:SIZE]"``),
    ``shm_size`` (``/dev/shm`` in memory), ``service_account``, ``node_selector``,
    ``tolerations`` (``"KEY[=VALUE]:EFFECT"``), ``image_pull_secrets``, ``labels`` and
    ``annotations`` (on the TrainJob and its pods), ``env_from`` (``"secret:NAME"``,
    ``"configmap:NAME"``) and ``pod_patch`` (a pod-template YAML file or dict) go to the field
    the cluster's Trainer has. A named PVC, ConfigMap, Secret or service account that does not
    exist raises InvalidInputError before anything is created. ``dry_run=True`` returns the
    TrainJob manifest (a dict) after a server-side dry run, and creates nothing.

    ``idle_stop`` (seconds, or ``"30m"``, ``"2h"``; default off) closes the session once no
    command has run for that long, though this process lives; a command that runs longer is
    never cut (:meth:`TrainJobSession.set_idle_stop`).
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
    stop_after = validate_idle_stop(idle_stop)
    retry_seconds = validate_retry_seconds(api_retry_seconds)
    shaping = build_shaping(
        volumes=volumes,
        shm_size=shm_size,
        service_account=service_account,
        node_selector=node_selector,
        tolerations=tolerations,
        image_pull_secrets=image_pull_secrets,
        labels=labels,
        annotations=annotations,
        env_from=env_from,
        pod_patch=pod_patch,
    )

    api, default_namespace = kubeconfig.load(config_file, context)
    window_of(api).seconds = retry_seconds
    ns = namespace or default_namespace
    objects = precheck(api, ns, shaping)
    env_refs = env_from_env(shaping, objects)
    if queue:
        check_local_queue(api, ns, queue)
    # Kueue manages the job with an explicit queue, or through its default LocalQueue: then
    # the maximum run time is Kueue's to enforce (its label), else the Job's deadline.
    managed = queue or default_local_queue(api, ns)
    if managed and priority_class:
        check_priority_class(api, priority_class)
    kueue_labels = queue_labels(queue, priority_class, max_seconds if managed else None)
    extra_labels = validate_labels(kueue_labels or None)
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
    owner = owner_reference(api, ns) if trainer_command is None else None
    if owner is not None:  # a notebook in a pod: the job goes with it (notebook_pod.py)
        body["metadata"]["ownerReferences"] = [owner]
    served = served_trainer_api(api) if shaping.touches_pods else None
    if env_refs:
        trainer = body["spec"]["trainer"]
        given = {e["name"] for e in trainer.get("env") or []}
        trainer["env"] = [*trainer.get("env", []), *(e for e in env_refs if e["name"] not in given)]
    try:
        created, served = _create(
            api, ns, job_name, body, shaping, served, info.obj if info else None, dry_run
        )
    except InvalidInputError as exc:
        if exc.status == 409 and not dry_run:
            raise InvalidInputError(
                f"TrainJob {job_name} already exists in namespace {ns}: attach to it with "
                f"attach({job_name!r}), pick another name, or delete it with "
                f"{delete_hint(job_name, ns)}",
                status=409,
                reason="AlreadyExists",
            ) from None
        raise
    created = created or {}
    if dry_run:
        return clean_manifest(created)
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
    session = _session_when_ready(
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
        stuck_hint=stuck_hint(shaping, served, api, queue),
        placement_hint=placement_hint(shaping, served, api, queue),
        shaping=shaping,
    )
    if stop_after is not None:
        session.set_idle_stop(stop_after)
    return session


_FALLBACK_FIELDS = (RUNTIME_PATCHES, TEMPLATE_OVERRIDES, SPEC_OVERRIDES)
_RELEASE_OF = {RUNTIME_PATCHES: "2.2+", TEMPLATE_OVERRIDES: "2.1", SPEC_OVERRIDES: "2.0"}


def _create(
    api: ApiClient,
    namespace: str,
    name: str,
    body: dict[str, Any],
    shaping: PodShaping,
    served: TrainerAPI | None,
    runtime_obj: Mapping[str, Any] | None,
    dry_run: bool,
) -> tuple[Any, TrainerAPI | None]:
    """Create (or dry-run) the TrainJob with the shaping in the field the cluster serves.

    With shaping the create is strict (``fieldValidation=Strict``): a field the server does not
    know is an error naming it, not silently dropped. When the server says it does not know
    the field picked (``spec.runtimePatches``), the older releases' fields are tried.
    """
    query = list(DRY_RUN_QUERY) if dry_run else []
    if served is None:
        return create_trainjob(api, namespace, name, body, query=query or None), None
    if ("fieldValidation", "Strict") not in query:
        query.append(("fieldValidation", "Strict"))
    jobs = replicated_jobs(runtime_obj)
    # The server's strict answer is the last word: a field it does not know (an assumed or a
    # wrongly published schema) is retried with the older releases' fields.
    candidates = [served] + [
        TrainerAPI(f, _RELEASE_OF[f], known=False) for f in _FALLBACK_FIELDS if f != served.field
    ]
    for i, api_kind in enumerate(candidates):
        shaped = apply_shaping(_copy(body), shaping, api_kind, jobs)
        try:
            return create_trainjob(api, namespace, name, shaped, query=query), api_kind
        except InvalidInputError as exc:
            unknown = f'unknown field "spec.{api_kind.field}"' in str(exc)
            if unknown and i + 1 < len(candidates):
                continue
            # 422 (schema, CEL), 400 (strict decoding, a webhook's decode error), 403 with
            # "denied the request" (a validating webhook): the content, not the caller
            if exc.status in (400, 422) or (exc.status == 403 and "denied the request" in str(exc)):
                raise InvalidInputError(
                    rejected_line(str(exc), name, shaping), status=exc.status, reason=exc.reason
                ) from None
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _copy(body: dict[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(body)


def rejected_line(message: str, name: str, shaping: PodShaping) -> str:
    """The API server's 422 as one line, naming the --pod-patch file when there is one."""
    detail = message.split(f"{name}: ", 1)[-1]
    detail = detail.rsplit("; fix the input", 1)[0]
    if shaping.pod_patch:
        return (
            f"{shaping.pod_patch_source} was rejected by the API server: {detail}; fix the "
            "patch (only the fields of the Trainer's pod-template patch are allowed)"
        )
    return f"the API server rejected TrainJob {name}: {detail}; fix the options"


def stuck_hint(
    shaping: PodShaping, served: TrainerAPI | None, api: ApiClient, queue: str | None
) -> str:
    """Why an admitted TrainJob may stay suspended: trainer#3888 when the patch carries
    fields Trainer 2.3 makes immutable and Kueue is 0.19 or older (serves v1beta1)."""
    if not queue or served is None or served.field != RUNTIME_PATCHES:
        return ""
    if not shaping.immutable_pod_fields:  # the CEL rules are in the 2.2.1 and 2.3.0 CRDs
        return ""
    kueue = kueue_api(api)
    if kueue.known and not kueue.serves_v1beta1:
        return ""  # Kueue 0.20 or later: merge patches (kueue#14836)
    return (
        "Kueue 0.19 or older updates the whole TrainJob to unsuspend it, which Trainer's "
        "immutability rules (self == oldSelf) reject for runtimePatches with volumes, "
        "containers, a service account or pull secrets (kubeflow/trainer#3888): upgrade Kueue "
        "to 0.20 (kubernetes-sigs/kueue#14836), or connect without those options"
    )


def placement_hint(
    shaping: PodShaping, served: TrainerAPI | None, api: ApiClient, queue: str | None
) -> str:
    """kueue#15161: with Kueue 0.19 or older (and runtimePatches) the ResourceFlavor's
    tolerations replace the session's."""
    if not queue or not shaping.tolerations or served is None:
        return ""
    if served.field != RUNTIME_PATCHES:
        return ""
    kueue = kueue_api(api)
    if kueue.known and not kueue.serves_v1beta1:
        return ""
    return (
        "with Kueue 0.19 or older the ResourceFlavor's tolerations replace the session's "
        "(kubernetes-sigs/kueue#15161): upgrade Kueue to 0.20, or ask for the toleration on "
        "the flavor"
    )


def lost_tolerations(pod: Mapping[str, Any], shaping: PodShaping) -> list[str]:
    """The session's tolerations the running pod does not have (``key=value:Effect``)."""
    have = [
        (t.get("key"), t.get("value") or None, t.get("effect"))
        for t in (pod.get("spec") or {}).get("tolerations") or []
    ]
    return [t.describe() for t in shaping.tolerations if (t.key, t.value, t.effect) not in have]


def check_runtime(
    runtime: str,
    namespace: str | None = None,
    context: str | None = None,
    config_file: str | None = None,
) -> None:
    """Raise InvalidInputError naming ``runtime`` and the runtimes there are when neither a
    TrainingRuntime in the namespace nor a ClusterTrainingRuntime has that name (what
    :func:`connect` checks before creating anything). A runtime that cannot be read for lack
    of permission passes: the API server checks it on create."""
    validate_object_name(runtime, "runtime name")
    if namespace is not None:
        validate_namespace(namespace)
    api, default_namespace = kubeconfig.load(config_file, context)
    ns = namespace or default_namespace
    if fetch_runtime(api, ns, runtime) is None:
        raise InvalidInputError(unknown_runtime_message(runtime, ns, list_runtime_names(api, ns)))


def attach(
    name: str,
    namespace: str | None = None,
    context: str | None = None,
    config_file: str | None = None,
    timeout: float = 600.0,
    on_status: OnStatus | None = None,
    api_retry_seconds: float = DEFAULT_RETRY_SECONDS,
    idle_stop: float | str | None = None,
) -> TrainJobSession:
    """Return a session on an existing TrainJob, waiting until its trainer pod is Running;
    ``idle_stop`` as for :func:`connect`."""
    started = time.monotonic()
    validate_name(name)
    stop_after = validate_idle_stop(idle_stop)
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
    session = _session_when_ready(
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
    with contextlib.suppress(TrainJobError):
        session.detached(lines=0)  # a run another kernel detached: close() then asks for force
    notes = (trainjob.get("metadata") or {}).get("annotations") or {}
    if notes.get(CLOSED_BY_ANNOTATION):  # a close that never went ahead (before it was fixed)
        with contextlib.suppress(TrainJobError):
            note_session(session, closed_by="")
    if stop_after is not None:
        session.set_idle_stop(stop_after)
    return session


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
    stuck_hint: str = "",
    placement_hint: str = "",
    shaping: PodShaping | None = None,
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
            stuck_hint=stuck_hint,
            placement_hint=placement_hint,
            shaping=shaping,
        )
        if shaping is not None and queue:
            lost = lost_tolerations(pod, shaping)
            if lost:  # kueue#15161: the flavor's tolerations replaced the session's
                raise PodStartError(
                    f"the trainer pod of TrainJob {name} runs without the toleration(s) "
                    f"{', '.join(lost)}: "
                    + (
                        placement_hint
                        or "Kueue replaced them with the ResourceFlavor's (kubernetes-sigs/"
                        "kueue#15161, Kueue 0.19 or older): upgrade Kueue to 0.20"
                    )
                    + "; the TrainJob was deleted"
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
