"""Starting a detached run in the pods that run the keep-alive watchdog, and reading it back.

Which pods: the running pods of the trainer's replicated job, the ones running the keep-alive
(torch: every node pod, each gets the command, as Trainer would run a trainer command; MPI:
the launcher, whose ``mpirun`` reaches the node pods). Each pod's watchdog ends its pod with
its own run's exit code.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes.client import ApiClient

from ..errors import DetachedRunError, NotFoundError, TrainJobError
from ..exec.client import ExecClient
from ..exec.detach_scripts import (
    BUSY_EXIT,
    NO_STATE_EXIT,
    NO_WATCHDOG_EXIT,
    read_argv,
    start_argv,
)
from ..kube.names import RJOB_LABEL
from ..kube.objects import is_running, labels_of, pod_name, pod_phase
from ..result import ExecResult
from ..trainjob.targets import list_job_pods
from ..trainjob.trainer_pod import TRAINER_CONTAINER
from .state import DetachedRun, DetachedState, PodReading, parse_reading

START_TIMEOUT = 20.0  # seconds for the start exec (it returns at once)
READ_TIMEOUT = 20.0
MAX_PARALLEL = 16
PODS_GONE = "its pods are gone"


def keepalive_pods(
    api: ApiClient, namespace: str, name: str, replicated_job: str | None
) -> list[dict[str, Any]]:
    """Every pod of the trainer's replicated job (any phase), oldest first."""
    return [
        pod
        for pod in list_job_pods(api, namespace, name)
        if replicated_job is None or labels_of(pod).get(RJOB_LABEL) == replicated_job
    ]


def _each(pods: Sequence[Any], work: Any) -> list[Any]:
    """``work`` on each pod, at most MAX_PARALLEL at once, results in order."""
    if not pods:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(pods)))) as pool:
        return list(pool.map(work, pods))


def start_detached(
    client: ExecClient,
    api: ApiClient,
    namespace: str,
    name: str,
    argv: Sequence[str],
    command_text: str,
    *,
    replicated_job: str | None,
    trainer_pod: str,
    container: str | None,
) -> DetachedRun:
    """Start ``argv`` as a detached run in every running keep-alive pod; returns its handle.

    Raises :class:`DetachedRunError` when a run is still alive (one at a time) or the pods run
    no keep-alive watchdog (``idle_timeout=None``, a command of your own)."""
    pods = keepalive_pods(api, namespace, name, replicated_job)
    targets = [pod_name(p) for p in pods if is_running(p)] or [trainer_pod]
    targets.sort(key=lambda p: p != trainer_pod)
    started = time.time()

    def start(pod: str) -> ExecResult:
        return client.run(
            namespace,
            pod,
            start_argv(command_text, argv),
            container=container or TRAINER_CONTAINER,
            timeout=START_TIMEOUT,
        )

    runs: dict[str, int] = {}
    for pod, result in zip(targets, _each(targets, start), strict=True):
        words = result.stdout.split()
        if result.returncode == 0 and len(words) >= 2 and words[0] == "started":
            runs[pod] = int(words[1])
            continue
        raise _start_failure(name, pod, result, started=sorted(runs))
    return DetachedRun(
        trainjob=name,
        namespace=namespace,
        run=runs[targets[0]],
        command=command_text,
        pods=tuple(targets),
        started=started,
    )


