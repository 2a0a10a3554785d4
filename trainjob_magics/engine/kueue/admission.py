"""Kueue for sessions: queue labels, the LocalQueue check before creating a job, waiting for
admission (with status reports), preemption detection, and the Kueue errors.

Queue state parsing is in ``kueue_status.py``, cluster look-ups in ``kueue_api.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import ApiClient

from ..errors import (
    NotFoundError,
    PermissionDeniedError,
    PodNotRunningError,
    QueuedTimeoutError,
    QueueUnavailableError,
    TrainJobError,
)
from ..kube.events import events_about
from ..kube.requests import request
from ..notify import notify
from ..result import QueueStatus
from .api import (
    DEFAULT_LOCAL_QUEUE,
    KUEUE_GROUP,
    MULTIKUEUE_CONTROLLER,
    Visibility,
    cluster_path,
    fetch_local_queue,
    multikueue_check,
    queue_status,
)
from .discovery import kueue_api
from .labels import queue_of
from .status import queued_fingerprint

log = logging.getLogger(__name__)

REFUSALS = ("WorkloadPriorityClassNotFound",)  # job events that mean "no Workload, ever"


def check_local_queue(api: ApiClient, namespace: str, name: str) -> None:
    """Fail fast before creating anything when Kueue is missing or the LocalQueue is missing or
    stopped. Raises QueueUnavailableError with Kueue's wording; a 403 (cannot read LocalQueues)
    passes."""
    if not kueue_api(api).installed:
        raise QueueUnavailableError(
            f"Kueue is not installed on this cluster (no {KUEUE_GROUP} API), so queue "
            f"{name!r} cannot be used: connect without queue=..."
        )
    try:
        lq = fetch_local_queue(api, namespace, name)
    except PermissionDeniedError:
        return
    except NotFoundError:
        raise QueueUnavailableError(
            f"LocalQueue {name} doesn't exist in namespace {namespace}; list the queues with "
            f"`kubectl get localqueues -n {namespace}` and pass one of them as the queue"
        ) from None
    if ((lq.get("spec") or {}).get("stopPolicy") or "None") != "None":
        raise QueueUnavailableError(
            f"LocalQueue {name} is stopped (stopPolicy {lq['spec']['stopPolicy']}) in namespace "
            f"{namespace}; ask your cluster admin to resume it, or use another queue"
        )


def check_priority_class(api: ApiClient, name: str) -> None:
    """Fail fast before creating anything when the WorkloadPriorityClass does not exist: Kueue
    then creates no Workload, and Kueue 0.14-0.19 record no Event saying why (only their
    controller log does), so the job would wait in silence. A 403 (cannot read the
    cluster-scoped classes) or any other failure passes; the Events are read while waiting."""
    try:
        request(
            api,
            "GET",
            cluster_path(api, "workloadpriorityclasses", name),
            verb="get",
            resource=f"workloadpriorityclasses.{KUEUE_GROUP}",
            name=name,
            timeout=30.0,
        )
    except NotFoundError:
        if not _serves_priority_classes(api):
            return  # the kind itself is not served (a 404 for the whole resource)
        raise QueueUnavailableError(
            f'WorkloadPriorityClass "{name}" not found, so Kueue would never admit the job; list '
            "them with `kubectl get workloadpriorityclasses` and pass one of them (or none) as "
            "the priority class",
            reason="WorkloadPriorityClassNotFound",
        ) from None
    except TrainJobError:
        return


def _serves_priority_classes(api: ApiClient) -> bool:
    """True when WorkloadPriorityClasses can be listed (so one's 404 means it does not exist)."""
    try:
        listed = request(
            api,
            "GET",
            cluster_path(api, "workloadpriorityclasses", "").rstrip("/"),
            verb="list",
            resource=f"workloadpriorityclasses.{KUEUE_GROUP}",
            timeout=30.0,
        )
    except TrainJobError:
        return False
    return bool((listed or {}).get("items"))


def default_local_queue(api: ApiClient, namespace: str) -> str | None:
    """``default`` when Kueue will queue a job created without a queue label in ``namespace``
    (LocalQueueDefaulting, on by default since Kueue 0.12: a LocalQueue named ``default``
    exists; pkg/controller/jobs/trainjob/trainjob_webhook.go), else None."""
    if not kueue_api(api).installed:
        return None
    try:
        fetch_local_queue(api, namespace, DEFAULT_LOCAL_QUEUE)
    except TrainJobError:  # missing, or not readable: the created object tells later
        return None
    return DEFAULT_LOCAL_QUEUE


def multikueue_refusal(
    api: ApiClient, namespace: str, name: str, trainjob: Mapping[str, Any]
) -> str | None:
    """The one line refusing a TrainJob Kueue hands to MultiKueue (``spec.managedBy``), or
    None. Its pods would run on a worker cluster, where exec cannot reach them from here."""
    if (trainjob.get("spec") or {}).get("managedBy") != MULTIKUEUE_CONTROLLER:
        return None
    queue = queue_of(trainjob) or "?"
    cluster_queue, check = multikueue_check(api, namespace, queue)
    where = f"ClusterQueue {cluster_queue}" if cluster_queue else f"the ClusterQueue of {queue}"
    via = f" admission check {check}" if check else " admission check"
    return (
        f"TrainJob {name} would run on a MultiKueue worker cluster ({where} has the MultiKueue"
        f"{via}; LocalQueue {queue}): its pods never start on this cluster and exec cannot "
        "reach them from here, so it was deleted; use a LocalQueue whose ClusterQueue runs "
        "jobs on this cluster"
    )


def unavailable_message(qs: QueueStatus, name: str, namespace: str, deleted: bool) -> str:
    """The fail-fast message for a job whose queue will never admit it."""
    tail = (
        "the TrainJob was deleted"
        if deleted
        else f"delete it with `kubectl delete trainjob {name} -n {namespace}`"
    )
    return (
        f"Kueue will not admit TrainJob {name}: {qs.message} ({qs.reason}); {tail}; fix the "
        "queue (or pick another one) and connect again"
    )


STUCK_GRACE = 15.0  # seconds an admitted Workload's TrainJob may stay suspended (Kueue: ~1 s)
STUCK = "AdmittedButSuspended"


def stuck_message(name: str, grace: float, hint: str, deleted: bool) -> str:
    """One line for an admitted Workload whose TrainJob Kueue could not unsuspend."""
    why = hint or (
        "Kueue could not unsuspend it (see the kueue-controller-manager log; with Trainer 2.3 "
        "and Kueue 0.19 or older a full-object update can fail, kubeflow/trainer#3888: upgrade "
        "Kueue to 0.20, kubernetes-sigs/kueue#14836)"
    )
    tail = "the TrainJob was deleted" if deleted else "delete the TrainJob"
    return (
        f"Kueue admitted TrainJob {name} but it is still suspended after {grace:g}s: {why}; {tail}"
    )


def queued_timeout_message(qs: QueueStatus, name: str, namespace: str, timeout: float) -> str:
    """TimeoutError text while still queued: says so, names the queue, how to keep or delete."""
    return (
        f"TrainJob {name} is still queued in LocalQueue {qs.local_queue} after {timeout:g}s "
        f"({qs.position_text()}; Kueue: {qs.message or qs.reason or 'no message yet'}); "
        f"it keeps its place in the queue: keep waiting with attach({name!r}, "
        f"namespace={namespace!r}), or delete it with `kubectl delete trainjob {name} "
        f"-n {namespace}` (session.close() / %trainjob_close)"
    )


def workload_refused(
    api: ApiClient, namespace: str, name: str, local_queue: str | None
) -> QueueStatus | None:
    """Why Kueue created no Workload for the TrainJob, when its Events say it will not:
    ``WorkloadPriorityClassNotFound`` ("WorkloadPriorityClass %q not found", recorded by the
    job reconciler, pkg/controller/jobframework/reconciler.go); None otherwise."""
    for event in reversed(events_about(api, namespace, name, "TrainJob")):
        if event.reason in REFUSALS:
            return QueueStatus(
                "Inactive", reason=event.reason, message=event.message, local_queue=local_queue
            )
    return None


def wait_for_admission(
    api: ApiClient,
    namespace: str,
    name: str,
    job_uid: str,
    local_queue: str | None,
    *,
    deadline: float,
    report: Callable[[QueueStatus], None],
    fetch_trainjob: Callable[[], Mapping[str, Any]],
    poll: float = 1.0,
    stuck_grace: float = STUCK_GRACE,
) -> QueueStatus | None:
    """Poll until the Workload is admitted and the TrainJob unsuspended (None on timeout).

    Raises QueueUnavailableError when the queue is missing/inactive/stopped or the Workload was
    deactivated, and PodNotRunningError when the TrainJob is deleted while it waits (its
    Workload goes with it). ``fetch_trainjob`` raises NotFoundError when the job is gone. A
    Workload admitted for ``stuck_grace`` s whose TrainJob is still suspended raises
    QueueUnavailableError with reason ``AdmittedButSuspended`` (Kueue's unsuspend failed).
    """
    visibility = Visibility(api)
    admitted_at: float | None = None
    deleted = PodNotRunningError(
        f"TrainJob {name} was deleted in namespace {namespace} while it waited in "
        f"LocalQueue {local_queue}; create it again with connect(...)"
    )
    while True:
        qs = queue_status(api, namespace, job_uid, local_queue, visibility)
        if qs.workload is None:
            # No Workload: not made yet, refused, or garbage-collected with a deleted TrainJob.
            try:
                gone = bool((fetch_trainjob().get("metadata") or {}).get("deletionTimestamp"))
            except NotFoundError:
                gone = True
            if gone:
                raise deleted
            refused = workload_refused(api, namespace, name, local_queue)
            if refused is not None:
                report(refused)
                raise QueueUnavailableError(refused.message, reason=refused.reason)
        report(qs)
        if qs.state in ("Inactive", "Deactivated"):
            raise QueueUnavailableError(qs.message or qs.state, reason=qs.reason)
        if qs.state in ("Admitted", "Finished", "Unknown"):
            try:
                trainjob = fetch_trainjob()
            except NotFoundError:
                # real Kueue marks the Workload of a deleted job Finished before it goes
                raise deleted from None
            if qs.state != "Admitted" or not (trainjob.get("spec") or {}).get("suspend"):
                return qs
            admitted_at = time.monotonic() if admitted_at is None else admitted_at
            if time.monotonic() - admitted_at >= stuck_grace:
                raise QueueUnavailableError(f"still suspended after {stuck_grace:g}s", reason=STUCK)
        else:
            admitted_at = None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        time.sleep(min(poll, remaining))


def with_queue(status: Any, qs: QueueStatus | None) -> Any:
    """A JobStatus carrying ``qs`` (its ``queue`` field); waiting states also take the state."""
    import dataclasses

    if qs is None:
        return status
    status = dataclasses.replace(status, queue=qs)
    if qs.waiting and status.state in ("Suspended", "Creating"):
        status = dataclasses.replace(status, state=qs.state, message=qs.summary())
    return status


def queued_job_status(
    name: str, namespace: str, runtime: str, qs: QueueStatus, started: float
) -> Any:
    """The JobStatus reported while the job waits in its queue (no pods yet)."""
    from ..result import JobStatus

    state = qs.state if qs.state != "Pending" else "Queued"
    return JobStatus(
        name=name,
        namespace=namespace,
        runtime=runtime,
        state=state,
        message=qs.summary(),
        pods=[],
        trainer_pod=None,
        elapsed=max(0.0, time.monotonic() - started),
        queue=qs,
    )


class QueueReporter:
    """Passes JobStatus snapshots to ``on_status`` with the latest QueueStatus attached."""

    def __init__(self, on_status: Callable[[Any], None] | None) -> None:
        self.on_status = on_status
        self.queue: QueueStatus | None = None
        self._last: tuple[Any, ...] | None = None

    def report_queue(
        self, name: str, namespace: str, runtime: str, qs: QueueStatus, started: float
    ) -> None:
        self.queue = qs
        key = queued_fingerprint(qs)
        if key == self._last:
            return
        self._last = key
        self._emit(queued_job_status(name, namespace, runtime, qs, started))

    def wrap(self, status: Any) -> None:
        """on_status for the pod wait: the JobStatus with the last QueueStatus attached."""
        self._emit(with_queue(status, self.queue))

    def _emit(self, status: Any) -> None:
        notify(self.on_status, status)


def admit_or_raise(
    api: ApiClient,
    namespace: str,
    name: str,
    job_uid: str,
    queue: str | None,
    *,
    runtime: str,
    timeout: float,
    deadline: float,
    started: float,
    reporter: QueueReporter,
    fetch_trainjob: Callable[[], Mapping[str, Any]],
    delete_job: Callable[[], bool] | None = None,
    stuck_hint: str = "",
    stuck_grace: float = STUCK_GRACE,
) -> QueueStatus:
    """Wait for admission; raise QueueUnavailableError (deleting the job if ``delete_job``)
    or QueuedTimeoutError."""

    def report(qs: QueueStatus) -> None:
        reporter.report_queue(name, namespace, runtime, qs, started)

    try:
        qs = wait_for_admission(
            api,
            namespace,
            name,
            job_uid,
            queue,
            deadline=deadline,
            report=report,
            fetch_trainjob=fetch_trainjob,
            stuck_grace=stuck_grace,
        )
    except QueueUnavailableError as refused:
        last = reporter.queue or QueueStatus("Inactive", local_queue=queue)
        deleted = False
        if delete_job is not None:
            try:
                deleted = delete_job()
            except TrainJobError as exc:
                log.warning("could not delete TrainJob %s: %s", name, exc)
        if refused.reason == STUCK:
            raise QueueUnavailableError(
                stuck_message(name, stuck_grace, stuck_hint, deleted), reason=STUCK
            ) from None
        raise QueueUnavailableError(
            unavailable_message(last, name, namespace, deleted), reason=last.reason
        ) from None
    if qs is None:
        last = reporter.queue or QueueStatus("Queued", local_queue=queue)
        err = QueuedTimeoutError(queued_timeout_message(last, name, namespace, timeout))
        err.job, err.namespace = name, namespace
        raise err
    return qs


def detect_preemption(
    api: ApiClient,
    namespace: str,
    name: str,
    job_uid: str,
    queue: str | None,
    baseline_evictions: int,
    trainjob: Mapping[str, Any] | None = None,
) -> QueueStatus | None:
    """The QueueStatus when the job was preempted/evicted since ``baseline_evictions``, or
    suspended again by Kueue; None when it still runs undisturbed."""
    qs = queue_status(api, namespace, job_uid, queue)
    suspended = bool(((trainjob or {}).get("spec") or {}).get("suspend"))
    if qs.state in ("Preempted", "Evicted", "Deactivated") or qs.evictions > baseline_evictions:
        return qs
    if suspended and qs.state != "Admitted":
        return qs
    return None


def preempted_message(name: str, qs: QueueStatus, pod: str | None = None) -> str:
    """SessionPreemptedError text."""
    reason, why = qs.last_eviction or (qs.reason, qs.message)
    verb = qs.taken_away
    now = {
        "Admitted": "it is readmitted already",
        "Deactivated": "the Workload is deactivated and will not be readmitted",
    }.get(qs.state, f"it is {qs.state.lower()}, waiting for readmission")
    return (
        f"session preempted: Kueue {verb} TrainJob {name} ({reason}: {why}); {now}; "
        f"its trainer pod{f' {pod}' if pod else ''} and anything running in it are gone; "
        "call session.wait_ready() (or %trainjob_connect --attach NAME) to wait for readmission "
        "and a new trainer pod, then run the cell again"
    )
