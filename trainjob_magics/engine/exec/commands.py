"""Stoppable commands: each shell command runs under the pid-file wrapper and is registered in
the session's :class:`~.inflight.InFlight`, so that an interrupt (Ctrl-C in the running thread,
or ``interrupt()`` from any other) or a timeout stops its whole remote process tree.

A KeyboardInterrupt in the thread running a command becomes :class:`CommandInterruptedError`
here; an interrupt from another thread (``session.interrupt()``, ``CommandRun.interrupt()``)
stops the command, which then ends with the killed process's exit status. Either way the
output so far is kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient

from ..errors import (
    CommandInterruptedError,
    ConnectionLostError,
    ExecTimeoutError,
    PodGoneError,
    TrainJobError,
)
from ..result import ExecResult, StopReport
from .client import LOST_HINT, ExecClient, OnOutput, StreamCutShortError
from .disruption import KILLED_EXIT_CODES, pod_disruption
from .inflight import InFlight, InFlightCommand
from .oom import PROBE_ARGV, oom_note, parse_probe
from .pool import PodPool
from .ranks import OnRankEvent, RankedStreams
from .scripts import new_exec_id, wants_wrapper, wrap
from .stop import stop_command, stop_summary
from .torchrun_demux import chain

STOP_WAIT = 30.0  # seconds to wait for the stoppers before reporting "did not answer"
# A real kubelet writes an evicted pod's status (Failed, Evicted, DisruptionTarget) after it
# killed the containers: a killed command reads its pod for this long before calling it
# undisturbed (seen on the real stack's node: an emptyDir over its sizeLimit)
DISRUPTION_SETTLE = 5.0


# what the stopper says when the wrapper had already ended (scripts.STOP)
ALREADY_ENDED = "nothing to stop: the command already ended"


def interrupted_message(pod: str, reports: list[StopReport], *, wrapped: bool = True) -> str:
    """One line saying what the interrupt did to the remote command."""
    if not wrapped:
        return (
            f"interrupted: stopped reading; the command (not run by a shell, so it has no pid "
            f"file) may still be running in pod {pod}"
        )
    return "interrupted: " + stop_summary(f"in pod {pod}", reports)


def timeout_message(pod: str, timeout: float | None, reports: list[StopReport]) -> str:
    """One line for a timeout that stopped (or tried to stop) the remote command."""
    limit = f"{timeout:g}s" if timeout is not None else "its timeout"
    return f"the command did not finish within {limit}: " + stop_summary(f"in pod {pod}", reports)


def pod_gone_message(what: str, ended: str) -> str:
    """One line for a command whose pod went away: what happened, then how it ended."""
    return f"{what} while the command ran ({ended}); the output so far is kept"


def output_cut_message(pod: str) -> str:
    """A command that ended while the end of its output was lost on the way (the stopper
    found nothing left to stop)."""
    return (
        f"the command in pod {pod} ended, but the end of its output never arrived: the server "
        "closed the stream early and still reported success (kubernetes/kubernetes#124571; "
        "a kubelet restart does the same), so its exit code is unknown and its output may be "
        "incomplete; what arrived is in .partial: run it again, or have it write its output "
        "to a file in the pod and read that"
    )


def lost_message(message: str, pod: str, reports: list[StopReport]) -> str:
    """The lost-connection line, saying what stopping the remote command did."""
    head = message.split("; the command may still be running")[0]
    if reports and all(r.stopped for r in reports):
        return f"{head}; {stop_summary(f'in pod {pod}', reports)}"
    why = "; ".join(r.message.split(";")[0] for r in reports if not r.stopped)
    return (
        f"{head}; the command may still be running in pod {pod} (stopping it failed: "
        f"{why or 'no stopper ran'}): stop it with session.interrupt(), or {LOST_HINT}"
    )


def _untagged(ranked: RankedStreams | None, exc: BaseException) -> Any:
    """The error's partial result with the untagged streams and ranks (when they were read)."""
    partial = getattr(exc, "partial", None)
    if ranked is not None and (partial is not None or isinstance(exc, TrainJobError)):
        partial = ranked.finish(partial)
        exc.partial = partial  # type: ignore[attr-defined]
    return partial


class CommandGroup:
    """The commands of one ``execute`` (one per pod): :meth:`interrupt` stops those running and
    keeps the group from starting more; :meth:`output_so_far` is what each pod sent so far."""

    def __init__(self, runner: CommandRunner) -> None:
        self._runner = runner
        self._lock = threading.Lock()
        self._commands: dict[str, InFlightCommand] = {}  # key -> command, in start order
        self.reports: list[StopReport] | None = None  # set once interrupted

    def joined(self, key: str, command: InFlightCommand) -> bool:
        """Record a command that starts; False when the group was interrupted already."""
        with self._lock:
            if self.reports is not None:
                return False
            self._commands[key] = command
            return True

    def interrupt(self) -> list[StopReport]:
        """Stop every command of the group still running; no new ones start."""
        with self._lock:
            keys = list(self._commands) if self.reports is None else []
            self.reports = self.reports if self.reports is not None else []
        reports = self._runner.interrupt(only=keys) if keys else []
        with self._lock:
            self.reports.extend(reports)
            return list(self.reports)

    def all_wrapped(self) -> bool:
        """Whether every command of the group can be stopped (runs under the wrapper)."""
        with self._lock:
            return all(c.exec_id for c in self._commands.values())

    def any_stopped(self) -> bool:
        return any(r.stopped for r in self.reports or [])

    def output_so_far(self) -> dict[str, ExecResult]:
        """pod -> its result, or the output it has sent so far while it still runs."""
        with self._lock:
            commands = list(self._commands.values())
        return {c.pod: c.output_so_far() for c in commands}