def _start_failure(name: str, pod: str, result: ExecResult, started: list[str]) -> TrainJobError:
    also = f" (it started in {', '.join(started)} already)" if started else ""
    if result.returncode == BUSY_EXIT:
        number = result.stdout.split()[-1] if result.stdout.split() else "?"
        return DetachedRunError(
            f"TrainJob {name} already has detached run {number} running in pod {pod}{also}: "
            "one detached run at a time; follow it with %trainjob_logs --follow "
            "(session.logs(follow=True)), or wait until it ends"
        )
    if result.returncode == NO_WATCHDOG_EXIT:
        return DetachedRunError(
            f"pod {pod} of TrainJob {name} runs no keep-alive watchdog (connected with "
            "idle_timeout off or a command of its own), so a detached run could not end the "
            "job: connect again with the default keep-alive"
        )
    if result.returncode == NO_STATE_EXIT:
        return DetachedRunError(
            f"pod {pod} of TrainJob {name} has no writable $TMPDIR or /tmp: a detached run "
            f"needs one ({result.stdout.strip()})"
        )
    if result.returncode == 0:
        # a "Success" without the start's last line: its stream was cut behind the API server
        # (a kubelet restart; exec/client.py cut_short), maybe after the run began
        return DetachedRunError(
            f"the connection to pod {pod} of TrainJob {name} ended before the detached run's "
            f"start answered{also}: it may have started; follow it with %trainjob_logs "
            "--follow (session.logs(follow=True)) before starting it again"
        )
    why = (result.stderr or result.stdout).strip().splitlines()
    return DetachedRunError(
        f"could not start the detached run in pod {pod} of TrainJob {name} (exit code "
        f"{result.returncode}: {why[-1] if why else 'no output'}){also}"
    )


def _terminated_code(pod: Mapping[str, Any], container: str) -> int | None:
    """The trainer container's exit code once it ended (its current or last termination)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") != container:
            continue
        for key in ("state", "lastState"):
            ended = (cs.get(key) or {}).get("terminated")
            if ended and "exitCode" in ended:
                return int(ended["exitCode"])
    return None


def read_detached(
    client: ExecClient,
    api: ApiClient,
    namespace: str,
    name: str,
    *,
    replicated_job: str | None,
    trainer_pod: str,
    container: str | None,
    known: DetachedState | None = None,
    lines: int = 10,
) -> DetachedState | None:
    """The newest detached run of the job, None when it has none. Running pods are asked
    through exec; pods that ended give their container's exit code; ``known`` (what was read
    before) fills in the command and start of a run whose pods can no longer be asked."""
    box = container or TRAINER_CONTAINER
    try:
        pods = keepalive_pods(api, namespace, name, replicated_job)
    except NotFoundError:
        pods = []
    sep = f"--trainjob-magics-{secrets.token_hex(6)}--"

    def ask(pod: dict[str, Any]) -> PodReading | None:
        code = _terminated_code(pod, box)
        run = known.run if known is not None else 0
        # one of the run's pods: a restart (restartPolicy OnFailure) or an exec that finds its
        # container gone means the run ended; its code is the container's last termination
        ours = known is not None and pod_name(pod) in known.exit_codes
        ending = PodReading(run=run, exit_code=code, alive=code is None)
        if not is_running(pod) or (code is not None and pod_phase(pod) != "Running"):
            return PodReading(run=run, exit_code=code, alive=False)
        try:
            result = client.run(
                namespace, pod_name(pod), read_argv(sep, lines), container=box, timeout=READ_TIMEOUT
            )
        except TrainJobError:
            if ours or code is not None:
                return ending
            return None
        reading = parse_reading(result.stdout, sep)
        return ending if reading.run == 0 and ours else reading

    readings = {
        pod_name(p): r for p, r in zip(pods, _each(pods, ask), strict=True) if r is not None
    }
    with_run = {p: r for p, r in readings.items() if r.run}
    if not with_run:
        if known is None:
            return None
        return DetachedState(
            trainjob=name,
            run=known.run,
            command=known.command,
            started=known.started,
            pod=known.pod,
            exit_codes={**known.exit_codes},
            tail=known.tail,
            ended_by=known.ended_by or PODS_GONE,
        )
    main = trainer_pod if trainer_pod in with_run else next(iter(with_run))
    first = with_run[main]
    return DetachedState(
        trainjob=name,
        run=first.run,
        command=first.command or (known.command if known else ""),
        started=first.started or (known.started if known else None),
        pod=main,
        exit_codes={p: (None if r.alive else r.exit_code) for p, r in with_run.items()},
        tail=first.tail or (known.tail if known else ""),
    )


__all__ = ["PODS_GONE", "keepalive_pods", "read_detached", "start_detached"]
