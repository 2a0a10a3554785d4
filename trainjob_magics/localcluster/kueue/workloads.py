"""Build the Workload Kueue creates for a TrainJob, and sum its resource requests."""

from __future__ import annotations

import copy
import hashlib
from fractions import Fraction
from typing import Any

from ..controller.podspec import build_jobset_spec
from ..core.quantity import format_quantity, parse_quantity
from ..core.resources import TRAINJOBS
from .kinds import (
    JOB_UID_LABEL,
    MAX_EXEC_TIME_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
)

WORKLOAD_PREFIX = "trainjob"
HASH_LENGTH = 5
MAX_PREFIX = 252 - HASH_LENGTH  # a CRD name has at most 253 characters
_POD_SPEC_KEYS = (
    "containers",
    "initContainers",
    "nodeSelector",
    "tolerations",
    "affinity",
    # no restartPolicy: Kueue builds the JobSet in memory (trainjob_controller.go
    # getChildJobSet), without the JobSet webhook that defaults it (measured on v0.19.2)
    "serviceAccountName",
    "volumes",
    "subdomain",
    "priorityClassName",
)


def workload_name(trainjob: dict[str, Any]) -> str:
    """``trainjob-<name>-<5 hex>`` as Kueue names it (pkg/controller/jobframework/
    workload_names.go: sha1 of "Kind\\nGroup\\nname\\nuid", prefix cut at 247 characters)."""
    meta = trainjob["metadata"]
    digest = hashlib.sha1(
        "\n".join(("TrainJob", TRAINJOBS.group, meta["name"], meta["uid"])).encode()
    ).hexdigest()[:HASH_LENGTH]
    prefix = f"{WORKLOAD_PREFIX}-{meta['name']}"[:MAX_PREFIX]
    return f"{prefix}-{digest}"


def _pod_requests(pod_spec: dict[str, Any]) -> dict[str, Fraction]:
    """Effective per-pod requests: containers summed (limits stand in for missing requests)."""
    total: dict[str, Fraction] = {}
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, value in merged.items():
            try:
                total[name] = total.get(name, Fraction(0)) + parse_quantity(value)
            except ValueError:
                continue
    return total


def _pod_set(rjob: dict[str, Any]) -> dict[str, Any]:
    job_spec = rjob["template"]["spec"]
    pod_tpl = job_spec.get("template") or {}
    spec = {
        k: copy.deepcopy(v) for k, v in (pod_tpl.get("spec") or {}).items() if k in _POD_SPEC_KEYS
    }
    for c in spec.get("containers") or []:
        # as Kueue's TrainJob integration (v0.19.2) records them: without the env and the
        # ports the torch plugin adds (neither matters for quota)
        c.pop("env", None)
        c.pop("ports", None)
    count = int(rjob.get("replicas", 1)) * int(job_spec.get("parallelism") or 1)
    labels = dict((pod_tpl.get("metadata") or {}).get("labels") or {})
    template: dict[str, Any] = {"metadata": {"labels": labels} if labels else {}, "spec": spec}
    # TopologyAwareScheduling (beta and on since 0.14): every JobSet pod set carries its index
    # labels (pkg/controller/jobs/jobset/jobset_controller.go PodSets, NewPodSetTopologyRequest)
    topology = {
        "podIndexLabel": "batch.kubernetes.io/job-completion-index",
        "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index",
        "subGroupCount": int(rjob.get("replicas", 1)),
    }
    return {"name": rjob["name"], "count": count, "template": template, "topologyRequest": topology}


def build_workload(
    trainjob: dict[str, Any],
    runtime: dict[str, Any],
    priority_classes: dict[str, int],
    *,
    v1beta1: bool = False,
    trainer_version: str = "",
) -> dict[str, Any]:
    """The Workload body for a TrainJob: podSets from the runtime with spec.trainer applied."""
    meta = trainjob["metadata"]
    labels = meta.get("labels") or {}
    # the pod sets of the JobSet the Trainer in use builds (2.0/2.1 apply their overrides)
    jobset_spec = (
        build_jobset_spec(runtime, trainjob, trainer_version)
        if trainer_version
        else build_jobset_spec(runtime, trainjob)
    )
    pod_sets = [_pod_set(rj) for rj in jobset_spec.get("replicatedJobs") or []]
    spec: dict[str, Any] = {
        "active": True,
        "queueName": labels.get(QUEUE_NAME_LABEL, ""),
        "podSets": pod_sets,
    }
    pclass = labels.get(PRIORITY_CLASS_LABEL)
    if pclass and pclass in priority_classes and v1beta1:
        # Kueue 0.14 stores v1beta1: the class by name and source (apis/kueue/v1beta1
        # workload_types.go); v1beta2 (0.15+) has priorityClassRef
        spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
        spec["priorityClassName"] = pclass
        spec["priority"] = int(priority_classes[pclass])
    elif pclass and pclass in priority_classes:
        spec["priorityClassRef"] = {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": pclass,
        }
        spec["priority"] = int(priority_classes[pclass])
    else:
        spec["priority"] = 0
    max_exec = labels.get(MAX_EXEC_TIME_LABEL)
    if max_exec and str(max_exec).isdigit() and int(max_exec) > 0:
        spec["maximumExecutionTimeSeconds"] = int(max_exec)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(trainjob),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": TRAINJOBS.api_version,
                    "kind": "TrainJob",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def pod_set_requests(pod_set: dict[str, Any]) -> dict[str, Fraction]:
    """Total requests of a pod set (per-pod requests times count)."""
    per_pod = _pod_requests(((pod_set.get("template") or {}).get("spec")) or {})
    count = int(pod_set.get("count", 1))
    out = {name: value * count for name, value in per_pod.items() if value}
    out["pods"] = Fraction(count)
    return out


def resource_requests(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """status.resourceRequests of a pending workload."""
    rows = []
    for ps in (workload.get("spec") or {}).get("podSets") or []:
        req = pod_set_requests(ps)
        req.pop("pods", None)
        rows.append(
            {
                "name": ps.get("name", "main"),
                "resources": {k: format_quantity(v, k) for k, v in sorted(req.items())},
            }
        )
    return rows
