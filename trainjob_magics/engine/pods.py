"""Trainer-pod resolution and pod rows for status tables.

The trainer is the replicated job whose Job template carries
``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` (reference.md section 2). We learn it from
the runtime (or the JobSet) and select its pods by JobSet labels, so it works whether or not the
label also reaches the pods. MPI runtimes with a launcher never resolve to a node pod.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes.client import ApiClient

from .apierrors import request
from .errors import NotFoundError, PermissionDeniedError
from .result import JobStatus, PodInfo
from .trainjob_body import CLUSTER_RUNTIME_KIND, GROUP, RUNTIME_KIND, VERSION

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
LAUNCHER = "launcher"
NODE = "node"
TRAINER_CONTAINER = "node"

Pod = Mapping[str, Any]


@dataclass(frozen=True)
class TrainerTarget:
    """Which replicated job runs the trainer command, and how we learned it."""

    replicated_job: str | None
    mpi_launcher: bool = False
    source: str = "runtime"  # "runtime" | "jobset" | "fallback"


@dataclass(frozen=True)
class RuntimeInfo:
    """A resolved runtime: its kind and object (``obj`` is None when it could not be read)."""

    name: str
    kind: str
    obj: Mapping[str, Any] | None


def pods_path(namespace: str) -> str:
    """REST path of the pod collection."""
    return f"/api/v1/namespaces/{namespace}/pods"


def jobset_selector(name: str) -> str:
    """Label selector of every pod of a TrainJob."""
    return f"{JOBSET_NAME_LABEL}={name}"


def runtime_path(kind: str, namespace: str, name: str | None = None) -> str:
    """REST path of a (Cluster)TrainingRuntime, or of the collection."""
    if kind == RUNTIME_KIND:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/trainingruntimes"
    else:
        base = f"/apis/{GROUP}/{VERSION}/clustertrainingruntimes"
    return f"{base}/{name}" if name else base


def target_from_jobset_spec(
    spec: Mapping[str, Any], *, is_mpi: bool | None = None
) -> TrainerTarget:
    """Find the trainer replicated job in a JobSet spec (from a runtime template or a JobSet)."""
    rjobs = [rj for rj in spec.get("replicatedJobs") or [] if isinstance(rj, Mapping)]
    names = [str(rj.get("name") or "") for rj in rjobs]
    has_launcher = LAUNCHER in names
    mpi_launcher = has_launcher if is_mpi is None else (is_mpi and has_launcher)
    for rj in rjobs:
        labels = ((rj.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(ANCESTOR_LABEL) == ANCESTOR_TRAINER:
            return TrainerTarget(str(rj.get("name")), mpi_launcher)
    if has_launcher:
        return TrainerTarget(LAUNCHER, mpi_launcher)
    return TrainerTarget(NODE if NODE in names or not names else names[0], mpi_launcher)


def target_from_runtime(runtime: Mapping[str, Any]) -> TrainerTarget:
    """Trainer target of a ClusterTrainingRuntime / TrainingRuntime object."""
    spec = runtime.get("spec") or {}
    is_mpi = "mpi" in (spec.get("mlPolicy") or {})
    jobset_spec = (spec.get("template") or {}).get("spec") or {}
    return target_from_jobset_spec(jobset_spec, is_mpi=is_mpi)


def fetch_runtime(api: ApiClient, namespace: str, name: str) -> RuntimeInfo | None:
    """Namespaced TrainingRuntime (wins) or ClusterTrainingRuntime; None when neither exists.

    When neither can be read for lack of permission, return a RuntimeInfo with ``obj=None``:
    the server then validates the reference on create.
    """
    denied = 0
    denied_kind = CLUSTER_RUNTIME_KIND
    for kind, ns in ((RUNTIME_KIND, namespace), (CLUSTER_RUNTIME_KIND, None)):
        try:
            obj = request(
                api,
                "GET",
                runtime_path(kind, namespace, name),
                verb="get",
                resource=f"{kind.lower()}s.{GROUP}",
                namespace=ns,
                name=name,
            )
            return RuntimeInfo(name, kind, obj)
        except NotFoundError:
            continue
        except PermissionDeniedError:
            denied += 1
            denied_kind = kind if denied == 1 else CLUSTER_RUNTIME_KIND
    if denied:  # not readable (and not found where readable): let the server check it on create
        return RuntimeInfo(name, denied_kind, None)
    return None


def list_runtime_names(api: ApiClient, namespace: str) -> list[str]:
    """Names of the runtimes visible from ``namespace`` (namespaced ones marked)."""
    names: list[str] = []
    for kind in (CLUSTER_RUNTIME_KIND, RUNTIME_KIND):
        try:
            data = request(
                api,
                "GET",
                runtime_path(kind, namespace),
                verb="list",
                resource=f"{kind.lower()}s.{GROUP}",
                namespace=namespace if kind == RUNTIME_KIND else None,
            )
        except (NotFoundError, PermissionDeniedError):
            continue
        for item in data.get("items") or []:
            item_name = (item.get("metadata") or {}).get("name")
            if item_name:
                names.append(
                    item_name
                    if kind == CLUSTER_RUNTIME_KIND
                    else f"{item_name} ({ns_tag(namespace)})"
                )
    return sorted(set(names))


def unknown_runtime_message(runtime: str, namespace: str, available: list[str]) -> str:
    """One line: the runtime is unknown, the closest names (difflib), every available one."""
    bare = {name.split(" (", 1)[0]: name for name in available}
    close = difflib.get_close_matches(runtime, list(bare), n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    listed = ", ".join(available) if available else "none found"
    return (
        f"unknown runtime {runtime!r} in namespace {namespace}{hint}; available: {listed}: "
        "pass one of them"
    )


def ns_tag(namespace: str) -> str:
    """How namespaced runtimes are tagged in lists."""
    return f"TrainingRuntime in {namespace}"


def fetch_jobset(api: ApiClient, namespace: str, name: str) -> Mapping[str, Any] | None:
    """The TrainJob's JobSet, or None when it does not exist (yet) or cannot be read."""
    try:
        return request(
            api,
            "GET",
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}",
            verb="get",
            resource="jobsets.jobset.x-k8s.io",
            namespace=namespace,
            name=name,
        )
    except (NotFoundError, PermissionDeniedError):
        return None


