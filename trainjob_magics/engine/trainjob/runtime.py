"""The (Cluster)TrainingRuntime and JobSet a TrainJob runs from: where its trainer pod is."""

from __future__ import annotations

import difflib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient

from ..errors import NotFoundError, PermissionDeniedError, TrainJobError
from ..kube.names import (
    ANCESTOR_LABEL,
    ANCESTOR_TRAINER,
    CLUSTER_RUNTIME_KIND,
    GROUP,
    RUNTIME_KIND,
    runtime_path,
)
from ..kube.requests import request
from .trainer_pod import LAUNCHER, NODE, TrainerTarget

SNAPSHOT_SUFFIX = "-runtime-snapshot"


@dataclass(frozen=True)
class RuntimeInfo:
    """A resolved runtime: its kind and object (``obj`` is None when it could not be read)."""

    name: str
    kind: str
    obj: Mapping[str, Any] | None


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

    Both are asked at once (the ClusterTrainingRuntime on a helper thread): one round trip
    instead of two when, as usual, only the cluster-scoped one exists. When neither can be
    read for lack of permission, return a RuntimeInfo with ``obj=None``: the server then
    validates the reference on create.
    """
    lookups = ((RUNTIME_KIND, namespace), (CLUSTER_RUNTIME_KIND, None))
    answers: dict[str, Any] = {}

    def lookup(kind: str, ns: str | None) -> None:
        try:
            answers[kind] = request(
                api,
                "GET",
                runtime_path(kind, namespace, name),
                verb="get",
                resource=f"{kind.lower()}s.{GROUP}",
                namespace=ns,
                name=name,
            )
        except (NotFoundError, PermissionDeniedError) as exc:
            answers[kind] = exc
        except TrainJobError as exc:
            answers[kind] = exc

    helper = threading.Thread(target=lookup, args=lookups[1], daemon=True, name="trainjob-runtime")
    helper.start()
    lookup(*lookups[0])
    helper.join()
    denied = 0
    denied_kind = CLUSTER_RUNTIME_KIND
    for kind, _ns in lookups:
        got = answers[kind]
        if isinstance(got, NotFoundError):
            continue
        if isinstance(got, PermissionDeniedError):
            denied += 1
            denied_kind = kind if denied == 1 else CLUSTER_RUNTIME_KIND
            continue
        if isinstance(got, BaseException):
            raise got
        return RuntimeInfo(name, kind, got)
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


def jobset_pod_count(jobset: Mapping[str, Any] | None) -> int:
    """How many pods a JobSet runs: each replicated job's replicas times its Job's parallelism
    (Kubernetes' default 1 for either); 0 without a JobSet."""
    total = 0
    for rjob in ((jobset or {}).get("spec") or {}).get("replicatedJobs") or []:
        if not isinstance(rjob, Mapping):
            continue
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        try:
            total += int(rjob.get("replicas", 1)) * int(job_spec.get("parallelism", 1))
        except (TypeError, ValueError):
            continue
    return total


def fetch_runtime_snapshot(api: ApiClient, namespace: str, name: str) -> Mapping[str, Any] | None:
    """The runtime Trainer v2.3 reconciles TrainJob ``name`` from: the ``runtime`` key of the
    ConfigMap ``<name>-runtime-snapshot`` it owns (kubeflow/trainer
    pkg/runtime/core/snapshot.go); None before v2.3, before the first reconcile, or unreadable."""
    cm_name = f"{name}{SNAPSHOT_SUFFIX}"
    try:
        cm = request(
            api,
            "GET",
            f"/api/v1/namespaces/{namespace}/configmaps/{cm_name}",
            verb="get",
            resource="configmaps",
            namespace=namespace,
            name=cm_name,
        )
    except TrainJobError:
        return None
    text = (cm.get("data") or {}).get("runtime")
    if not text:
        return None
    try:
        found = json.loads(text) if text.lstrip().startswith("{") else _yaml(text)
    except ValueError:
        return None
    return found if isinstance(found, Mapping) else None


def _yaml(text: str) -> Any:
    try:
        import yaml
    except ImportError as exc:  # PyYAML comes with the kubernetes client
        raise ValueError("no YAML parser") from exc
    return yaml.safe_load(text)


def trainer_target(
    api: ApiClient, namespace: str, name: str, runtime: Mapping[str, Any] | None
) -> TrainerTarget:
    """Where a TrainJob's trainer pod is, from what actually runs: its JobSet, else the v2.3
    runtime snapshot, else the live runtime; the fallback rules when none can be read."""
    is_mpi = (
        "mpi" in (((runtime or {}).get("spec") or {}).get("mlPolicy") or {}) if runtime else None
    )
    jobset = fetch_jobset(api, namespace, name)
    if jobset:
        target = target_from_jobset_spec(jobset.get("spec") or {}, is_mpi=is_mpi)
        return TrainerTarget(target.replicated_job, target.mpi_launcher, source="jobset")
    snapshot = fetch_runtime_snapshot(api, namespace, name)
    if snapshot is not None:
        target = target_from_runtime(snapshot)
        return TrainerTarget(target.replicated_job, target.mpi_launcher, source="snapshot")
    if runtime is not None:
        return target_from_runtime(runtime)
    return TrainerTarget(None, source="fallback")
