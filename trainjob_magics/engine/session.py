"""Interactive TrainJob sessions: :class:`TrainJobSession` (``connect()`` / ``attach()`` in
``connecting.py`` open them).

The session owns its mutable state: the trainer pod it runs in, its in-flight commands (handed
to its :class:`~.exec.commands.CommandRunner`), the heartbeat, and the preemption it saw. It
delegates the work to the rooms below it and holds no protocol code itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from kubernetes.client import ApiClient

from .detach.control import PODS_GONE, read_detached, start_detached
from .detach.state import DetachedRun, DetachedState
from .errors import (
    ConnectionLostError,
    DetachedRunError,
    IdleReleasedError,
    IdleStoppedError,
    InvalidInputError,
    NotFoundError,
    PodGoneError,
    PodNotRunningError,
    SessionClosedError,
    SessionPreemptedError,
    TrainJobError,
    TrainJobGoneError,
)
from .exec.client import ExecClient
from .exec.commands import CommandGroup, CommandRunner
from .exec.fanout import OnPodDone, OnPodOutput, run_on_pods
from .exec.inflight import InFlight
from .exec.multiplexed import Multiplexed
from .exec.output import MAX_MEMORY_OUTPUT, SpillDir
from .exec.ranks import (
    OnRankEvent,
    RankOptions,
    job_pods,
    new_token,
    pod_matcher,
    world_warning,
)
from .exec.runs import CommandRun
from .exec.torchrun_prelude import launcher_argv, wants_launchers, wants_torchrun
from .files.logs import OnLog, PodLogs, read_log, read_logs
from .files.resume import DEFAULT_RETRIES
from .files.transfer import (
    STOP_WAIT,
    OnRetry,
    Stop,
    TransferProgress,
    TransferResult,
    download,
    upload,
    write_file,
)
from .forward.forward import Forward, OnProblem, PodChoice
from .inventory.gpu_sampler import GpuSampler
from .inventory.holdings import duration_words
from .inventory.notes import LastCommandNotes, note_session
from .inventory.records import IDLE_STOP_BY, gone_reason
from .kube.names import jobset_selector
from .kube.objects import is_running, parse_time, pod_name, pod_phase
from .kube.retry import OnNotice, validate_retry_seconds, window_of
from .kueue.admission import detect_preemption, preempted_message, with_queue
from .kueue.api import Visibility, queue_status
from .python.calls import MAX_VALUE_BYTES, PythonCalls
from .python.results import MultiPythonResult, PythonResult
from .python.runs import OnPythonDone, PythonRun
from .result import (
    ExecResult,
    JobStatus,
    MultiExecResult,
    PodGpus,
    PodRef,
    Protocols,
    StopReport,
)
from .trainjob.idle import Heartbeat, idle_released_error
from .trainjob.idle_stop import IdleClock, idle_stopped_error, validate_idle_stop
from .trainjob.lifecycle import (
    delete_trainjob,
    deleted_version,
    fetch_trainjob,
    wait_pods_gone,
    wait_trainjob_gone,
)
from .trainjob.notebook_pod import pod_owners
from .trainjob.notebook_pod import release as release_from_pod
from .trainjob.readiness import OnStatus, eviction_baseline, wait_ready
from .trainjob.status import after_pod_gone, job_status
from .trainjob.targets import (
    TRAINER,
    TargetSpec,
    default_container,
    is_resolved,
    list_job_pods,
    names_one_pod,
    pod_commands,
    pod_refs,
    resolve_pods,
    wants_multi,
)
from .trainjob.trainer_pod import (
    TRAINER_CONTAINER,
    TrainerTarget,
    replaced_by_its_job,
    select_trainer_pod,
)
from .validation import (
    validate_address,
    validate_exec,
    validate_max_memory_output,
    validate_port,
    validate_timeout,
)

log = logging.getLogger(__name__)

REPLACEMENT_WAIT = 120.0  # seconds a command waits for the trainer pod a job recreates

OnIdleStop = Callable[["TrainJobSession", IdleStoppedError], None]


def _bound(on_output: OnPodOutput | None, pod: str) -> Callable[[str, str], None] | None:
    """``on_output`` with the pod a command runs in filled in."""
    return functools.partial(on_output, pod) if on_output is not None else None


def _container_of(pod: Mapping[str, Any]) -> str:
    """The trainer container (``node``) of a pod, else its first container."""
    return default_container(pod) or TRAINER_CONTAINER


class TrainJobSession:
    """A running TrainJob whose trainer pod runs commands through pods/exec.

    ``execute`` may be called from any thread; ``start`` runs it in the background and returns
    a :class:`~.exec.runs.CommandRun` to wait for or interrupt. ``close`` is idempotent and
    also runs when the session is used as a context manager.
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        runtime: str,
        api_client: ApiClient,
        trainer_pod: str | Mapping[str, Any],
        container: str | None = None,
        *,
        target: TrainerTarget | None = None,
        started_at: float | None = None,
        queue: str | None = None,
        job_uid: str | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.runtime = runtime
        self.api_client = api_client
        self.target = target
        self.queue = queue  # Kueue LocalQueue, None when the job is not queued
        self.job_uid = job_uid
        self.idle_timeout = idle_timeout  # the idle watchdog's timeout; None: no heartbeats
        self.started_at = time.monotonic() if started_at is None else started_at
        if isinstance(trainer_pod, Mapping):
            self._pod = pod_name(trainer_pod)
            self.container = container or _container_of(trainer_pod)
        else:
            self._pod = trainer_pod
            self.container = container or TRAINER_CONTAINER
        self._spill = SpillDir(name)
        self._exec = ExecClient(api_client, spill_dir=self._spill)
        self._inflight = InFlight()
        self._commands = CommandRunner(self._exec, namespace, self._inflight, api_client)
        self._lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._closed = False
        self._transfers: set[Stop] = set()  # uploads and downloads running (close stops them)
        self._preempted: SessionPreemptedError | None = None
        self._disruption = ""  # the last pod deletion/eviction/preemption a command saw
        self._evictions = 0
        if queue and job_uid:
            self._evictions = eviction_baseline(api_client, namespace, job_uid)
        self._forwards: list[Forward] = []
        self._detached: DetachedState | None = None  # the newest detached run seen
        self._idle_clock: IdleClock | None = None  # set_idle_stop()
        self._command_notes = LastCommandNotes(self)  # the last-command note, begin and end
        self.seen_version = ""  # a resourceVersion of the TrainJob seen (a note's PATCH)
        self._idle_left: DetachedState | None = None  # the run an idle stop left running for
        self._idle_deleting = False  # the idle stop deletes the TrainJob (decided)
        self._on_idle_stop: OnIdleStop | None = None
        self._gpu_sampler: GpuSampler | None = None
        self._heartbeat = self._start_heartbeat()
        self._python = PythonCalls(
            self._exec, namespace, self.start, self._targets, lambda: self.container
        )

    # -- properties -------------------------------------------------------------------------
    @property
    def pod(self) -> str:
        """Name of the trainer pod commands run in."""
        return self._pod

    @property
    def max_memory_output(self) -> int:
        """Bytes of each output stream ``execute`` keeps in memory (default 64 MiB); the rest
        of a larger output is spilled to a temporary file (``ExecResult.stdout_path``)."""
        return int(self._exec.max_memory_output)

    @max_memory_output.setter
    def max_memory_output(self, value: int) -> None:
        limit = validate_max_memory_output(value)
        self._exec.max_memory_output = MAX_MEMORY_OUTPUT if limit is None else limit

    @property
    def silent_after(self) -> float:
        """Seconds without a byte from a command's or a forward's connection, pongs to our
        pings included, before it counts as gone silent (a dead node, a network that dropped
        the flow): the command then ends with ConnectionLostError, never a hang (default 30)."""
        return float(self._exec.silent_after)

    @silent_after.setter
    def silent_after(self, value: float) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 1:
            raise TrainJobError(f"silent_after must be a number of seconds, at least 1: {value!r}")
        self._exec.silent_after = float(value)

    @property
    def api_retry_seconds(self) -> float:
        """How long calls wait for an API server that answered before and is now unreachable
        (a restart, a control-plane upgrade), from the outage's first failure."""
        return window_of(self.api_client).seconds

    @api_retry_seconds.setter
    def api_retry_seconds(self, value: float) -> None:
        window_of(self.api_client).seconds = validate_retry_seconds(value)

    @property
    def closed(self) -> bool:
        """True once ``close()`` deleted the TrainJob."""
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pod={self._pod!r}"
        return (
            f"TrainJobSession(name={self.name!r}, namespace={self.namespace!r}, "
            f"runtime={self.runtime!r}, {state})"
        )

    def _check_open(self) -> None:
        stopped = self.idle_stopped
        if stopped is not None:
            raise stopped
        if self._closed:
            raise SessionClosedError(
                f"TrainJob session {self.name} is closed; start a new one with connect(...)"
            )

    # -- pods -------------------------------------------------------------------------------
    def pods(self, target: TargetSpec = "all") -> list[PodRef]:
        """The pods a target names (``all``, ``node``, ``node-2``, ``launcher``, a pod name)."""
        self._check_open()
        return resolve_pods(self.api_client, self.namespace, self.name, target, self.pod)

    def _targets(self, pods: TargetSpec) -> tuple[list[PodRef], bool]:
        """The pods a command runs on (resolved once), and whether it is a multi-pod run."""
        if wants_multi(pods):
            return self.pods(pods), True
        return [PodRef(self.pod, TRAINER, 0, "Running", self.container)], False

    # -- commands ---------------------------------------------------------------------------
    def execute(
        self,
        command: str | Sequence[str],
        *,
        container: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        on_output: OnPodOutput | None = None,
        pods: TargetSpec = None,
        max_memory_output: int | None = None,
        on_done: OnPodDone | None = None,
        on_notice: OnNotice | None = None,
        ranks: bool = True,
        world_check: bool = True,
        on_ranks: OnRankEvent | None = None,
    ) -> ExecResult | MultiExecResult:
        """Run ``command`` in the trainer pod (a str runs with ``sh -c``, a list as argv).

        ``pods`` other than None/``"trainer"`` (``"all"``, ``"node"``, ``"node-2"``, a pod name,
        a list, or the PodRefs of :meth:`pods`) runs it on those pods concurrently and returns a
        :class:`MultiExecResult`; ``on_done(pod, result, error)`` is then called as each pod's
        command ends. ``on_output(pod, stream, text)`` gets the output as it arrives, in both
        cases. A timeout or Ctrl-C stops the remote command (on every pod). Each output stream
        keeps at most ``max_memory_output`` bytes in memory (default: :attr:`max_memory_output`),
        the rest is spilled to a temporary file. Every error carries the output so far in
        ``.partial``. While the API server is unreachable the command waits for it (up to
        :attr:`api_retry_seconds`) and ``on_notice(line)`` hears "API server unreachable,
        retrying".

        A shell command on one pod that calls ``mpirun``/``mpiexec`` gets each rank's output
        apart (``ranks``, docs/multinode.md "Per-rank output"): ``result.by_rank``,
        ``result.launcher``, ``result.mpi`` (its runs, the failed rank, the world check's
        warning unless ``world_check`` is off); ``on_ranks(event)`` then gets the text of the
        tagged runs (:class:`~.exec.ranks.RankEvent`) and ``on_output`` the text around them.
        """
        _refs, _multi, work = self._prepare(
            command,
            container,
            stdin,
            timeout,
            on_output,
            pods,
            max_memory_output,
            on_done,
            RankOptions(ranks, world_check, on_ranks),
        )
        with window_of(self.api_client).listening(on_notice):
            return work(CommandGroup(self._commands))

    def start(
        self,
        command: str | Sequence[str],
        *,
        container: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        on_output: OnPodOutput | None = None,
        pods: TargetSpec = None,
        max_memory_output: int | None = None,
        on_done: OnPodDone | None = None,
        on_notice: OnNotice | None = None,
        ranks: bool = True,
        world_check: bool = True,
        on_ranks: OnRankEvent | None = None,
    ) -> CommandRun:
        """``execute`` in a background thread: returns a :class:`CommandRun` (``.pods`` are the
        pods it runs on; ``.result()`` waits; ``.interrupt()`` stops it and returns the error
        to raise). Bad input and unknown pods raise here, before anything runs."""
        refs, multi, work = self._prepare(
            command,
            container,
            stdin,
            timeout,
            on_output,
            pods,
            max_memory_output,
            on_done,
            RankOptions(ranks, world_check, on_ranks),
        )
        work = window_of(self.api_client).heard_by(work, on_notice)
        return CommandRun(work, CommandGroup(self._commands), refs, multi=multi).start()

    def _prepare(
        self,
        command: str | Sequence[str],
        container: str | None,
        stdin: bytes | str | None,
        timeout: float | None,
        on_output: OnPodOutput | None,
        pods: TargetSpec,
        max_memory_output: int | None,
        on_done: OnPodDone | None,
        ranks: RankOptions | None = None,
    ) -> tuple[list[PodRef], bool, Callable[[CommandGroup], Any]]:
        self._check_open()
        limit = validate_max_memory_output(max_memory_output)
        argv, timeout, data = validate_exec(command, timeout, stdin)
        refs, multi = self._targets(pods)
        if self._preempted is not None:
            raise SessionPreemptedError(
                str(self._preempted), queue=self._preempted.queue, partial=None
            )

        def work(group: CommandGroup) -> ExecResult | MultiExecResult:
            try:
                with self._in_use():
                    return run(group)
            except TrainJobError as exc:
                if exc.partial is None:  # every error carries the output so far
                    exc.partial = (
                        MultiExecResult(results={r.name: ExecResult(pod=r.name) for r in refs})
                        if multi
                        else ExecResult(pod=refs[0].name)
                    )
                raise

        def run(group: CommandGroup) -> ExecResult | MultiExecResult:
            def run_one(ref: PodRef, bind: Callable[[str], Any]) -> ExecResult:
                return self._run_one(
                    ref,
                    argv,
                    container=container,
                    stdin=data,
                    timeout=timeout,
                    bind=bind,
                    max_memory_output=limit,
                    group=group,
                )

            def run_tagged(ref: PodRef, callback: Any) -> ExecResult:
                token = new_token()  # torchrun's prelude in each pod (exec/torchrun_prelude.py)
                return self._run_one(
                    ref,
                    launcher_argv(argv, token, mpi=False),
                    container=container,
                    stdin=data,
                    timeout=timeout,
                    bind=lambda _pod: callback,
                    max_memory_output=limit,
                    group=group,
                    ranks_token=token,
                )

            if multi:
                labels = {r.name: r.label for r in refs if r.role != TRAINER}
                tagged = bool(ranks and ranks.enabled and wants_torchrun(argv))
                result = run_on_pods(
                    run_tagged if tagged else lambda ref, cb: run_one(ref, lambda _pod: cb),
                    refs,
                    group=group,
                    on_output=on_output,
                    on_done=on_done,
                    labels=labels,
                    multiplexed=None
                    if tagged  # each pod's streams through its RankedStreams: the usual path
                    else Multiplexed(
                        self._commands,
                        argv,
                        lambda ref: container or self._default_container(ref),
                        stdin=data,
                        timeout=timeout,
                        max_memory_output=limit,
                    ),
                )
                if self.queue and not result.ok:
                    self._check_preempted(result)
                self._record_pods_gone(result)
                return result
            token = new_token() if ranks and ranks.enabled and wants_launchers(argv) else None
            try:
                if token is None:
                    single = run_one(refs[0], functools.partial(_bound, on_output))
                else:  # under the per-rank prelude (exec/ranks.py)
                    single = self._run_one(
                        refs[0],
                        launcher_argv(argv, token),
                        container=container,
                        stdin=data,
                        timeout=timeout,
                        bind=functools.partial(_bound, on_output),
                        max_memory_output=limit,
                        group=group,
                        ranks_token=token,
                        on_ranks=ranks.on_ranks if ranks else None,
                    )
            except (PodNotRunningError, ConnectionLostError, PodGoneError) as exc:
                if self.queue:
                    self._check_preempted(exc.partial, pod=refs[0].name)
                if isinstance(exc, PodGoneError):
                    raise self._pod_gone(exc) from None
                raise
            if self.queue and single.returncode != 0:
                self._check_preempted(single)
            if single.mpi is not None:
                self._place_ranks(single, world_check=bool(ranks and ranks.world_check))
            return single

        return refs, multi, work

    def _place_ranks(self, result: ExecResult, *, world_check: bool) -> None:
        """The pods the ranks ran on (their hosts matched to the job's pods), and the world
        check's warning for each tagged run (exec/ranks.py)."""
        try:
            pods = job_pods(self._list_pods())
        except TrainJobError:
            return
        result.mpi.place(pod_matcher(pods))
        if world_check:
            for run in result.mpi.runs:
                run.warning = world_warning(run, pods)

    def _run_one(
        self,
        ref: PodRef,
        argv: list[str],
        *,
        container: str | None,
        stdin: bytes | None,
        timeout: float | None,
        bind: Callable[[str], Callable[[str, str], None] | None],
        max_memory_output: int | None,
        group: CommandGroup,
        ranks_token: str | None = None,
        on_ranks: OnRankEvent | None = None,
    ) -> ExecResult:
        """Run on one pod; a pod that is gone (the handshake failed, so nothing started) is
        re-resolved once, by its role and index, unless Kueue preempted the job or the job
        released itself (idle_timeout)."""

        def attempt(pod: str, default_container: str | None) -> ExecResult:
            return self._commands.run(
                pod,
                argv,
                container=container or default_container,
                stdin=stdin,
                timeout=timeout,
                on_output=bind(pod),
                max_memory_output=max_memory_output,
                group=group,
                ranks_token=ranks_token,
                on_ranks=on_ranks,
            )

        try:
            return attempt(ref.name, self._default_container(ref))
        except PodNotRunningError as exc:
            if self.queue:
                self._check_preempted(None)
            self._raise_if_idle(exc)
            new_pod = self._reresolve(ref)
            if new_pod == ref.name:
                raise
            return attempt(new_pod, self.container if ref.role == TRAINER else ref.container)

    def _default_container(self, ref: PodRef) -> str | None:
        return self.container if ref.role == TRAINER else ref.container

    def interrupt(self) -> list[StopReport]:
        """Stop every command of this session still running in a pod (from any thread): its
        whole process tree gets SIGINT, then SIGTERM, then SIGKILL, about a second apart."""
        return self._commands.interrupt()

    def _pod_gone(self, exc: PodGoneError) -> PodGoneError:
        """``exc`` with what the next command will do; remembered for :meth:`status`."""
        try:
            trainjob: dict[str, Any] | None = fetch_trainjob(
                self.api_client, self.namespace, self.name
            )
        except NotFoundError:
            trainjob = None
        except TrainJobError:
            trainjob = {}
        message = f"{exc}; {after_pod_gone(self.name, trainjob)}"
        self._disruption = f"{time.strftime('%H:%M:%S')}: {exc}"
        return PodGoneError(message, partial=exc.partial, pod=exc.pod, cause=exc.cause)

    def _record_pods_gone(self, result: MultiExecResult) -> None:
        """Pods of a fan-out that were deleted or evicted: the first one's error says what the
        next command will do, and :meth:`status` remembers it."""
        gone = [(p, e) for p, e in result.errors.items() if isinstance(e, PodGoneError)]
        if not gone:
            return
        pod, first = gone[0]
        result.errors[pod] = self._pod_gone(first)
        if len(gone) > 1:
            names = ", ".join(p for p, _ in gone[1:4])
            self._disruption += f" (and {len(gone) - 1} more pods: {names}"
            self._disruption += ", …)" if len(gone) > 4 else ")"

    def _check_preempted(self, partial: Any, pod: str | None = None) -> None:
        """Raise SessionPreemptedError (keeping ``partial``) if Kueue took the job away."""
        try:
            trainjob = fetch_trainjob(self.api_client, self.namespace, self.name)
            qs = detect_preemption(
                self.api_client,
                self.namespace,
                self.name,
                self.job_uid or "",
                self.queue,
                self._evictions,
                trainjob,
            )
        except TrainJobError as exc:
            log.debug("preemption check of %s failed: %s", self.name, exc)
            return
        if qs is None:
            return
        err = SessionPreemptedError(
            preempted_message(self.name, qs, pod=pod), partial=partial, queue=qs
        )
        self._preempted = err
        self._disruption = f"{time.strftime('%H:%M:%S')}: {err}"
        raise err

    def _list_pods(self) -> list[dict[str, Any]]:
        return list_job_pods(self.api_client, self.namespace, self.name)

    def _reresolve(self, ref: PodRef, *, wait: bool = False) -> str:
        """The pod now in ``ref``'s place after it failed; raise if none is Running.
        ``wait``: wait (bounded) for the trainer pod the job recreates, as after a
        disruption."""
        pods = self._list_pods()
        if ref.role == TRAINER:
            found = select_trainer_pod(pods, self.target)
        else:
            slot = next(
                (r for r in pod_refs(pods) if (r.role, r.index) == (ref.role, ref.index)), None
            )
            found = next((p for p in pods if slot and pod_name(p) == slot.name), None)
        waits = self._disruption or wait
        if ref.role == TRAINER and waits and not (found and is_running(found)):
            found = self._await_replacement(found)
        if found is not None and is_running(found):
            if ref.role == TRAINER:
                with self._lock:
                    self._pod = pod_name(found)
            return pod_name(found)
        gone = self._gone()
        if gone is not None:
            raise gone
        state = f"is {pod_phase(found)}" if found is not None else "is gone"
        what = "the trainer pod" if ref.role == TRAINER else f"pod {ref.label}"
        raise PodNotRunningError(
            f"{what} of TrainJob {self.name} ({ref.name}) {state}; check "
            "session.status(), or close() the session and connect again"
        )

    def _gone(self) -> TrainJobGoneError | None:
        """The error saying who deleted this session's TrainJob (or is deleting it), None while
        it is there: the sidebar's note on it, read from the job being deleted, or from its last
        version, replayed by a watch from one the session saw."""
        if self._closed:
            return None
        try:
            job: dict[str, Any] | None = fetch_trainjob(self.api_client, self.namespace, self.name)
        except NotFoundError:
            job = None
        except TrainJobError:
            return None  # cannot tell: the caller's own error says what it saw
        if job is not None and not (job.get("metadata") or {}).get("deletionTimestamp"):
            return None
        state = "is being deleted" if job is not None else "no longer exists"
        if job is None:
            job = deleted_version(self.api_client, self.namespace, self.name, self.seen_version)
        # without its last version (history too old, no watch permission) who deleted it is
        # not known: not this session
        why = gone_reason(job) if job else "deleted outside this kernel (the sidebar, kubectl...)"
        at = parse_time(((job or {}).get("metadata") or {}).get("deletionTimestamp"))
        when = f" at {at.astimezone():%H:%M:%S}" if at else ""
        return TrainJobGoneError(
            f"TrainJob {self.name} in namespace {self.namespace} {state} ({why}{when}); "
            "start a new session with connect(...)",
            why=why,
            at=at.astimezone() if at else None,
        )

    def _await_replacement(self, found: dict[str, Any] | None) -> dict[str, Any] | None:
        """After a disruption: wait (bounded) for the trainer pod the job recreates; raises
        when the job ended instead (failed, deleted, finished)."""
        if (
            found is not None
            and pod_phase(found) in ("Succeeded", "Failed")
            and not replaced_by_its_job(found)
        ):
            return found
        return wait_ready(
            self.api_client,
            self.namespace,
            self.name,
            self.target,
            runtime=self.runtime,
            timeout=REPLACEMENT_WAIT,
            started=time.monotonic(),
            on_status=None,
            queue=None,
            job_uid=None,
        )

    # -- Python interpreters -----------------------------------------------------------------
    @property
    def interpreter(self) -> str:
        """The Python interpreter ``python``/``push``/``pull`` start in the pods (``python3``)."""
        return self._python.interpreter

    @interpreter.setter
    def interpreter(self, value: str) -> None:
        self._python.interpreter = value

    def python(
        self,
        code: str,
        *,
        pods: TargetSpec = None,
        on_output: OnPodOutput | None = None,
        timeout: float | None = None,
        container: str | None = None,
        interpreter: str | None = None,
    ) -> PythonResult | MultiPythonResult:
        """Run ``code`` in the persistent Python interpreter of each target pod (started on
        first use; names stay for the next call). The result holds stdout, stderr, the last
        expression's value (``.value``, rich forms in ``.data``) and the remote ``.error``."""
        return self._python.wait(
            self.start_python(
                code,
                pods=pods,
                on_output=on_output,
                timeout=timeout,
                container=container,
                interpreter=interpreter,
            )
        )

    def start_python(
        self,
        code: str,
        *,
        pods: TargetSpec = None,
        on_output: OnPodOutput | None = None,
        on_done: OnPythonDone | None = None,
        timeout: float | None = None,
        container: str | None = None,
        interpreter: str | None = None,
    ) -> PythonRun:
        """``python`` in the background: a :class:`PythonRun` (``.result()``, ``.interrupt()``)."""
        self._check_open()
        if not isinstance(code, str):
            raise InvalidInputError(f"code must be a str, got {type(code).__name__}")
        return self._python.start(
            {"op": "run", "code": code},
            pods=pods,
            container=container,
            on_output=on_output,
            on_done=on_done,
            timeout=timeout,
            interpreter=interpreter,
        )

    def push(
        self,
        values: Mapping[str, Any] | None = None,
        /,
        *,
        pods: TargetSpec = None,
        timeout: float | None = None,
        interpreter: str | None = None,
        max_bytes: int = MAX_VALUE_BYTES,
        **named: Any,
    ) -> list[str]:
        """Send values (pickled) into the interpreters: ``push(x=1)`` or ``push({"x": 1})``;
        returns the pods."""
        self._check_open()
        return self._python.push(
            {**(values or {}), **named},
            pods=pods,
            timeout=timeout,
            interpreter=interpreter,
            max_bytes=max_bytes,
        )

    def pull(
        self,
        *names: str,
        pods: TargetSpec = None,
        timeout: float | None = None,
        interpreter: str | None = None,
        max_bytes: int = MAX_VALUE_BYTES,
    ) -> Any:
        """Values from the trainer's interpreter: one name gives its value, several a tuple;
        with several ``pods`` a dict pod -> value (or tuple)."""
        self._check_open()
        return self._python.pull(
            names, pods=pods, timeout=timeout, interpreter=interpreter, max_bytes=max_bytes
        )

    def python_reset(self, *, pods: TargetSpec = None, interpreter: str | None = None) -> list[str]:
        """Kill the interpreters and start new ones (every name is gone); returns the pods."""
        self._check_open()
        return self._python.reset(pods=pods, interpreter=interpreter)

    # -- idle release -----------------------------------------------------------------------
    def _start_heartbeat(self) -> Heartbeat | None:
        if not self.idle_timeout:
            return None
        rjob = getattr(self.target, "replicated_job", None)
        return Heartbeat(
            self._exec,
            self.api_client,
            self.namespace,
            self.name,
            self.idle_timeout,
            replicated_job=rjob,
            trainer=lambda: (self.pod, self.container),
        ).start()

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def _raise_if_idle(self, exc: PodNotRunningError) -> None:
        """Raise :class:`IdleReleasedError` when the job ended itself (idle watchdog)."""
        if not self.idle_timeout or isinstance(exc, IdleReleasedError) or self._detached:
            return  # a job with a detached run ends with the run, not for want of heartbeats
        try:
            state = self.status().state
        except TrainJobError:
            return
        if state != "Complete":
            return
        self._stop_heartbeat()
        raise idle_released_error(self.name, self.idle_timeout) from exc

    # -- idle stop --------------------------------------------------------------------------
    @property
    def idle_stop(self) -> float | None:
        """Seconds without a command after which this session stops itself; None: never."""
        return self._idle_clock.seconds if self._idle_clock is not None else None

    def set_idle_stop(
        self, idle_stop: float | str | None, *, on_stop: OnIdleStop | None = None
    ) -> None:
        """Stop this session once no command has run for ``idle_stop`` (seconds, or ``"30m"``,
        ``"2h"``; None turns it off), though this process lives: its TrainJob is deleted, or,
        while a detached run lives, left running for it. A command running longer is never
        cut: the clock starts again when it ends. Every later command raises
        :class:`IdleStoppedError`; ``on_stop(session, error)`` is called (from a background
        thread) once it stopped. Commands, Python cells and file copies count as use;
        forwards, logs and status do not."""
        seconds = validate_idle_stop(idle_stop)
        self._check_open()
        self._stop_idle_clock()
        self._idle_clock, self._on_idle_stop = None, on_stop
        now = datetime.now(timezone.utc)
        try:  # the sidebar's warning reads both (one PATCH, best effort)
            note_session(self, idle_stop=seconds or 0.0, last_command=now if seconds else None)
        except TrainJobError as exc:
            log.debug("could not note the idle stop on TrainJob %s: %s", self.name, exc)
        if seconds is not None:
            self._idle_clock = IdleClock(
                seconds, self._stop_for_idle, on_note=self._note_last_command
            ).start()

    @property
    def idle_stopped(self) -> IdleStoppedError | None:
        """The error of a session stopped for being idle (when, how); None while it is not."""
        clock = self._idle_clock
        if clock is None or not clock.stopped:
            return None
        words = duration_words(clock.seconds)
        when = clock.fired_at or datetime.now()
        return idle_stopped_error(
            self.name,
            clock.seconds,
            words,
            when,
            self._idle_left,
            deleted=self._idle_deleting or self._closed,
        )

    @contextlib.contextmanager
    def _in_use(self) -> Iterator[None]:
        """A command (or copy) runs: the idle clock waits for it to end."""
        clock = self._idle_clock
        if clock is not None and not clock.begin():
            raise self.idle_stopped or SessionClosedError(f"TrainJob session {self.name} stopped")
        self._command_notes.note()  # the sidebar's idle time: when it started, when it ended
        try:
            yield
        finally:
            if clock is not None:
                clock.end()
            self._command_notes.note()

    def _stop_idle_clock(self) -> None:
        if self._idle_clock is not None:
            self._idle_clock.cancel()

    def _note_last_command(self, when: datetime) -> None:
        note_session(self, last_command=when)

    def _note_quietly(self, **notes: Any) -> None:
        """Best effort: a note the sidebar reads (``note_session``), never failing the caller."""
        try:
            note_session(self, **notes)
        except TrainJobError as exc:
            log.debug("could not note %s on TrainJob %s: %s", sorted(notes), self.name, exc)

    def _stop_for_idle(self) -> bool:
        """The idle clock fired: close the session, or leave it to its live detached run."""
        if self._closed:
            return False
        live = self._live_detached()
        clock = self._idle_clock
        try:
            if live is None:
                self._idle_deleting = True
                if clock is not None:
                    clock.decided()
                self.close(closed_by=IDLE_STOP_BY)  # noted only if it goes ahead
        except DetachedRunError as exc:
            live = exc.run
        except TrainJobError as exc:
            log.warning("idle stop of TrainJob %s failed: %s; trying again", self.name, exc)
            self._idle_deleting = False
            return False
        if live is not None:
            self._idle_deleting, self._idle_left = False, live
            if clock is not None:
                clock.decided()
            self.leave()
        error = self.idle_stopped
        callback = self._on_idle_stop
        if callback is not None and error is not None:
            try:
                callback(self, error)
            except Exception:
                log.warning("the idle-stop callback of %s failed", self.name, exc_info=True)
        return True

    # -- files and logs ---------------------------------------------------------------------
    def upload(
        self,
        local: str,
        remote: str,
        pods: TargetSpec = TRAINER,
        *,
        container: str | None = None,
        progress: TransferProgress | None = None,
        verify: bool = True,
        timeout: float | None = None,
        retries: int = DEFAULT_RETRIES,
        on_retry: OnRetry | None = None,
        cancel: threading.Event | None = None,
    ) -> TransferResult:
        """Copy a local file or directory to ``remote`` on the target pods (tar over exec).
        A stream that ends early goes on from where it ended, up to ``retries`` times per pod
        (``on_retry(line)`` hears each, else the log); nothing half-written is left in place.
        Ctrl-C, ``cancel.set()`` from another thread or ``close()`` stops it, removing what it
        staged: :class:`TransferInterruptedError`."""
        targets = pod_commands(self.pods(pods), container, self.container)
        with self._in_use(), self._transfer(cancel) as stop:
            return upload(
                self._exec,
                self.namespace,
                targets,
                local,
                remote,
                progress=progress,
                verify=verify,
                timeout=timeout,
                retries=retries,
                on_retry=on_retry,
                stop=stop,
            )

    def download(
        self,
        remote: str,
        local: str,
        pod: TargetSpec = TRAINER,
        *,
        container: str | None = None,
        progress: TransferProgress | None = None,
        verify: bool = True,
        timeout: float | None = None,
        retries: int = DEFAULT_RETRIES,
        on_retry: OnRetry | None = None,
        cancel: threading.Event | None = None,
    ) -> TransferResult:
        """Copy ``remote`` (file or directory) from one pod to ``local``, unpacked safely. A
        stream that ends early goes on from where it ended, up to ``retries`` times
        (``on_retry(line)`` hears each, else the log); nothing is written to ``local`` until the
        whole copy is verified. Ctrl-C, ``cancel.set()`` or ``close()`` stops it:
        :class:`TransferInterruptedError`, nothing written."""
        refs = self.pods(pod)
        if len(refs) != 1:
            names = ", ".join(r.name for r in refs)
            raise InvalidInputError(
                f"download needs exactly one pod, but {pod!r} names {len(refs)} ({names}); "
                "pick one, e.g. node-0"
            )
        (target,) = pod_commands(refs, container, self.container)
        with self._in_use(), self._transfer(cancel) as stop:
            return download(
                self._exec,
                self.namespace,
                target,
                remote,
                local,
                progress=progress,
                verify=verify,
                timeout=timeout,
                retries=retries,
                on_retry=on_retry,
                stop=stop,
            )

    @contextlib.contextmanager
    def _transfer(self, cancel: threading.Event | None) -> Iterator[Stop]:
        """A running upload or download, which :meth:`close` stops (and waits for)."""
        stop = Stop(cancel)
        with self._lock:
            self._transfers.add(stop)
        try:
            yield stop
        finally:
            with self._lock:
                self._transfers.discard(stop)
            stop.ended.set()

    def _stop_transfers(self, why: str, wait: float = STOP_WAIT) -> None:
        """Stop the running transfers and wait (at most ``wait`` s) until each has removed
        what it staged, in the pods too (before they go)."""
        with self._lock:
            stops = list(self._transfers)
        for stop in stops:
            stop.set(why, "connect a new session to copy it")
        deadline = time.monotonic() + wait
        for stop in stops:
            if not stop.ended.wait(max(0.0, deadline - time.monotonic())):
                log.warning("a transfer of TrainJob %s did not stop within %gs", self.name, wait)
                return

    def write_file(
        self,
        path: str,
        text: str | bytes,
        pods: TargetSpec = TRAINER,
        *,
        container: str | None = None,
        timeout: float | None = None,
    ) -> TransferResult:
        """Write ``text`` (UTF-8) or bytes to ``path`` on the target pods (parent directories
        created)."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        targets = pod_commands(self.pods(pods), container, self.container)
        with self._in_use():
            return write_file(self._exec, self.namespace, targets, path, data, timeout=timeout)

    def logs(
        self,
        pod: TargetSpec = None,
        tail: int | None = None,
        follow: bool = False,
        container: str | None = None,
        on_output: OnLog | None = None,
        *,
        timestamps: bool = False,
        stop: threading.Event | None = None,
    ) -> str | PodLogs:
        """Pod logs: str for one pod (``trainer``, ``node-2``, a pod name), :class:`PodLogs`
        (pod -> text, ``.errors``) for ``all``/roles/lists/PodRefs.

        ``on_output(pod, text)`` gets followed output as it arrives; ``stop=threading.Event()``
        ends a follow from another thread.
        """
        refs = self.pods(pod)
        targets = pod_commands(refs, container, self.container)
        kw: dict[str, Any] = {
            "tail": tail,
            "follow": follow,
            "timestamps": timestamps,
            "on_output": on_output,
            "stop": stop,
        }
        if not is_resolved(pod) and names_one_pod(pod, refs) and len(targets) == 1:
            return read_log(self.api_client, self.namespace, targets[0], **kw)
        return read_logs(self.api_client, self.namespace, targets, **kw)

    # -- status -----------------------------------------------------------------------------
    def status(self) -> JobStatus:
        """A snapshot of the TrainJob and its pods."""
        try:
            trainjob: dict[str, Any] | None = fetch_trainjob(
                self.api_client, self.namespace, self.name
            )
        except NotFoundError:
            trainjob = None
        pods = self._list_pods()
        status = job_status(
            self.name,
            self.namespace,
            self.runtime,
            trainjob,
            pods,
            self.target,
            self.started_at,
            deleted=trainjob is None,
        )
        if self.queue and self.job_uid and trainjob is not None:
            qs = queue_status(
                self.api_client,
                self.namespace,
                self.job_uid,
                self.queue,
                Visibility(self.api_client),
            )
            status = with_queue(status, qs)
        if self._disruption:
            status = dataclasses.replace(status, disruption=self._disruption)
        return dataclasses.replace(status, protocols=self.protocols)

    @property
    def protocols(self) -> Protocols:
        """What this session's streams negotiated: its latest exec's WebSocket subprotocol and
        each open forward's mode and subprotocol (the server's fallbacks included)."""
        forwards = tuple((f.port, f.mode, f.protocol) for f in self.forwards)
        return Protocols(exec=self._exec.protocol, forwards=forwards)

    def gpus(self) -> list[PodGpus]:
        """Each GPU's utilisation and memory (``nvidia-smi``) in the job's running pods that
        request GPUs, one :class:`PodGpus` per pod (``state``: ``ok``, ``busy``, ``absent``,
        ``no-gpu``, ``error``). One exec per pod at most every 10 s (a newer call gets the kept
        answer), never in a pod where a command runs: one of this session's, or any of ours
        the pod's own check finds; while one runs in the trainer pod, no pod is sampled.
        Sampling does not count as use for the idle stop, and never keeps the job alive."""
        self._check_open()
        if self._gpu_sampler is None:
            self._gpu_sampler = GpuSampler(self._exec)
        busy = {command.pod for _key, command in self._inflight.select()}
        return self._gpu_sampler.sample(self.namespace, self._list_pods(), busy=busy, lead=self.pod)

    def wait_ready(self, timeout: float = 600.0, on_status: OnStatus | None = None) -> str:
        """Wait until the job is (re)admitted and its trainer pod runs; return the pod name.

        After a SessionPreemptedError this picks up the new trainer pod and makes ``execute``
        work again. Raises QueuedTimeoutError / ConnectTimeoutError on timeout.
        """
        self._check_open()
        wait_timeout = validate_timeout(timeout)
        if wait_timeout is None:
            raise InvalidInputError("timeout must be a positive number of seconds, got None")
        pod = wait_ready(
            self.api_client,
            self.namespace,
            self.name,
            self.target,
            runtime=self.runtime,
            timeout=wait_timeout,
            started=time.monotonic(),
            on_status=on_status,
            queue=self.queue,
            job_uid=self.job_uid,
        )
        with self._lock:
            self._pod = pod_name(pod)
            self.container = _container_of(pod)
        if self.queue and self.job_uid:
            self._evictions = eviction_baseline(self.api_client, self.namespace, self.job_uid)
        self._preempted = None
        return self._pod

    # -- port forwarding --------------------------------------------------------------------
    def forward(
        self,
        port: int,
        *,
        pod: str | None = None,
        local_port: int | None = None,
        address: str = "127.0.0.1",
        on_error: OnProblem | None = None,
        via: str = "auto",
    ) -> Forward:
        """Forward ``local_port`` (default: a free one) on this host to ``port`` of the trainer
        pod (or the one pod ``pod`` names: ``node-1``, a pod name) through pods/portforward.

        Returns a :class:`~.forward.Forward` (``.url``, ``.local_port``, ``.close()``; a
        context manager). New connections follow a replaced pod; a connection the pod refuses
        is reset and reported once through ``on_error``. Forwards end when the session closes.
        ``via="websocket"`` skips the tunnel (one SPDY-carrying WebSocket for every connection,
        where the API server serves it: ``.mode`` says which) for a WebSocket per connection.
        """
        self._check_open()
        remote_port = validate_port(port, "port")
        local = 0 if local_port is None else validate_port(local_port, "local_port", zero=True)
        listen_on = validate_address(address)
        fwd = Forward(
            self._exec,
            self.namespace,
            remote_port,
            self._pod_choice(pod),
            local_port=local,
            address=listen_on,
            on_error=on_error,
            on_close=self._forward_closed,
            via=via,
        )
        fwd.start()
        with self._lock:
            self._forwards.append(fwd)
        return fwd

    @property
    def forwards(self) -> list[Forward]:
        """The open forwards of this session, oldest first."""
        with self._lock:
            return list(self._forwards)

    def _forward_closed(self, fwd: Forward) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._forwards.remove(fwd)

    def _pod_choice(self, target: str | None) -> PodChoice:
        """How a forward finds its pod now, and after that pod went away."""
        if target in (None, "", TRAINER):
            ref = PodRef(self.pod, TRAINER, 0, "Running", self.container)
            return PodChoice(
                current=lambda: self.pod,
                replacement=lambda _failed: self._reresolve(ref, wait=True),
            )
        refs = self.pods(target)
        if len(refs) != 1 or not names_one_pod(target, refs):
            many = f"{len(refs)} pods" if len(refs) != 1 else "a group of pods"
            raise InvalidInputError(
                f"a forward goes to one pod; {target!r} names {many}: give one, such as "
                "node-1 or a pod name"
            )
        chosen = {"ref": refs[0]}

        def replacement(_failed: str) -> str:
            name = self._reresolve(chosen["ref"])
            chosen["ref"] = dataclasses.replace(chosen["ref"], name=name)
            return name

        return PodChoice(current=lambda: chosen["ref"].name, replacement=replacement)

    def _close_forwards(self) -> None:
        for fwd in self.forwards:
            fwd.close(reason="session closed")

    # -- detached runs ----------------------------------------------------------------------
    def detach(self, command: str | Sequence[str], *, container: str | None = None) -> DetachedRun:
        """Start ``command`` (a str runs with ``sh -c``) as a run that belongs to the TrainJob:
        it returns at once, and the run outlives this process. The keep-alive watchdog holds
        the job while the run lives and ends it with the run's exit code once it ended. It runs
        in every pod running the keep-alive (torch: every node pod; MPI: the launcher). Its
        output goes to the container's log (``logs()``, ``kubectl logs``) and to a file in the
        pod. One at a time: raises :class:`DetachedRunError` while one lives."""
        self._check_open()
        argv, _, _ = validate_exec(command, None, None)
        text = command if isinstance(command, str) else " ".join(argv)
        with self._in_use():
            self._outlive_the_notebook_pod()
            run = start_detached(
                self._exec,
                self.api_client,
                self.namespace,
                self.name,
                argv,
                text,
                replicated_job=getattr(self.target, "replicated_job", None),
                trainer_pod=self.pod,
                container=container or self.container,
            )
        self._detached = DetachedState(
            self.name, run.run, text, run.started, run.pods[0], dict.fromkeys(run.pods)
        )
        return run

    def _outlive_the_notebook_pod(self) -> None:
        """A job tied to the notebook's pod (``trainjob/notebook_pod.py``) is untied before a
        detached run starts: the run must outlive the pod. Without ``patch`` on trainjobs the
        run is refused, since the hub's "Stop My Server" would delete it."""
        job = fetch_trainjob(self.api_client, self.namespace, self.name)
        try:
            release_from_pod(self.api_client, job)
        except TrainJobError as exc:
            if exc.status != 403:
                raise
            owner = pod_owners(job)[0]["name"]
            raise DetachedRunError(
                f"TrainJob {self.name} is tied to this notebook's pod {owner} (deleted with it "
                f"when the server stops), and untying it for a detached run needs patch on "
                f"trainjobs in {self.namespace}: add it to your Role (docs/rbac.md), or run the "
                "cell without --detach"
            ) from None

    def detached(self, lines: int = 10) -> DetachedState | None:
        """The newest detached run of the TrainJob (started here or by any kernel): command,
        start, exit code per pod once ended, and its last ``lines`` lines; None without one."""
        state = read_detached(
            self._exec,
            self.api_client,
            self.namespace,
            self.name,
            replicated_job=getattr(self.target, "replicated_job", None),
            trainer_pod=self.pod,
            container=self.container,
            known=self._detached,
            lines=lines,
        )
        if state is not None and state.ended_by == PODS_GONE:
            state = dataclasses.replace(state, ended_by=self._why_pods_gone())
        if state is not None:
            self._detached = state
        return state

    def _why_pods_gone(self) -> str:
        """What took a detached run's pods away: Kueue's eviction or preemption, the pod's
        disruption, else the job's state (what attach, the logs and the panel then say)."""
        try:
            st = self.status()
        except TrainJobError:
            return PODS_GONE
        evicted = st.queue.last_eviction if st.queue is not None else None
        if evicted:
            taken = st.queue.taken_away if st.queue is not None else "evicted"
            return f"Kueue {taken} TrainJob {self.name} ({evicted[0]}: {evicted[1]}); {PODS_GONE}"
        if st.disruption:
            return st.disruption
        why = f"TrainJob {st.state}" + (f": {st.message}" if st.message else "")
        return f"{PODS_GONE} ({why})"

    @property
    def detached_run(self) -> DetachedState | None:
        """The newest detached run as last read or started here (no I/O); ``detached()``
        reads it again."""
        return self._detached

    def _live_detached(self) -> DetachedState | None:
        """The detached run that closing would kill, None when none lives (one read)."""
        if self._detached is None:
            return None
        try:
            state = self.detached(lines=0)
        except TrainJobError:
            state = self._detached  # cannot tell: do not kill what may still run
        return state if state is not None and state.live else None

    def leave(self) -> None:
        """Stop sending heartbeats and close the forwards, but leave the TrainJob (and its
        detached run) alone: what kernel exit does to a job with a live detached run."""
        self._close_forwards()
        self._stop_heartbeat()
        self._stop_idle_clock()
        self._command_notes.stop()

    # -- closing ----------------------------------------------------------------------------
    def close(self, timeout: float = 180, *, force: bool = False, closed_by: str = "") -> None:
        """Delete the TrainJob and wait until its pods are gone (warn, not raise, on timeout).

        A live detached run is not killed by accident: without ``force`` this raises
        :class:`DetachedRunError` saying what it would kill (``leave()`` lets it run).
        ``closed_by``: what closes it ("kernel exit", "%trainjob_close"), noted on the TrainJob
        for the sidebar and the panels only once the close goes ahead (a refused close, or a
        deletion that fails, leaves no note)."""
        with self._close_lock:
            if self._closed:
                return
            live = None if force else self._live_detached()
            if live is not None:
                raise DetachedRunError(
                    f"{live.summary()}; closing would kill it: close(force=True) "
                    "(%trainjob_close --force) deletes TrainJob "
                    f"{self.name} and the run, or leave it: it ends the job when it ends",
                    run=live,
                )
            self._stop_transfers(f"TrainJob session {self.name} was closed")
            self._close_forwards()
            self._stop_heartbeat()
            self._stop_idle_clock()
            self._command_notes.stop()
            self._spill.close()  # results still held keep their spill files until collected
            deadline = time.monotonic() + timeout
            if closed_by:
                self._note_quietly(closed_by=closed_by)
            try:
                delete_trainjob(self.api_client, self.namespace, self.name)
            except TrainJobError:
                if closed_by:
                    self._note_quietly(closed_by="")  # not closing after all
                raise
            self._closed = True
            try:
                gone = wait_trainjob_gone(self.api_client, self.namespace, self.name, deadline)
                gone = gone and wait_pods_gone(self.api_client, self.namespace, self.name, deadline)
            except TrainJobError as exc:
                log.warning(
                    "TrainJob %s is being deleted but waiting for its pods failed: %s",
                    self.name,
                    exc,
                )
                return
            if not gone:
                log.warning(
                    "TrainJob %s in namespace %s is being deleted but its pods were still there "
                    "after %gs; check with `kubectl get pods -n %s -l %s`",
                    self.name,
                    self.namespace,
                    timeout,
                    self.namespace,
                    jobset_selector(self.name),
                )

    def __enter__(self) -> TrainJobSession:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        except DetachedRunError as err:
            log.warning("%s", err)
            self.leave()