@dataclass
class Begun:
    """A registered command: its pod, pid-file id, registry key and the argv that runs."""

    pod: str
    exec_id: str | None
    key: str
    command: InFlightCommand
    argv: list[str]

    def watch(self, snapshot: Callable[[], ExecResult]) -> None:
        """Where :meth:`InFlightCommand.output_so_far` reads while the command runs."""
        self.command.snapshot = snapshot


class CommandRunner:
    """Runs a session's commands through one :class:`ExecClient`, registering each in the
    session's :class:`InFlight` (which the session owns and hands in)."""

    def __init__(
        self,
        client: ExecClient,
        namespace: str,
        inflight: InFlight,
        api_client: ApiClient | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.inflight = inflight
        self.api_client = api_client  # reads the pod when a command ends killed or cut
        self._oom_kills: dict[tuple[str, str | None], int] = {}  # (pod, container) -> seen

    def _out_of_memory(self, pod: str, container: str | None) -> str:
        """The note for a command killed by the container's OOM killer ('' when it was not, or
        the pod's cgroup cannot be read)."""
        try:
            probe = self.client.run(
                self.namespace, pod, PROBE_ARGV, container=container, timeout=20
            )
        except TrainJobError:
            return ""
        kills, limit = parse_probe(probe.stdout)
        key = (pod, container)
        note = oom_note(self._oom_kills.get(key, 0), kills, limit)
        if kills is not None:
            self._oom_kills[key] = kills
        return note

    def _pod_gone(
        self, pod: str, partial: ExecResult | None, ended: str, settle: float = 0.0
    ) -> PodGoneError | None:
        """The error for a command whose pod was deleted, evicted or preempted, or None (after
        reading the pod again for up to ``settle`` seconds)."""
        if self.api_client is None:
            return None
        deadline = time.monotonic() + settle
        while True:
            found = pod_disruption(self.api_client, self.namespace, pod)
            if found is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        if found is None:
            return None
        return PodGoneError(
            pod_gone_message(found.describe(), ended), partial=partial, pod=pod, cause=found.cause
        )

    def begin(
        self, pod: str, argv: Sequence[str], container: str | None, group: CommandGroup | None
    ) -> Begun:
        """Register a command about to start (raises :class:`CommandInterruptedError` when its
        group was interrupted already); a shell command gets the pid-file wrapper."""
        exec_id = new_exec_id() if wants_wrapper(argv) else None
        command = InFlightCommand(pod, container, exec_id)
        key = self.inflight.add(command)
        if group is not None and not group.joined(key, command):
            self.inflight.remove(key)
            raise CommandInterruptedError(
                f"interrupted: the command never started in {pod}",
                partial=ExecResult("", "", None, 0.0, pod=pod),
                reports=[],
            )
        return Begun(pod, exec_id, key, command, wrap(exec_id, argv) if exec_id else list(argv))

    def release(self, begun: Begun) -> None:
        """The command ended (or never ran): forget it."""
        self.inflight.remove(begun.key)

    def succeeded(self, begun: Begun, result: ExecResult) -> ExecResult:
        """The command ended with an exit status; a killed one whose pod went away raises
        :class:`PodGoneError`."""
        self.release(begun)
        begun.command.result = result
        if result.returncode in KILLED_EXIT_CODES:
            ended = f"it was killed, exit code {result.returncode}"
            gone = self._pod_gone(begun.pod, result, ended)
            if gone is not None:
                raise gone
            if result.returncode == 137:
                result.note = self._out_of_memory(begun.pod, begun.command.container)
            if not result.note and not begun.command.stop_requested:
                gone = self._pod_gone(begun.pod, result, ended, settle=DISRUPTION_SETTLE)
                if gone is not None:
                    raise gone
        return result

    def failed(
        self, begun: Begun, exc: ExecTimeoutError | ConnectionLostError, timeout: float | None
    ) -> TrainJobError:
        """The error to raise for a command that timed out or lost its connection, after
        stopping it (a stop that failed leaves it registered for :meth:`interrupt`)."""
        pod, key = begun.pod, begun.key
        keep_registered = False
        try:
            if isinstance(exc, ExecTimeoutError):
                if not begun.exec_id:
                    return exc
                reports = self.interrupt(only=[key])
                return ExecTimeoutError(
                    timeout_message(pod, timeout, reports), partial=exc.partial, reports=reports
                )
            gone = self._pod_gone(pod, exc.partial, "the connection dropped")
            if gone is not None:
                return gone
            if not begun.exec_id:
                return exc
            # Its output is lost from here on: stop it (waiting for a restarting API server,
            # within the retry window); if that fails it stays registered for interrupt().
            reports = self.interrupt(only=[key])
            if not all(r.stopped for r in reports):
                # a pod that went away meanwhile (its node's machine died with the stream, and
                # its Node was deleted after: the stopper found no node) is named as such
                gone = self._pod_gone(pod, exc.partial, "the connection dropped")
                if gone is not None:
                    return gone
            keep_registered = not all(r.stopped for r in reports)
            if (
                isinstance(exc, StreamCutShortError)
                and reports
                and all(ALREADY_ENDED in r.message for r in reports)
            ):
                message = output_cut_message(pod)
            else:
                message = lost_message(str(exc), pod, reports)
            return ConnectionLostError(message, partial=exc.partial, reports=reports)
        finally:
            if not keep_registered:
                self.release(begun)

    def run(
        self,
        pod: str,
        argv: Sequence[str],
        *,
        container: str | None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        on_output: OnOutput | None = None,
        max_memory_output: int | None = None,
        group: CommandGroup | None = None,
        ranks_token: str | None = None,
        on_ranks: OnRankEvent | None = None,
    ) -> ExecResult:
        """Run ``argv`` in ``pod``; a shell command runs under the pid-file wrapper so that its
        whole process tree can be stopped.

        ``ranks_token``: ``argv`` runs under the per-rank prelude with that marker token
        (:mod:`.ranks`): the result's streams are untagged, its ``.mpi`` holds each rank's
        output, and ``on_ranks`` gets the tagged runs' text as it comes.

        An interrupt (KeyboardInterrupt here, or :meth:`interrupt` from another thread) stops it
        and raises :class:`CommandInterruptedError`; a timeout stops it before raising
        :class:`ExecTimeoutError`; a dropped connection leaves it registered so that
        :meth:`interrupt` can still stop it. Every error keeps the output so far in
        ``.partial``."""
        begun = self.begin(pod, argv, container, group)
        ranked = None
        run_kwargs: dict[str, Any] = {"on_output": on_output, "on_start": begun.watch}
        if ranks_token is not None:
            limit = (
                self.client.max_memory_output if max_memory_output is None else max_memory_output
            )
            ranked = RankedStreams(
                ranks_token,
                pod=pod,
                limit=limit,
                spill_dir=self.client.spill_dir,
                on_output=on_output,
                on_ranks=on_ranks,
                chain=chain(ranks_token, pod),  # torchrun's runs (exec/torchrun_demux.py)
            )
            streams = ranked
            run_kwargs = {
                "stdout_sink": ranked.sink(1),
                "stderr_sink": ranked.sink(2),
                "on_start": lambda snap: begun.watch(lambda: streams.snapshot(snap())),
            }
        try:
            result = self.client.run(
                self.namespace,
                pod,
                begun.argv,
                container=container,
                stdin=stdin,
                timeout=timeout,
                max_memory_output=max_memory_output,
                **run_kwargs,
            )
        except KeyboardInterrupt as exc:
            partial = _untagged(ranked, exc)
            try:
                reports = self.interrupt(only=[begun.key]) if begun.exec_id else []
            finally:
                self.release(begun)
            raise CommandInterruptedError(
                interrupted_message(pod, reports, wrapped=begun.exec_id is not None),
                partial=partial,
                reports=reports,
            ) from None
        except (ExecTimeoutError, ConnectionLostError) as exc:
            _untagged(ranked, exc)
            error = self.failed(begun, exc, timeout)
            if error is exc:
                raise
            raise error from None
        except BaseException as exc:
            _untagged(ranked, exc)
            self.release(begun)
            raise
        if ranked is not None:
            result = ranked.finish(result)
        return self.succeeded(begun, result)

    def interrupt(self, only: Collection[str] | None = None) -> list[StopReport]:
        """Stop the running commands (all, or those with the keys ``only``), each with SIGINT,
        then SIGTERM, then SIGKILL; returns one report per stoppable command."""
        targets = [(k, c) for k, c in self.inflight.select(only) if c.exec_id]
        reports: dict[str, StopReport] = {}

        def stop(item: tuple[str, InFlightCommand]) -> None:
            key, command = item
            assert command.exec_id is not None
            command.stop_requested = True
            report = stop_command(
                self.client, self.namespace, command.pod, command.container, command.exec_id
            )
            reports[key] = report
            if report.stopped:
                self.inflight.remove(key)

        PodPool(stop, targets, name="trainjob-stop").start().join(STOP_WAIT)
        return [
            reports.get(k)
            or StopReport(c.pod, c.exec_id or "", False, "the stopper did not answer in time")
            for k, c in targets
        ]


__all__ = [
    "Begun",
    "CommandGroup",
    "CommandRunner",
    "interrupted_message",
    "pod_gone_message",
    "timeout_message",
]
