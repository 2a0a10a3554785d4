"""Waiting until a TrainJob is ready: Kueue admission (queued jobs), then a Running trainer pod;
and the eviction count a session compares against to notice a preemption."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient

from .deletion import delete_trainjob
from .errors import TrainJobError
from .kueue import QueueReporter, admit_or_raise
from .kueue_api import find_workload
from .kueue_status import eviction_count
from .pods import TrainerTarget
from .result import JobStatus
from .waiting import fetch_trainjob, wait_for_trainer_pod

OnStatus = Callable[[JobStatus], None]


def eviction_baseline(api: ApiClient, namespace: str, job_uid: str) -> int:
    """How often the job's Workload was evicted so far (0 when it cannot be read)."""
    try:
        return eviction_count(find_workload(api, namespace, job_uid))
    except TrainJobError:
        return 0


def wait_ready(
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