def _labels(pod: Pod) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _index(pod: Pod, key: str) -> str | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(key)
    if value is None:
        value = (meta.get("annotations") or {}).get(key)
    return None if value is None else str(value)


def pod_name(pod: Pod) -> str:
    """``metadata.name`` of a pod."""
    return str((pod.get("metadata") or {}).get("name") or "")


def pod_phase(pod: Pod) -> str:
    """``status.phase`` of a pod (``Unknown`` when absent)."""
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_terminating(pod: Pod) -> bool:
    """True when the pod has a deletionTimestamp."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_running(pod: Pod) -> bool:
    """Running and not being deleted."""
    return pod_phase(pod) == "Running" and not is_terminating(pod)


def _is_candidate(pod: Pod, target: TrainerTarget | None) -> bool:
    labels = _labels(pod)
    rjob = labels.get(RJOB_LABEL)
    if target is not None and target.mpi_launcher and rjob == NODE:
        return False
    if labels.get(ANCESTOR_LABEL) == ANCESTOR_TRAINER:
        return True
    return (
        target is not None and target.replicated_job is not None and rjob == target.replicated_job
    )


def _first_index(pod: Pod) -> bool:
    return _index(pod, COMPLETION_INDEX) in (None, "0") and _index(pod, JOB_INDEX_LABEL) in (
        None,
        "0",
    )


def select_trainer_pod(pods: Iterable[Pod], target: TrainerTarget | None) -> Pod | None:
    """The trainer pod among a TrainJob's pods (completion index 0), or None if not created yet.

    Without a target (runtime and JobSet unreadable): pods carrying the ancestor label, else the
    ``launcher`` replicated job, else ``node`` index 0.
    """
    pods = list(pods)
    candidates = [p for p in pods if _is_candidate(p, target) and _first_index(p)]
    if not candidates and (target is None or target.source == "fallback"):
        for rjob in (LAUNCHER, NODE):
            candidates = [p for p in pods if _labels(p).get(RJOB_LABEL) == rjob and _first_index(p)]
            if candidates:
                break
    if not candidates:
        return None
    # Prefer a live pod over a terminating one, then the newest (a recreated pod).
    return min(
        candidates,
        key=lambda p: (
            is_terminating(p),
            -_created_ts(p),
            pod_name(p),
        ),
    )


def parse_time(value: Any) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, ``Z`` suffix) as a datetime; None when absent or bad."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _created(pod: Pod) -> datetime | None:
    return parse_time((pod.get("metadata") or {}).get("creationTimestamp"))


def _created_ts(pod: Pod) -> float:
    created = _created(pod)
    return created.timestamp() if created else 0.0


def _waiting_reason(pod: Pod) -> str:
    if is_terminating(pod):
        return "Terminating"
    status = pod.get("status") or {}
    statuses = list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    )
    for cs in statuses:
        state = cs.get("state") or {}
        waiting = state.get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated and terminated.get("reason"):
            return str(terminated["reason"])
    if pod_phase(pod) == "Pending":
        return str(status.get("reason") or "")
    return ""


def _ready(pod: Pod) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _sort_key(pod: Pod) -> tuple[Any, ...]:
    labels = _labels(pod)
    rjob = labels.get(RJOB_LABEL) or ""
    job_index = _index(pod, JOB_INDEX_LABEL) or "0"
    completion = _index(pod, COMPLETION_INDEX) or "0"
    return (
        rjob != LAUNCHER,
        rjob,
        int(job_index) if job_index.isdigit() else 0,
        int(completion) if completion.isdigit() else 0,
        pod_name(pod),
    )


def pod_infos(pods: Iterable[Pod], trainer_pod: str | None = None) -> list[PodInfo]:
    """Rows for a status table, launcher first, then by replicated job and index."""
    rows: list[PodInfo] = []
    for pod in sorted(pods, key=_sort_key):
        status = pod.get("status") or {}
        rows.append(
            PodInfo(
                name=pod_name(pod),
                role=_labels(pod).get(RJOB_LABEL) or "pod",
                phase=pod_phase(pod),
                ready=_ready(pod),
                node=str((pod.get("spec") or {}).get("nodeName") or ""),
                restarts=sum(
                    int(cs.get("restartCount") or 0) for cs in status.get("containerStatuses") or []
                ),
                created=_created(pod),
                waiting_reason=_waiting_reason(pod),
                is_trainer=trainer_pod is not None and pod_name(pod) == trainer_pod,
            )
        )
    return rows


def _condition(trainjob: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (trainjob.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def trainjob_failure(trainjob: Mapping[str, Any] | None) -> str | None:
    """The message of a True ``Failed`` condition, or None."""
    if not trainjob:
        return None
    cond = _condition(trainjob, "Failed")
    if cond is None:
        return None
    return str(cond.get("message") or cond.get("reason") or "TrainJob failed")


def job_status(
    name: str,
    namespace: str,
    runtime: str,
    trainjob: Mapping[str, Any] | None,
    pods: Iterable[Pod],
    target: TrainerTarget | None,
    started_at: float,
    *,
    deleted: bool = False,
) -> JobStatus:
    """Summarise a TrainJob and its pods (``started_at`` is a ``time.monotonic()`` value)."""
    pods = list(pods)
    trainer = select_trainer_pod(pods, target)
    trainer_name = pod_name(trainer) if trainer is not None else None
    rows = pod_infos(pods, trainer_name)
    state, message = _state(trainjob, trainer, rows, target, deleted)
    return JobStatus(
        name=name,
        namespace=namespace,
        runtime=runtime,
        state=state,
        message=message,
        pods=rows,
        trainer_pod=trainer_name,
        elapsed=max(0.0, time.monotonic() - started_at),
    )


def _state(
    trainjob: Mapping[str, Any] | None,
    trainer: Pod | None,
    rows: list[PodInfo],
    target: TrainerTarget | None,
    deleted: bool,
) -> tuple[str, str]:
    if deleted or trainjob is None:
        return "Deleted", "the TrainJob was deleted"
    for kind in ("Failed", "Complete", "Suspended"):
        cond = _condition(trainjob, kind)
        if cond is not None:
            text = str(cond.get("message") or cond.get("reason") or kind)
            return kind, text
    if trainer is not None:
        tname = pod_name(trainer)
        if is_running(trainer):
            return "Running", f"trainer pod {tname} is running"
        phase = pod_phase(trainer)
        if phase in ("Succeeded", "Failed"):
            return ("Complete" if phase == "Succeeded" else "Failed"), (
                f"trainer pod {tname} finished ({phase})"
            )
        reason = _waiting_reason(trainer)
        return "Pending", f"trainer pod {tname} is {phase}" + (f" ({reason})" if reason else "")
    if not rows:
        return "Creating", "waiting for the pods to be created"
    running = sum(1 for r in rows if r.phase == "Running")
    if target is not None and target.mpi_launcher:
        return "Pending", f"waiting for the launcher pod ({running}/{len(rows)} node pods running)"
    return "Pending", f"waiting for the trainer pod ({running}/{len(rows)} pods running)"
