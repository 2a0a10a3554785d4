"""Trainer-pod resolution and pod rows for status tables.

The trainer is the replicated job whose Job template carries
``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` (reference.md section 2). We learn it from
the runtime (or the JobSet) and select its pods by JobSet labels, so it works whether or not the
label also reaches the pods. MPI runtimes with a launcher never resolve to a node pod.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..kube.names import COMPLETION_INDEX, JOB_INDEX_LABEL, RJOB_LABEL
from ..kube.objects import (
    Pod,
    condition_of,
    created_at,
    is_ready,
    is_running,
    is_terminating,
    label_index,
    labels_of,
    pod_name,
    pod_phase,
)
from ..result import JobStatus, PodInfo, PodShape
from .trainer_pod import LAUNCHER, TrainerTarget, select_trainer_pod


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


def _sort_key(pod: Pod) -> tuple[Any, ...]:
    labels = labels_of(pod)
    rjob = labels.get(RJOB_LABEL) or ""
    job_index = label_index(pod, JOB_INDEX_LABEL) or "0"
    completion = label_index(pod, COMPLETION_INDEX) or "0"
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
                role=labels_of(pod).get(RJOB_LABEL) or "pod",
                phase=pod_phase(pod),
                ready=is_ready(pod),
                node=str((pod.get("spec") or {}).get("nodeName") or ""),
                restarts=sum(
                    int(cs.get("restartCount") or 0) for cs in status.get("containerStatuses") or []
                ),
                created=created_at(pod),
                waiting_reason=_waiting_reason(pod),
                is_trainer=trainer_pod is not None and pod_name(pod) == trainer_pod,
            )
        )
    return rows


def trainjob_failure(trainjob: Mapping[str, Any] | None) -> str | None:
    """The message of a True ``Failed`` condition, or None."""
    if not trainjob:
        return None
    cond = condition_of(trainjob, "Failed")
    if cond is None:
        return None
    return str(cond.get("message") or cond.get("reason") or "TrainJob failed")


# Tolerations every pod gets from the DefaultTolerationSeconds admission plugin: not news.
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _describe_volume(volume: Mapping[str, Any], mount: Mapping[str, Any]) -> str:
    path = str(mount.get("mountPath") or "?")
    ro = " (ro)" if mount.get("readOnly") else ""
    if "persistentVolumeClaim" in volume:
        return f"pvc {volume['persistentVolumeClaim'].get('claimName')} -> {path}{ro}"
    if "configMap" in volume:
        return f"configmap {volume['configMap'].get('name')} -> {path}"
    if "secret" in volume:
        return f"secret {volume['secret'].get('secretName')} -> {path}"
    if "emptyDir" in volume:
        empty = volume.get("emptyDir") or {}
        size = f" {empty['sizeLimit']}" if empty.get("sizeLimit") else ""
        if empty.get("medium") == "Memory" and path == "/dev/shm":
            return f"shm{size} -> {path}"
        return f"emptydir{size} -> {path}"
    kind = next((k for k in volume if k != "name"), "volume")
    return f"{kind} {volume.get('name')} -> {path}{ro}"


def pod_shape(pod: Pod | None, container: str | None = None) -> PodShape | None:
    """The trainer pod's volumes (those mounted in ``container``, default its first with
    mounts), service account, node, node selector, tolerations and pull secrets."""
    if pod is None:
        return None
    spec = pod.get("spec") or {}
    volumes = {str(v.get("name")): v for v in spec.get("volumes") or []}
    containers = list(spec.get("containers") or [])
    chosen = next((c for c in containers if c.get("name") == container), None) or next(
        (c for c in containers if c.get("name") == "node"), containers[0] if containers else {}
    )
    described = []
    for mount in chosen.get("volumeMounts") or []:
        volume = volumes.get(str(mount.get("name")))
        if volume is None or "projected" in volume:  # the service account token
            continue
        described.append(_describe_volume(volume, mount))
    tolerations = []
    for tol in spec.get("tolerations") or []:
        if tol.get("key") in _DEFAULT_TOLERATIONS:
            continue
        value = f"={tol['value']}" if tol.get("value") else ""
        effect = f":{tol['effect']}" if tol.get("effect") else ""
        tolerations.append(f"{tol.get('key') or '*'}{value}{effect}")
    return PodShape(
        volumes=tuple(described),
        service_account=str(spec.get("serviceAccountName") or spec.get("serviceAccount") or ""),
        node=str(spec.get("nodeName") or ""),
        node_selector=tuple(f"{k}={v}" for k, v in (spec.get("nodeSelector") or {}).items()),
        tolerations=tuple(tolerations),
        image_pull_secrets=tuple(
            str(s.get("name")) for s in spec.get("imagePullSecrets") or [] if s.get("name")
        ),
    )


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
        shape=pod_shape(trainer),
        uid=str(((trainjob or {}).get("metadata") or {}).get("uid") or ""),
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
        cond = condition_of(trainjob, kind)
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


def after_pod_gone(name: str, trainjob: Mapping[str, Any] | None) -> str:
    """What the next command will do after a command's trainer pod went away."""
    if trainjob is None:
        return f"TrainJob {name} no longer exists: start a new session with connect(...)"
    for kind in ("Failed", "Complete"):
        cond = condition_of(trainjob, kind)
        if cond is not None:
            why = str(cond.get("message") or cond.get("reason") or kind)
            return f"TrainJob {name} has ended ({kind}: {why}): close the session and connect again"
    return (
        f"the next command waits for the trainer pod TrainJob {name} recreates, or says that "
        "the job ended"
    )
