"""Which pod of a TrainJob is the trainer: the ancestor-step label (Trainer >= 2.1), else the
runtime's replicated job, else the MPI launcher or index-0 node pod."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from ..kube.names import (
    ANCESTOR_LABEL,
    ANCESTOR_TRAINER,
    COMPLETION_INDEX,
    JOB_INDEX_LABEL,
    RJOB_LABEL,
)
from ..kube.objects import (
    Pod,
    created_ts,
    is_terminating,
    label_index,
    labels_of,
    pod_name,
    pod_phase,
)

P = TypeVar("P", bound=Pod)  # a pod object: the trainer pod found is one of those given

LAUNCHER = "launcher"


NODE = "node"


TRAINER_CONTAINER = "node"


@dataclass(frozen=True)
class TrainerTarget:
    """Which replicated job runs the trainer command, and how we learned it."""

    replicated_job: str | None
    mpi_launcher: bool = False
    source: str = "runtime"  # "runtime" | "snapshot" | "jobset" | "fallback"


def _is_candidate(pod: Pod, target: TrainerTarget | None) -> bool:
    labels = labels_of(pod)
    rjob = labels.get(RJOB_LABEL)
    if target is not None and target.mpi_launcher and rjob == NODE:
        return False
    if labels.get(ANCESTOR_LABEL) == ANCESTOR_TRAINER:
        return True
    return (
        target is not None and target.replicated_job is not None and rjob == target.replicated_job
    )


def _first_index(pod: Pod) -> bool:
    return label_index(pod, COMPLETION_INDEX) in (None, "0") and label_index(
        pod, JOB_INDEX_LABEL
    ) in (
        None,
        "0",
    )


def select_trainer_pod(pods: Iterable[P], target: TrainerTarget | None) -> P | None:
    """The trainer pod among a TrainJob's pods (completion index 0), or None if not created yet.

    Without a target (runtime and JobSet unreadable): pods carrying the ancestor label, else the
    ``launcher`` replicated job, else ``node`` index 0.
    """
    pods = list(pods)
    candidates = [p for p in pods if _is_candidate(p, target) and _first_index(p)]
    if not candidates and (target is None or target.source == "fallback"):
        for rjob in (LAUNCHER, NODE):
            candidates = [
                p for p in pods if labels_of(p).get(RJOB_LABEL) == rjob and _first_index(p)
            ]
            if candidates:
                break
    if not candidates:
        return None
    # Prefer a live pod over a terminating one, then the newest (a recreated pod).
    return min(
        candidates,
        key=lambda p: (
            is_terminating(p),
            -created_ts(p),
            pod_name(p),
        ),
    )


def replaced_by_its_job(pod: Pod) -> bool:
    """A pod deleted or evicted through the API that ended Failed: its Job creates another
    (a Job that gives up fails the TrainJob instead)."""
    return pod_phase(pod) == "Failed" and is_terminating(pod)


def termination(pod: Pod) -> str:
    """How a finished pod's trainer container ended: ``exit code 2 (Error)``, or ''."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for cs in sorted(statuses, key=lambda c: c.get("name") != TRAINER_CONTAINER):
        ended = (cs.get("state") or {}).get("terminated")
        if ended:
            why = ": ".join(str(ended[k]) for k in ("reason", "message") if ended.get(k))
            return f"exit code {ended.get('exitCode')}" + (f" ({why})" if why else "")
    return ""
