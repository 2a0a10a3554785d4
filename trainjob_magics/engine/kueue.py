"""Kueue awareness: a TrainJob's Workload, its queue state and position, queue checks.

The Workload is found by the ``kueue.x-k8s.io/job-uid`` label (its name hashes the UID, so it is
never computed). Conditions are read for both Kueue reason sets: ``Pending``/``Inadmissible``
(Kueue <= 0.19) and the granular ones (``WaitingForQuota``, ``Misconfigured``...). Queue positions
come from the visibility API and degrade to ``None`` on 403/404.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes.client import ApiClient

from .apierrors import request
from .errors import (
    ApiServerError,
    ConnectTimeoutError,
    NotFoundError,
    PermissionDeniedError,
    TrainJobError,
)

log = logging.getLogger(__name__)

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
WORKLOAD_RESOURCE = f"workloads.{KUEUE_GROUP}"
LOCALQUEUE_RESOURCE = f"localqueues.{KUEUE_GROUP}"
VISIBILITY_RESOURCE = f"localqueues/pendingworkloads.{VISIBILITY_GROUP}"

# Messages Kueue writes when the queue itself keeps a workload out (not a matter of quota).
QUEUE_PROBLEM = re.compile(
    r"^(LocalQueue|ClusterQueue) (\S*) (doesn't exist|is inactive|is stopped|"
    r"is terminating or missing)$"
)
WAITING_STATES = ("Queued", "Preempted", "Evicted", "Pending")


class QueueUnavailableError(TrainJobError):
    """The LocalQueue (or its ClusterQueue) is missing, inactive or stopped: nothing will admit."""


class QueuedTimeoutError(ConnectTimeoutError):
    """``connect``/``wait_ready`` timed out while the job was still waiting in its queue."""


class SessionPreemptedError(TrainJobError):
    """Kueue preempted or evicted the session's job; ``partial`` keeps any output so far.

    ``queue`` is the QueueStatus at the time; ``session.wait_ready()`` waits for readmission.
    """

    def __init__(self, message: str, *, partial: Any = None, queue: QueueStatus | None = None):
        super().__init__(message)
        self.partial = partial
        self.queue = queue


@dataclass
class QueueStatus:
    """Where a queued TrainJob stands in Kueue.

    ``state``: "Pending" (no Workload yet), "Queued", "QuotaReserved", "Admitted", "Evicted",
    "Preempted", "Inactive" (queue missing/inactive/stopped), "Deactivated", "Finished",
    "Unknown" (Workloads cannot be read). Positions are 0-based; None means unknown.
    """

    state: str
    reason: str = ""
    message: str = ""
    local_queue: str | None = None
    cluster_queue: str | None = None
    workload: str | None = None
    position_in_local_queue: int | None = None
    position_in_cluster_queue: int | None = None
    since: datetime | None = None
    evictions: int = 0
    position_note: str = ""  # why the position is unknown ("forbidden", "not served", ...)
    last_eviction: tuple[str, str] | None = None  # (reason, message) of the latest eviction
    raw_conditions: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def waiting(self) -> bool:
        """True while the job waits for (re)admission."""
        return self.state in WAITING_STATES

    @property
    def admitted(self) -> bool:
        return self.state == "Admitted"

    def position_text(self) -> str:
        """'position 2 in LocalQueue q (3 in ClusterQueue cq)' (1-based), or 'position unknown'."""
        if self.position_in_local_queue is None:
            note = f" ({self.position_note})" if self.position_note else ""
            return f"position unknown{note}"
        text = f"position {self.position_in_local_queue + 1} in LocalQueue {self.local_queue}"
        if self.position_in_cluster_queue is not None:
            text += f" ({self.position_in_cluster_queue + 1} in ClusterQueue"
            text += f" {self.cluster_queue})" if self.cluster_queue else ")"
        return text

    def summary(self) -> str:
        """One line for status displays."""
        where = f" in {self.local_queue}" if self.local_queue else ""
        if self.state == "Queued":
            head = f"Queued{where}, {self.position_text()}"
        elif self.state in ("Preempted", "Evicted"):
            head = f"{self.state} ({self.reason}), waiting for readmission{where}"
            if self.position_in_local_queue is not None:
                head += f", {self.position_text()}"
        elif self.state == "QuotaReserved":
            head = f"Quota reserved in ClusterQueue {self.cluster_queue}"
            if self.message.startswith("Quota reserved"):
                return f"{head}, waiting for admission checks"
        elif self.state == "Admitted":
            head = f"Admitted by ClusterQueue {self.cluster_queue}"
            return head
        else:
            head = f"{self.state}{where}"
        return f"{head}: {self.message}" if self.message else head


def workload_path(namespace: str) -> str:
    return f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/namespaces/{namespace}/workloads"


def localqueue_path(namespace: str, name: str) -> str:
    return f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/namespaces/{namespace}/localqueues/{name}"


def queue_labels(
    queue: str | None, priority_class: str | None, max_exec_seconds: int | None
) -> dict[str, str]:
    """TrainJob metadata labels for Kueue (only the ones that are set)."""
    labels: dict[str, str] = {}
    if queue:
        labels[QUEUE_NAME_LABEL] = queue
    if priority_class:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    if max_exec_seconds:
        labels[MAX_EXEC_TIME_LABEL] = str(int(max_exec_seconds))
    return labels


def queue_of(trainjob: Mapping[str, Any] | None) -> str | None:
    """The LocalQueue a TrainJob is labelled with, or None."""
    labels = ((trainjob or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(QUEUE_NAME_LABEL) or None


def find_workload(api: ApiClient, namespace: str, job_uid: str) -> dict[str, Any] | None:
    """The Workload whose job-uid label is the TrainJob's UID (newest if several), or None."""
    data = request(
        api,
        "GET",
        workload_path(namespace),
        verb="list",
        resource=WORKLOAD_RESOURCE,
        namespace=namespace,
        query=[("labelSelector", f"{JOB_UID_LABEL}={job_uid}")],
    )
    items = list(data.get("items") or [])
    if not items:
        return None
    return max(items, key=lambda w: str((w.get("metadata") or {}).get("creationTimestamp") or ""))


