"""One Python request (a cell, a push, a pull) on one or more pods, in the background.

The cell is one client exec per pod through the session's ``start`` (so fan-out, output
streaming, partial output and the in-flight registry are the shell cells'). Before it, agents
not known yet are booted; a pod whose agent is gone is booted and run again, with a note.

:meth:`PythonRun.interrupt` sends SIGINT to the agents (KeyboardInterrupt in the code, the
state stays); code that does not stop within :data:`KILL_AFTER` seconds, or a second Ctrl-C,
gets its interpreter killed (the state is lost). A timeout does the same.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import (
    CommandInterruptedError,
    ConnectionLostError,
    ExecTimeoutError,
    TrainJobError,
)
from ..exec.fanout import OnPodOutput
from ..exec.runs import CommandRun
from ..exec.stop import INTERRUPT_WAIT
from ..result import ExecResult, MultiExecResult
from .interpreters import Interpreters, Target, is_missing_python, missing_python
from .results import (
    MultiPythonResult,
    Outcome,
    PythonResult,
    RemoteError,
    StdoutFilter,
    python_result,
    read_outcome,
)
from .scripts import cell_argv, encode_fast_request, encode_request, fast_cell_argv

KILL_AFTER = 3.0  # seconds the code gets to stop after KeyboardInterrupt before it is killed
WAIT_SLICE = 0.2
RETRY = ("no-agent", "fallback")  # statuses after which the request runs again
RESIGNAL = 1.0  # seconds between two SIGINTs to code that has not stopped yet

Start = Callable[..., CommandRun]  # the session's start(argv, stdin=, pods=, ...)
OnPythonDone = Callable[[str, PythonResult, "BaseException | None"], None]


def new_nonce() -> str:
    """Marks the result frame on a client's stdout; user output cannot guess it."""
    return f"\x1etrainjob-magics-{secrets.token_hex(12)}\x1e"


