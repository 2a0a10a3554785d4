"""A fan-out's commands on the :class:`~.reactor.Reactor`: registered as the usual path does
(:class:`~.commands.CommandRunner`), run on one thread, and finished like the usual path.

A command that ended with an exit status is recorded on the reactor's thread. One that needs
more (a timeout or a lost connection: stop it; a killed one: was its pod taken away?) is
finished on a :class:`~.pool.WorkQueue` worker, as is a pod the reactor handed back
(:class:`~.reactor.Fallback`: nothing ran), which runs the usual way from the start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import CommandInterruptedError, ConnectionLostError, ExecTimeoutError
from ..result import ExecResult, PodRef
from .commands import Begun, CommandGroup, CommandRunner
from .disruption import KILLED_EXIT_CODES
from .pool import MAX_PARALLEL, WorkQueue
from .reactor import DirectTarget, ExecJob, Fallback, Reactor, direct_target
from .streams import OnOutput

Record = Callable[[str, "ExecResult | None", "BaseException | None"], None]


@dataclass(frozen=True)
class Multiplexed:
    """What every pod of a fan-out runs (the same command), and in which container."""

    runner: CommandRunner
    argv: list[str]
    container_of: Callable[[PodRef], str | None]
    stdin: bytes | None = None
    timeout: float | None = None
    max_memory_output: int | None = None

    def target(self) -> DirectTarget | None:
        """Where the reactor connects; None when only the usual path can (a proxy)."""
        return direct_target(self.runner.client)


def _killed(result: ExecResult) -> bool:
    return result.returncode in KILLED_EXIT_CODES


class MultiplexedRun:
    """The fan-out of one command on the reactor; :meth:`join` waits like a pod pool's."""

    def __init__(
        self,
        spec: Multiplexed,
        target: DirectTarget,
        refs: Sequence[PodRef],
        *,
        group: CommandGroup,
        output_of: Callable[[str], OnOutput | None],
        usual: Callable[[PodRef], None],
        record: Record,
        max_parallel: int = MAX_PARALLEL,
    ) -> None:
        self._spec = spec
        self._usual = usual
        self._record = record
        self._left = len(refs)
        self._lock = threading.Lock()
        self._all_done = threading.Event()
        self._workers = WorkQueue(max_parallel=max_parallel, name="trainjob-exec")
        runner = spec.runner
        jobs: list[ExecJob] = []
        for ref in refs:
            container = spec.container_of(ref)
            try:
                begun = runner.begin(ref.name, spec.argv, container, group)
            except CommandInterruptedError as exc:
                self._ended(ref.name, None, exc)
                continue
            jobs.append(
                ExecJob(
                    runner.namespace,
                    ref.name,
                    begun.argv,
                    done=self._on_done(ref, begun),
                    container=container,
                    stdin=spec.stdin,
                    timeout=spec.timeout,
                    on_output=output_of(ref.name),
                    max_memory_output=spec.max_memory_output,
                    on_start=begun.watch,
                )
            )
        if not refs:
            self._all_done.set()
        self._reactor = Reactor(runner.client, target, jobs)

    def start(self) -> MultiplexedRun:
        self._reactor.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every pod is done (at most ``timeout`` s); True when all are."""
        return self._all_done.wait(timeout)

    def _ended(self, pod: str, result: ExecResult | None, error: BaseException | None) -> None:
        self._record(pod, result, error)
        self._count_down()

    def _count_down(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left == 0:
                self._all_done.set()

    def _on_done(
        self, ref: PodRef, begun: Begun
    ) -> Callable[[ExecResult | None, BaseException | None], None]:
        def done(result: ExecResult | None, error: BaseException | None) -> None:
            runner = self._spec.runner
            if isinstance(error, Fallback):  # nothing ran: the usual way, from the start
                runner.release(begun)
                self._workers.submit(lambda: self._run_usual(ref))
            elif (
                error is None and result is not None and result.returncode not in KILLED_EXIT_CODES
            ):
                self._ended(ref.name, runner.succeeded(begun, result), None)
            else:
                self._workers.submit(lambda: self._finish(ref, begun, result, error))

        return done

    def _run_usual(self, ref: PodRef) -> None:
        try:
            self._usual(ref)  # records the pod itself
        finally:
            self._count_down()

    def _finish(
        self, ref: PodRef, begun: Begun, result: ExecResult | None, error: BaseException | None
    ) -> None:
        runner = self._spec.runner
        try:
            if error is None and result is not None:
                self._ended(ref.name, runner.succeeded(begun, result), None)
                return
            if isinstance(error, (ExecTimeoutError, ConnectionLostError)):
                error = runner.failed(begun, error, self._spec.timeout)
            else:
                runner.release(begun)
        except Exception as exc:  # e.g. PodGoneError for a killed command
            error = exc
        self._ended(ref.name, None, error)


__all__ = ["Multiplexed", "MultiplexedRun"]