def _cond(wl: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def _true(wl: Mapping[str, Any], type_: str) -> bool:
    c = _cond(wl, type_)
    return c is not None and c.get("status") == "True"


def _time(cond: Mapping[str, Any] | None) -> datetime | None:
    stamp = (cond or {}).get("lastTransitionTime")
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None


def eviction_count(wl: Mapping[str, Any] | None) -> int:
    """How often the Workload was evicted (schedulingStats, else requeueState, else conditions)."""
    if not wl:
        return 0
    status = wl.get("status") or {}
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    if stats:
        return sum(int(s.get("count") or 0) for s in stats)
    count = int((status.get("requeueState") or {}).get("count") or 0)
    if count:
        return count
    return 1 if _cond(wl, "Evicted") is not None else 0


def _last_eviction(wl: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the latest eviction, also after readmission ("Previously: ...")."""
    cond = _cond(wl, "Evicted")
    if cond is None:
        return None
    message = str(cond.get("message") or "").removeprefix("Previously: ")
    reason = str(cond.get("reason") or "")
    if cond.get("status") != "True":
        preempted = _cond(wl, "Preempted")
        stats = ((wl.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
        if preempted is not None:
            reason = "Preempted"
        elif stats:
            reason = str(stats[-1].get("reason") or reason)
    return reason, message


def parse_workload(wl: Mapping[str, Any] | None, local_queue: str | None = None) -> QueueStatus:
    """QueueStatus from a Workload's spec and conditions (positions left unknown)."""
    if wl is None:
        return QueueStatus(
            "Pending",
            message="waiting for Kueue to create the Workload",
            local_queue=local_queue,
        )
    spec = wl.get("spec") or {}
    status = wl.get("status") or {}
    lq = spec.get("queueName") or local_queue
    base: dict[str, Any] = {
        "local_queue": lq,
        "cluster_queue": (status.get("admission") or {}).get("clusterQueue"),
        "workload": (wl.get("metadata") or {}).get("name"),
        "evictions": eviction_count(wl),
        "last_eviction": _last_eviction(wl),
        "raw_conditions": list(status.get("conditions") or []),
    }

    def make(state: str, cond: Mapping[str, Any] | None, message: str | None = None) -> QueueStatus:
        return QueueStatus(
            state,
            reason=str((cond or {}).get("reason") or ""),
            message=str(message if message is not None else (cond or {}).get("message") or ""),
            since=_time(cond),
            **base,
        )

    if _true(wl, "Finished"):
        return make("Finished", _cond(wl, "Finished"))
    evicted = _cond(wl, "Evicted") if _true(wl, "Evicted") else None
    if spec.get("active") is False:
        return make("Deactivated", evicted or _cond(wl, "QuotaReserved"))
    if evicted is not None:
        state = (
            "Preempted"
            if _true(wl, "Preempted") or evicted.get("reason") == "Preempted"
            else ("Evicted")
        )
        return make(state, evicted)
    if _true(wl, "Admitted"):
        return make("Admitted", _cond(wl, "Admitted"))
    reserved = _cond(wl, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "True":
        return make("QuotaReserved", reserved)
    message = str((reserved or {}).get("message") or "")
    if QUEUE_PROBLEM.match(message):
        return make("Inactive", reserved)
    if reserved is None:
        return make("Queued", None, "waiting for Kueue to evaluate the Workload")
    return make("Queued", reserved)


class Visibility:
    """Queue positions from the visibility API; turns itself off after a 403 or 404."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.note = ""  # set once positions became unavailable
        self._versions = list(VISIBILITY_VERSIONS)
        self._cluster_queues: dict[tuple[str, str], str | None] = {}

    def cluster_queue(self, namespace: str, local_queue: str) -> str | None:
        """The ClusterQueue behind a LocalQueue (read once; None when it cannot be read)."""
        key = (namespace, local_queue)
        if key not in self._cluster_queues:
            try:
                lq = request(
                    self.api,
                    "GET",
                    localqueue_path(namespace, local_queue),
                    verb="get",
                    resource=LOCALQUEUE_RESOURCE,
                    namespace=namespace,
                    name=local_queue,
                    timeout=10.0,
                )
                self._cluster_queues[key] = (lq.get("spec") or {}).get("clusterQueue") or None
            except TrainJobError:
                self._cluster_queues[key] = None
        return self._cluster_queues[key]

    def positions(
        self, namespace: str, local_queue: str, workload: str
    ) -> tuple[int | None, int | None]:
        """(position in LocalQueue, in ClusterQueue), 0-based; (None, None) when unknown."""
        while self._versions and not self.note:
            version = self._versions[0]
            path = (
                f"/apis/{VISIBILITY_GROUP}/{version}/namespaces/{namespace}/localqueues/"
                f"{local_queue}/pendingworkloads"
            )
            try:
                data = request(
                    self.api,
                    "GET",
                    path,
                    verb="get",
                    resource=VISIBILITY_RESOURCE,
                    namespace=namespace,
                    name=local_queue,
                    timeout=10.0,
                )
            except PermissionDeniedError:
                self.note = "no permission for the Kueue visibility API"
                return None, None
            except NotFoundError:
                self._versions.pop(0)
                if not self._versions:
                    self.note = "Kueue visibility API not available"
                continue
            except ApiServerError as exc:
                log.debug("visibility API failed: %s", exc)
                return None, None
            for item in data.get("items") or []:
                if (item.get("metadata") or {}).get("name") == workload:
                    return item.get("positionInLocalQueue"), item.get("positionInClusterQueue")
            return None, None
        return None, None


def queue_status(
    api: ApiClient,
    namespace: str,
    job_uid: str,
    local_queue: str | None,
    visibility: Visibility | None = None,
) -> QueueStatus:
    """The current QueueStatus of a TrainJob (positions filled while it waits)."""
    try:
        wl = find_workload(api, namespace, job_uid)
    except PermissionDeniedError as exc:
        return QueueStatus("Unknown", message=str(exc), local_queue=local_queue)
    qs = parse_workload(wl, local_queue)
    if visibility is not None and qs.waiting and qs.workload and qs.local_queue:
        lq_pos, cq_pos = visibility.positions(namespace, qs.local_queue, qs.workload)
        qs.position_in_local_queue, qs.position_in_cluster_queue = lq_pos, cq_pos
        if qs.cluster_queue is None:
            qs.cluster_queue = visibility.cluster_queue(namespace, qs.local_queue)
        qs.position_note = visibility.note
        if lq_pos is None and not qs.position_note:
            qs.position_note = "not listed as pending"
    return qs


def check_local_queue(api: ApiClient, namespace: str, name: str) -> None:
    """Fail fast before creating anything when the LocalQueue is missing or stopped.

    Raises QueueUnavailableError with Kueue's wording; a 403 (cannot read LocalQueues) passes.
    """
    try:
        lq = request(
            api,
            "GET",
            localqueue_path(namespace, name),
            verb="get",
            resource=LOCALQUEUE_RESOURCE,
            namespace=namespace,
            name=name,
        )
    except PermissionDeniedError:
        return
    except NotFoundError:
        try:
            request(api, "GET", f"/apis/{KUEUE_GROUP}", verb="get", resource="API group")
        except NotFoundError:
            raise QueueUnavailableError(
                f"Kueue is not installed on this cluster (no {KUEUE_GROUP} API), so queue "
                f"{name!r} cannot be used: connect without queue=..."
            ) from None
        raise QueueUnavailableError(
            f"LocalQueue {name} doesn't exist in namespace {namespace}; list the queues with "
            f"`kubectl get localqueues -n {namespace}` and pass one of them as the queue"
        ) from None
    if ((lq.get("spec") or {}).get("stopPolicy") or "None") != "None":
        raise QueueUnavailableError(
            f"LocalQueue {name} is stopped (stopPolicy {lq['spec']['stopPolicy']}) in namespace "
            f"{namespace}; ask your cluster admin to resume it, or use another queue"
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


def queued_timeout_message(qs: QueueStatus, name: str, namespace: str, timeout: float) -> str:
    """TimeoutError text while still queued: says so, names the queue, how to keep or delete."""
    return (
        f"TrainJob {name} is still queued in LocalQueue {qs.local_queue} after {timeout:g}s "
        f"({qs.position_text()}; Kueue: {qs.message or qs.reason or 'no message yet'}); "
        f"it keeps its place in the queue: keep waiting with attach({name!r}, "
        f"namespace={namespace!r}), or delete it with `kubectl delete trainjob {name} "
        f"-n {namespace}` (session.close() / %trainjob_close)"
    )


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
) -> QueueStatus | None:
    """Poll until the Workload is admitted and the TrainJob unsuspended (None on timeout).

    Raises QueueUnavailableError when the queue is missing/inactive/stopped or the Workload was
    deactivated. ``fetch_trainjob`` raises NotFoundError when the job is gone.
    """
    visibility = Visibility(api)
    while True:
        qs = queue_status(api, namespace, job_uid, local_queue, visibility)
        report(qs)
        if qs.state in ("Inactive", "Deactivated"):
            raise QueueUnavailableError(qs.message or qs.state, reason=qs.reason)
        if qs.state in ("Admitted", "Finished", "Unknown"):
            trainjob = fetch_trainjob()
            if qs.state != "Admitted" or not (trainjob.get("spec") or {}).get("suspend"):
                return qs
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        time.sleep(min(poll, remaining))


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str | int | float | None) -> int | None:
    """Seconds from 3600, "90s", "30m", "8h", "1h30m", "2d"; None stays None.

    Raises ValueError on anything else or a non-positive duration.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            parts = _DURATION.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(
                    f"invalid duration {value!r}: use seconds or e.g. '90s', '30m', '8h', '1h30m'"
                )
            seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    if seconds < 1:
        raise ValueError(f"duration must be at least 1 second, got {value!r}")
    return round(seconds)


def queued_fingerprint(qs: QueueStatus | None) -> tuple[Any, ...]:
    """What makes two QueueStatus reports differ for a display."""
    if qs is None:
        return ()
    return (
        qs.state,
        qs.reason,
        qs.message,
        qs.position_in_local_queue,
        qs.position_in_cluster_queue,
        qs.cluster_queue,
        qs.position_note,
    )


# -- session integration (used by session.py) -----------------------------------------------


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
    from .result import JobStatus

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
        if self.on_status is None:
            return
        try:
            self.on_status(status)
        except Exception:
            log.warning("on_status callback failed", exc_info=True)


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
        )
    except QueueUnavailableError:
        last = reporter.queue or QueueStatus("Inactive", local_queue=queue)
        deleted = False
        if delete_job is not None:
            try:
                deleted = delete_job()
            except TrainJobError as exc:
                log.warning("could not delete TrainJob %s: %s", name, exc)
        raise QueueUnavailableError(
            unavailable_message(last, name, namespace, deleted), reason=last.reason
        ) from None
    if qs is None:
        last = reporter.queue or QueueStatus("Queued", local_queue=queue)
        raise QueuedTimeoutError(queued_timeout_message(last, name, namespace, timeout))
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


def preempted_message(name: str, qs: QueueStatus) -> str:
    """SessionPreemptedError text."""
    reason, why = qs.last_eviction or (qs.reason, qs.message)
    verb = "preempted" if reason == "Preempted" else "evicted"
    now = {
        "Admitted": "it is readmitted already",
        "Deactivated": "the Workload is deactivated and will not be readmitted",
    }.get(qs.state, f"it is {qs.state.lower()}, waiting for readmission")
    return (
        f"session preempted: Kueue {verb} TrainJob {name} ({reason}: {why}); {now}; "
        "its trainer pod and anything running in it are gone; "
        "call session.wait_ready() (or %trainjob_connect --attach NAME) to wait for readmission "
        "and a new trainer pod, then run the cell again"
    )