class PythonRun:
    """A Python request running in a worker thread: ``.pods``, ``.multi``, :meth:`result`,
    :meth:`interrupt` (the error to raise, with the output so far in ``.partial``)."""

    def __init__(
        self,
        interpreters: Interpreters,
        start: Start,
        targets: Sequence[Target],
        request: dict[str, Any],
        *,
        multi: bool,
        container: str | None = None,
        on_output: OnPodOutput | None = None,
        on_done: OnPythonDone | None = None,
        timeout: float | None = None,
    ) -> None:
        self.targets = list(targets)
        self.pods = [t.ref for t in self.targets]
        self.multi = multi
        self.timeout = timeout
        self._container = container
        self._interp = interpreters
        self._start = start
        self._request = request
        self._on_output = on_output
        self._on_done = on_done
        self._lock = threading.Lock()
        self._run: CommandRun | None = None
        self._finished: dict[str, PythonResult] = {}
        self._notes: dict[str, list[str]] = {t.pod: [] for t in self.targets}
        self._stopping = False
        self._stop_error: TrainJobError | None = None
        self._killed: list[str] = []
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._work, daemon=True, name="trainjob-python")

    def start(self) -> PythonRun:
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    # -- the work ------------------------------------------------------------------------
    def _work(self) -> None:
        try:
            self._value = self._execute()
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc
        finally:
            self._done.set()

    def _execute(self) -> PythonResult | MultiPythonResult:
        fresh = [t for t in self.targets if self._interp.known(t) is None]
        self._note(self._interp.boot(fresh))
        if self._stopping:
            raise CommandInterruptedError(
                "interrupted before the Python code started", partial=self._partial()
            )
        outcomes, errors = self._cell(self.targets)
        for _attempt in range(2):  # a gone agent is started again; no fast path: the other client
            again = [t for t in self.targets if outcomes[t.pod][1].status in RETRY]
            if not again or self._stopping:
                break
            for target in again:
                if outcomes[target.pod][1].status == "fallback":
                    self._interp.slow.add(target.pod)
                else:
                    self._interp.forget(target)
            self._note(self._interp.boot([t for t in again if self._interp.known(t) is None]))
            more, more_errors = self._cell(again)
            outcomes.update(more)
            errors.update(more_errors)
        return self._assemble(outcomes, errors)

    def _note(self, notes: dict[str, str]) -> None:
        for pod, note in notes.items():
            if note:
                self._notes[pod].append(note)

    def _cell(
        self, targets: list[Target]
    ) -> tuple[dict[str, tuple[ExecResult, Outcome]], dict[str, BaseException]]:
        """One client exec per target; pod -> (exec result, outcome), pod -> exec error."""
        nonce = new_nonce()
        filters = {t.pod: StdoutFilter(nonce) for t in targets}
        by_pod = {t.pod: t for t in targets}

        def on_output(pod: str, stream: str, text: str) -> None:
            if stream == "stdout" and pod in filters:
                text = filters[pod].feed(text)
            if text and self._on_output is not None:
                self._on_output(pod, stream, text)

        def on_done(pod: str, result: ExecResult, error: BaseException | None) -> None:
            target = by_pod.get(pod)
            if target is None:
                return
            outcome = read_outcome(result, nonce)
            if outcome.status in RETRY and error is None and not self._stopping:
                return  # booted and run again
            self._finish(target, result, outcome, error)

        target0 = targets[0]
        stdin = encode_fast_request(nonce, self._request)
        if stdin is None or any(t.pod in self._interp.slow for t in targets):
            argv, stdin = (
                cell_argv(target0.python, target0.agent),
                encode_request(nonce, self._request),
            )
        else:
            argv = fast_cell_argv(target0.agent)
        run = self._start(
            argv,
            stdin=stdin,
            pods=[t.ref for t in targets] if self.multi else None,
            container=self._container,
            on_output=on_output,
            on_done=on_done if self.multi else None,
        )
        with self._lock:
            self._run = run
        outcomes: dict[str, tuple[ExecResult, Outcome]] = {}
        errors: dict[str, BaseException] = {}
        try:
            value = run.result()
        except TrainJobError as exc:
            if self.multi or not isinstance(exc.partial, ExecResult):
                raise
            self._finish(target0, exc.partial, read_outcome(exc.partial, nonce), exc)
            raise self._translated(exc, target0) from None
        results = value.results if isinstance(value, MultiExecResult) else {value.pod: value}
        if isinstance(value, MultiExecResult):
            errors.update(value.errors)
        for pod, result in results.items():
            outcomes[pod] = (result, read_outcome(result, nonce))
        if not self.multi:
            result, outcome = outcomes[target0.pod]
            if outcome.status not in RETRY:
                self._finish(target0, result, outcome, None)
        return outcomes, errors

    def _finish(
        self, target: Target, result: ExecResult, outcome: Outcome, error: BaseException | None
    ) -> None:
        """The pod's PythonResult, once; its notes; tell on_done."""
        py = python_result(result, outcome)
        py.pod = target.pod
        note = self._interp.saw(target, py.instance)
        py.notes = self._notes[target.pod] + ([note] if note else [])
        if error is None and is_missing_python(result):
            error = missing_python(target)
        if error is None and outcome.status in ("agent-gone", "missing") and py.error is None:
            py.error = self._lost(target, outcome)
        with self._lock:
            self._finished[target.pod] = py
        if self._on_done is not None:
            self._on_done(target.pod, py, error)

    def _lost(self, target: Target, outcome: Outcome) -> RemoteError:
        if outcome.status == "missing":  # the client was stopped: the interpreter is not known
            return RemoteError(
                "NoResult",
                f"the cell's client in {target.where()} ended without a result (was it "
                "stopped?); the interpreter may still be running the code",
            )
        self._interp.forget(target)
        if target.pod in self._killed:
            why = "was killed: the code did not stop after KeyboardInterrupt"
        else:
            why = "ended while running the code (os._exit, a crash, or killed)"
        return RemoteError(
            "InterpreterLost",
            f"the Python interpreter in {target.where()} {why}; its state is lost, "
            "the next cell starts a new one",
        )

    def _translated(self, exc: TrainJobError, target: Target) -> TrainJobError:
        partial = self._finished.get(target.pod)
        if isinstance(exc, ConnectionLostError):
            return ConnectionLostError(
                f"the connection to {target.where()} was lost while the Python code ran; the "
                "interpreter keeps running there with its state: run the next cell",
                partial=partial,
            )
        exc.partial = partial
        return exc

    def _assemble(
        self,
        outcomes: dict[str, tuple[ExecResult, Outcome]],
        errors: dict[str, BaseException],
    ) -> PythonResult | MultiPythonResult:
        for target in self.targets:
            if target.pod not in self._finished and target.pod in outcomes:
                result, outcome = outcomes[target.pod]
                self._finish(target, result, outcome, errors.get(target.pod))
        if not self.multi:
            target = self.targets[0]
            result, _outcome = outcomes[target.pod]
            if is_missing_python(result):
                raise missing_python(target)
            return self._finished[target.pod]
        for target in self.targets:
            if target.pod in outcomes and is_missing_python(outcomes[target.pod][0]):
                errors[target.pod] = missing_python(target)
        return MultiPythonResult(
            results={t.pod: self._finished.get(t.pod) or PythonResult(t.pod) for t in self.targets},
            errors=errors,
            labels={t.pod: t.ref.label for t in self.targets if t.ref.role != "trainer"},
            duration=time.monotonic() - self._started,
        )

    # -- waiting and stopping --------------------------------------------------------------
    def result(self) -> PythonResult | MultiPythonResult:
        """Wait for the run and return its result, or raise its error. A timeout interrupts
        the code (and kills it if it does not stop) and raises ExecTimeoutError."""
        deadline = None if self.timeout is None else self._started + self.timeout
        while not self._done.wait(WAIT_SLICE):
            if deadline is not None and time.monotonic() >= deadline:
                error = self.interrupt(reason="timeout")
                raise ExecTimeoutError(str(error), partial=error.partial) from None
        if self._error is not None:
            raise self._error
        return self._value

    def interrupt(self, reason: str = "interrupt") -> TrainJobError:
        """KeyboardInterrupt in the code on every pod still running it; kill the interpreters
        where it does not stop in time (or on a second Ctrl-C). The error to raise."""
        with self._lock:
            if self._stop_error is not None:
                return self._stop_error
            first = not self._stopping
            self._stopping = True
        if not first:  # another thread stops it: wait for its answer
            while self._stop_error is None:
                time.sleep(0.05)
            return self._stop_error
        stopped = False
        deadline = time.monotonic() + KILL_AFTER
        try:
            while not stopped and time.monotonic() < deadline:
                # again each second: a signal that lands just before a blocking call starts
                # (between two bytecodes) is seen only when that call returns
                self._interp.interrupt(self._running())
                stopped = self._done.wait(min(RESIGNAL, max(0.0, deadline - time.monotonic())))
        except KeyboardInterrupt:  # a second Ctrl-C: kill at once
            stopped = False
        if not stopped:
            running = self._running()
            with self._lock:
                self._killed = [t.pod for t in running]
            self._interp.kill(running)
            with contextlib.suppress(KeyboardInterrupt):
                self._done.wait(INTERRUPT_WAIT)
        if not self._done.is_set() and self._run is not None:
            self._run.interrupt()  # the clients themselves (the stopper)
            with contextlib.suppress(KeyboardInterrupt):
                self._done.wait(INTERRUPT_WAIT)
        error = CommandInterruptedError(self._message(reason), partial=self._partial())
        with self._lock:
            self._stop_error = error
        return error

    def _running(self) -> list[Target]:
        with self._lock:
            return [t for t in self.targets if t.pod not in self._finished]

    def _partial(self) -> Any:
        if self._done.is_set() and self._error is None:
            return self._value
        if self._done.is_set():
            return getattr(self._error, "partial", None)
        with self._lock:
            finished = dict(self._finished)
        if not self.multi:
            return finished.get(self.targets[0].pod) or PythonResult(self.targets[0].pod)
        return MultiPythonResult(
            results={t.pod: finished.get(t.pod) or PythonResult(t.pod) for t in self.targets},
            labels={t.pod: t.ref.label for t in self.targets if t.ref.role != "trainer"},
        )

    def _message(self, reason: str) -> str:
        head = (
            f"the Python code did not finish within {self.timeout:g}s"
            if reason == "timeout" and self.timeout is not None
            else "interrupted"
        )
        where = self.targets[0].where() if len(self.targets) == 1 else f"{len(self.targets)} pods"
        killed = self._killed
        if killed:
            which = where if len(self.targets) == 1 else ", ".join(killed)
            return (
                f"{head}: the code in {which} did not stop within {KILL_AFTER:g}s of "
                "KeyboardInterrupt, so its Python interpreter was killed: its state is lost "
                "(the next cell starts a new one)"
            )
        return (
            f"{head}: KeyboardInterrupt raised in the Python code in {where}; the interpreter "
            "keeps its state"
        )


__all__ = ["KILL_AFTER", "OnPythonDone", "PythonRun", "new_nonce"]
