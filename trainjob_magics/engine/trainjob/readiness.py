"""Watch-driven waits: the trainer pod turning Running, and a TrainJob's pods going away.

List first (for a resourceVersion), then watch from it with ``timeoutSeconds``; a dropped
stream resumes from the last resourceVersion (waiting for a restarting API server, see
``kube/retry.py``), a 410 Expired ERROR event relists. Every decision is made as soon as an
event arrives: no sleeps, no polling.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient

from ..errors import (
    ConnectTimeoutError,
    NotFoundError,
    PodNotRunningError,
    PodStartError,
    TrainJobError,
    TrainJobFailedError,
)
from ..kube.events import events_about
from ..kube.objects import is_ready, is_running, is_terminating, pod_name, pod_phase
from ..kube.retry import window_of
from ..kueue.admission import QueueReporter, admit_or_raise
from ..kueue.api import find_workload
from ..kueue.status import eviction_count
from ..notify import notify
from ..result import JobStatus
from .capacity import WAIT_FOR_NODE, LocalNode, beyond_node, local_node, never_fits_line
from .lifecycle import delete_hint, delete_trainjob, fetch_trainjob
from .pending import DEFAULT_IMAGE_PULL_RETRIES, PodProblem, job_problem, pod_problem, user_error
from .runtime import fetch_jobset, jobset_pod_count
from .shaping import PodShaping
from .status import job_status, trainjob_failure
from .targets import job_pods_watcher, list_job_pods
from .trainer_pod import TrainerTarget, replaced_by_its_job, select_trainer_pod, termination

log = logging.getLogger(__name__)

EVENTS_EVERY = 2.0  # seconds between two reads of the waiting trainer pod's Events
EVENTS_AFTER = 1.0  # a trainer pod waiting at least this long gets its Events read (why)
SHAPED_CHUNK = 2.0  # seconds between re-checks of a session that names objects (its Events)


def _fingerprint(status: JobStatus) -> tuple[Any, ...]:
    rows = tuple(
        (p.name, p.phase, p.ready, p.waiting_reason, p.restarts, p.node) for p in status.pods
    )
    return (status.state, status.message, status.trainer_pod, rows, status.problem)


class StatusReporter:
    """Calls ``on_status`` whenever the observed status changes; callback errors are logged."""

    def __init__(self, on_status: Callable[[JobStatus], None] | None) -> None:
        self.on_status = on_status
        self.last: JobStatus | None = None
        self._last_key: tuple[Any, ...] | None = None

    def report(self, status: JobStatus) -> None:
        """Remember ``status`` and pass it on if it differs from the previous one."""
        self.last = status
        key = _fingerprint(status)
        if key == self._last_key:
            return
        self._last_key = key
        notify(self.on_status, status)


def wait_for_trainer_pod(
    api: ApiClient,
    namespace: str,
    name: str,
    target: TrainerTarget | None,
    *,
    runtime: str,
    timeout: float,
    started_at: float | None = None,
    on_status: Callable[[JobStatus], None] | None = None,
    image_pull_retries: int = DEFAULT_IMAGE_PULL_RETRIES,
    shaping: PodShaping | None = None,
    placement_hint: str = "",
) -> dict[str, Any]:
    """Block until the trainer pod of TrainJob ``name`` is Running and return it.

    While it waits, the pod and its Events say why (unschedulable, image pull): that goes into
    ``JobStatus.problem`` and the timeout message. Raises PodNotRunningError (pod
    Succeeded/Failed, job deleted), PodStartError (a hopeless image state), TrainJobFailedError
    (Failed condition) or ConnectTimeoutError (the TrainJob is left in place).

    A session with ``shaping`` is re-checked every SHAPED_CHUNK s: what it names (a PVC, a
    Secret, a service account, node selectors) that is missing or matches no node raises
    PodStartError from the Events within seconds (the pods of a Job whose service account is
    missing never exist: the Job's FailedCreate Event says so).
    """
    started = time.monotonic() if started_at is None else started_at
    deadline = time.monotonic() + timeout
    reporter = StatusReporter(on_status)
    watcher = job_pods_watcher(api, namespace, name)
    placement = bool(shaping and (shaping.node_selector or shaping.tolerations))
    if shaping is not None and (shaping.touches_pods or shaping.env_from):
        watcher.chunk_seconds = SHAPED_CHUNK
    trainjob: dict[str, Any] = {}

    def refresh() -> None:
        nonlocal trainjob
        try:
            trainjob = fetch_trainjob(api, namespace, name)
        except NotFoundError:
            reporter.report(
                job_status(name, namespace, runtime, None, [], target, started, deleted=True)
            )
            raise PodNotRunningError(
                f"TrainJob {name} was deleted in namespace {namespace} while waiting for its "
                "trainer pod; create it again with connect(...)"
            ) from None
        failure = trainjob_failure(trainjob)
        if failure is not None:
            reporter.report(
                job_status(
                    name, namespace, runtime, trainjob, watcher.objects.values(), target, started
                )
            )
            ended = finished_trainer(list(watcher.objects.values()))
            raise TrainJobFailedError(
                f"TrainJob {name} failed: {failure}{ended}; delete it with "
                f"{delete_hint(name, namespace)} and connect again"
            )

    def finished_trainer(pods: list[dict[str, Any]]) -> str:
        """``; trainer pod P finished (Failed) with exit code 2 (Error)``, read again if the watch
        has not seen the pod end yet (the TrainJob's failure can arrive first)."""
        trainer = select_trainer_pod(pods, target)
        if trainer is None or pod_phase(trainer) not in ("Succeeded", "Failed"):
            try:
                trainer = select_trainer_pod(list_job_pods(api, namespace, name), target)
            except TrainJobError:
                return ""
        if trainer is None or pod_phase(trainer) not in ("Succeeded", "Failed"):
            return ""
        how = termination(trainer)
        return f"; trainer pod {pod_name(trainer)} finished ({pod_phase(trainer)})" + (
            f" with {how}" if how else ""
        )

    problem: list[PodProblem | None] = [None]
    events_read = [0.0]
    waiting_since = time.monotonic()
    node: list[LocalNode | None] = []  # read once, at the first unschedulable pod

    def judged(trainer: dict[str, Any], found: PodProblem | None) -> PodProblem | None:
        """An unschedulable pod on the local cluster whose request is above its only node's
        allocatable can never start (hopeless); on a real cluster it waits for a node."""
        if found is None or found.reason != "Unschedulable":
            return found
        if not node:
            node.append(local_node(api))
        if node[0] is None:
            return dataclasses.replace(found, waits=WAIT_FOR_NODE)
        over = beyond_node(trainer, node[0])
        if not over:
            return found  # other pods hold the room: it frees up again
        return dataclasses.replace(found, hopeless=True, fix=never_fits_line(name, over, node[0]))

    def why_waiting(trainer: dict[str, Any] | None) -> PodProblem | None:
        """The trainer pod's problem: from the pod itself at every change; its Events too once
        it has waited EVENTS_AFTER s, then at most every EVENTS_EVERY s (a pod that starts at
        once costs no Events request). No pod yet, for a shaped session: the Job's Events."""
        if trainer is None:
            return why_no_pod()
        if is_running(trainer):
            return None
        now = time.monotonic()
        if now - waiting_since < EVENTS_AFTER:
            found = user_error(trainer, [], placement=placement) or pod_problem(
                trainer, [], image_pull_retries=image_pull_retries
            )
            if found is not None:
                problem[0] = judged(trainer, found)  # the timeout names it too
            return problem[0]
        if now - events_read[0] >= EVENTS_EVERY:
            events_read[0] = now
            events = events_about(api, namespace, pod_name(trainer), "Pod")
            found = user_error(trainer, events, placement=placement) or pod_problem(
                trainer, events, image_pull_retries=image_pull_retries
            )
            problem[0] = judged(trainer, found)
        return problem[0]

    def blocking_pod(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Without a trainer pod yet, the first of the job's pods that is not running: an MPI
        launcher is created once its node pods are Ready (the runtime's dependsOn), so a node
        pod that cannot start is why the launcher never comes."""
        waiting = [p for p in pods if not is_running(p) and not is_terminating(p)]
        return min(waiting, key=pod_name) if waiting else None

    def lagging_pod(pods: list[dict[str, Any]], trainer: dict[str, Any]) -> dict[str, Any] | None:
        """With the trainer running, the first other pod of the job not yet Running and Ready
        (``{}`` while fewer pods than the job's nodes exist): an MPI launcher's ``mpirun``
        reaches the node pods by their DNS names over ssh, and a node pod answers only once it
        has an address and its sshd listens (the runtimes' readiness probe on port 2222). On a
        real node the launcher runs seconds before them (Trainer <= 2.2 has no dependsOn)."""
        others = [
            p
            for p in pods
            if p is not trainer and pod_phase(p) != "Succeeded" and not is_terminating(p)
        ]
        waiting = [p for p in others if not (is_running(p) and is_ready(p))]
        if waiting:
            return min(waiting, key=pod_name)
        nodes = ((trainjob.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1
        return {} if len(others) + 1 < int(nodes) else None

    def why_no_pod() -> PodProblem | None:
        """The Job controller's FailedCreate (a missing service account) on the trainer's Job
        ``<name>-<replicated job>-0``, else the JobSet's JobCreationFailed (an invalid pod
        template), read for shaped sessions whose job is not suspended."""
        if shaping is None or not trainjob or (trainjob.get("spec") or {}).get("suspend"):
            return None
        now = time.monotonic()
        if now - waiting_since < EVENTS_AFTER or now - events_read[0] < EVENTS_EVERY:
            return problem[0]
        events_read[0] = now
        rjob = (target.replicated_job if target is not None else None) or "node"
        job = f"{name}-{rjob}-0"
        problem[0] = job_problem(
            f"Job {job}", namespace, events_about(api, namespace, job, "Job")
        ) or job_problem(f"JobSet {name}", namespace, events_about(api, namespace, name, "JobSet"))
        return problem[0]

    planned: list[int | None] = [None]  # the job's pods, from its JobSet (read once)

    def pods_planned(pods: list[dict[str, Any]]) -> int:
        """How many pods the job runs, not only those created so far (an MPI launcher is
        created after its node pods): its JobSet's count, read once its first pod exists;
        spec.trainer.numNodes at least when the JobSet cannot be read (no ``get jobsets``)."""
        if planned[0] is None:
            try:
                planned[0] = jobset_pod_count(fetch_jobset(api, namespace, name))
            except TrainJobError:
                planned[0] = 0
        nodes = ((trainjob.get("spec") or {}).get("trainer") or {}).get("numNodes") or 0
        return max(len(pods), planned[0] or int(nodes))

    def check() -> dict[str, Any] | None:
        pods = list(watcher.objects.values())
        trainer = select_trainer_pod(pods, target)
        subject = trainer if trainer is not None else blocking_pod(pods)
        lagging = None
        if trainer is not None and is_running(trainer):
            lagging = lagging_pod(pods, trainer)
            subject = lagging or trainer
        found = why_waiting(subject)
        status = job_status(name, namespace, runtime, trainjob, pods, target, started)
        if pods:
            status = dataclasses.replace(status, pods_expected=pods_planned(pods))
        if found is not None:
            status = dataclasses.replace(status, problem=found.line())
        elif lagging:
            status = dataclasses.replace(
                status, problem=f"waiting for pod {pod_name(lagging)} to be ready"
            )
        reporter.report(status)
        if found is not None and found.hopeless and found.fix and found.reason != "Unschedulable":
            raise PodStartError(f"{found.fix}; {found.reason}: {found.message}")
        if found is not None and found.hopeless and found.fix:
            hint = f"; {placement_hint}" if placement_hint and placement else ""
            raise PodStartError(f"{found.fix}{hint}; the scheduler says: {found.message}")
        if found is not None and found.hopeless:
            raise PodStartError(
                f"{'the trainer pod' if subject is trainer else 'a pod'} of TrainJob {name} "
                f"cannot start: {found.line()}; fix the "
                f"image (or what it needs) and connect again"
            )
        if trainer is None:
            return None
        if is_running(trainer):
            return trainer if lagging is None else None
        phase = pod_phase(trainer)
        if replaced_by_its_job(trainer):
            return None  # wait for the replacement; refresh() reports a Job that gave up
        if phase in ("Succeeded", "Failed"):
            how = termination(trainer)
            raise PodNotRunningError(
                f"trainer pod {pod_name(trainer)} of TrainJob {name} already finished ({phase})"
                f"{' with ' + how if how else ''} "
                "and cannot run commands; use a command that keeps running (or the default), "
                f"and delete the job with {delete_hint(name, namespace)}"
            )
        return None

    pod = watcher.run(deadline, check, refresh=refresh)
    if pod is None:
        last = reporter.last.message if reporter.last is not None else "no status"
        if problem[0] is not None:
            last = f"{last}; waiting because {problem[0].line()}"
        raise ConnectTimeoutError(
            f"the trainer pod of TrainJob {name} was not Running after {timeout:g}s ({last}); "
            f"the TrainJob still exists: keep waiting with attach({name!r}, "
            f"namespace={namespace!r}), or delete it with session.close() or "
            f"{delete_hint(name, namespace)}"
        )
    return pod


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
    image_pull_retries: int = DEFAULT_IMAGE_PULL_RETRIES,
    stuck_hint: str = "",
    shaping: PodShaping | None = None,
    placement_hint: str = "",
) -> dict[str, Any]:
    """Wait for Kueue admission (queued jobs), then for the trainer pod to run. While the API
    server is unreachable the last status is shown again with the outage as its problem."""
    on_status, on_notice = outage_reporter(on_status)
    with window_of(api).listening(on_notice):
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
                image_pull_retries=image_pull_retries,
                shaping=shaping,
                placement_hint=placement_hint,
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
            stuck_hint=stuck_hint,
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
            image_pull_retries=image_pull_retries,
            shaping=shaping,
            placement_hint=placement_hint,
        )


def outage_reporter(on_status: OnStatus | None) -> tuple[OnStatus, Callable[[str], None]]:
    """``on_status`` that remembers the last status, and a notice listener that reports it
    again: with the outage line as its problem, or as it was once the server is back."""
    last: list[JobStatus | None] = [None]

    def remember(status: JobStatus) -> None:
        last[0] = status
        notify(on_status, status)

    def on_notice(line: str) -> None:
        status = last[0]
        if status is None:
            return
        if line.startswith("API server unreachable"):
            status = dataclasses.replace(status, problem=line)
        notify(on_status, status)

    return remember, on_notice
