"""A command running in the background, which the caller waits for or interrupts (the engine's
answer to ipyparallel's ``AsyncResult``): ``session.start(...)`` returns one.

The front end keeps its own thread free for the display and for Ctrl-C: it waits with
:meth:`CommandRun.result` and, on Ctrl-C, calls :meth:`CommandRun.interrupt`, which stops the
remote commands, waits (at most :data:`~.stop.INTERRUPT_WAIT`) for their last output, and
returns the :class:`CommandInterruptedError` to raise, with the output so far in ``.partial``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from ..errors import CommandInterruptedError
from ..result import ExecResult, MultiExecResult, PodRef
from .commands import CommandGroup, interrupted_message
from .fanout import where
from .stop import INTERRUPT_WAIT, stop_summary

WAIT_SLICE = 0.2  # seconds: result() wakes this often, so Ctrl-C reaches a waiting caller


class CommandRun:
    """One ``execute`` in a worker thread. ``pods`` are the pods it runs on (resolved once,
    before it starts); ``multi`` says whether it returns a :class:`MultiExecResult`."""

    def __init__(
        self,
        work: Callable[[CommandGroup], Any],
        group: CommandGroup,
        pods: list[PodRef],
        *,
        multi: bool,
    ) -> None:
        self.pods = pods
        self.multi = multi
        self._group = group
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._work, args=(work,), daemon=True, name="trainjob-run"
        )

    def start(self) -> CommandRun:
        self._thread.start()
        return self

    def _work(self, work: Callable[[CommandGroup], Any]) -> None:
        try:
            self._value = work(self._group)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the run ended (at most ``timeout`` s); True when it has."""
        return self._done.wait(timeout)

    def result(self) -> ExecResult | MultiExecResult:
        """Wait for the run and return its result, or raise its error (Ctrl-C interrupts the
        wait, not the run: call :meth:`interrupt` then)."""
        while not self._done.wait(WAIT_SLICE):
            pass
        if self._error is not None:
            raise self._error
        return self._value

    def interrupt(self) -> CommandInterruptedError:
        """Stop the remote commands; the error to raise, with the output so far."""
        reports = self._group.interrupt()
        if self._group.any_stopped():
            with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting
                self._done.wait(INTERRUPT_WAIT)
        if self.done and isinstance(self._error, CommandInterruptedError):
            return self._error
        if self.done and self._error is not None:
            partial = getattr(self._error, "partial", None)
        elif self.done:
            partial = self._value
        else:
            partial = self._output_so_far()
        if self.multi:
            message = "interrupted: " + stop_summary(where(len(self.pods)), reports)
        else:
            pod = getattr(partial, "pod", "") or (self.pods[0].name if self.pods else "")
            message = interrupted_message(pod, reports, wrapped=self._group.all_wrapped())
        return CommandInterruptedError(message, partial=partial, reports=reports)

    def _output_so_far(self) -> ExecResult | MultiExecResult:
        live = self._group.output_so_far()
        if self.multi:
            return MultiExecResult(
                results={r.name: live.get(r.name) or ExecResult(pod=r.name) for r in self.pods},
                refs={r.name: r for r in self.pods},
            )
        if live:
            return next(reversed(live.values()))  # the latest attempt (after a re-resolve)
        return ExecResult(pod=self.pods[0].name if self.pods else "")


__all__ = ["CommandRun"]
