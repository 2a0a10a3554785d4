"""Run an engine call in a worker thread; its events are handled in the cell's thread.

The cell's thread stays interruptible (Ctrl-C, Kernel > Interrupt) and does every display
update itself, so output lands in the right cell. The events waiting for it are bounded: when
the screen cannot keep up, the worker waits (and with it the engine's read loop, so the server
waits too) instead of piling text up in memory.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

MAX_PENDING = 2 << 20  # characters of text (1 per other event) waiting for the cell's thread
WAIT_SLICE = 0.1  # seconds a blocked emit waits before checking for cancellation again
GATHER = 0.003  # seconds the cell's thread lets merged events gather after handling a batch


def _weight(event: tuple[Any, ...]) -> int:
    """Characters of text an event carries (its str arguments), at least 1."""
    return max(1, sum(len(a) for a in event if isinstance(a, str)))


class Pump:
    """Runs ``fn(emit)`` in a worker thread; the caller's thread handles what ``emit`` sends.

    ``run`` returns ``fn``'s value or raises its exception. A ``KeyboardInterrupt`` in the
    caller's thread propagates with the worker still running; ``cancel`` then drops its events.
    ``emit`` blocks while ``max_pending`` characters are waiting, until the caller's thread
    takes them or the pump is cancelled (``run`` cancels on its way out, so a worker never
    waits for a caller that stopped listening).
    """

    def __init__(self, interval: float = 0.05, max_pending: int = MAX_PENDING) -> None:
        self.interval = interval
        self.max_pending = max(1, max_pending)
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self._events: deque[tuple[Any, ...]] = deque()
        self._pending = 0
        self._cond = threading.Condition(threading.Lock())
        self._box: dict[str, Any] = {}
        self.thread: threading.Thread | None = None

    @property
    def value(self) -> Any:
        """What ``fn`` returned (None while running or after an exception)."""
        return self._box.get("value")

    @property
    def error(self) -> BaseException | None:
        """What ``fn`` raised (None while running or after a return)."""
        return self._box.get("error")

    @property
    def pending(self) -> int:
        """Weight (characters of text, 1 per other event) queued for the caller's thread."""
        return self._pending

    def emit(self, *event: Any) -> None:
        """Queue an event for the caller's thread; wait while too much text is queued.

        Dropped after ``cancel``.
        """
        weight = _weight(event)
        with self._cond:
            while self._pending >= self.max_pending and not self.cancelled.is_set():
                self._cond.wait(WAIT_SLICE)
            if self.cancelled.is_set():
                return
            self._events.append(event)
            self._pending += weight
            self._cond.notify_all()

    def cancel(self) -> None:
        """Stop delivering events (a waiting ``emit`` returns at once, dropping its event)."""
        self.cancelled.set()
        with self._cond:
            self._events.clear()
            self._pending = 0
            self._cond.notify_all()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the worker has finished (at most ``timeout`` s); True when it has."""
        if self.thread is not None:
            self.thread.join(timeout)
        return self.done.is_set()

    def run(
        self,
        fn: Callable[[Callable[..., None]], Any],
        handle: Callable[..., None],
        tick: Callable[[], None] = lambda: None,
        merge: Callable[[list[tuple[Any, ...]]], list[tuple[Any, ...]]] | None = None,
    ) -> Any:
        """Run ``fn`` and pump its events into ``handle`` until it returns.

        ``merge`` may combine the events taken at once (in order) before they are handled; the
        events then gather for ``GATHER`` seconds after each batch.
        """

        def work() -> None:
            try:
                self._box["value"] = fn(self.emit)
            except BaseException as exc:  # re-raised in the caller's thread
                self._box["error"] = exc
            finally:
                with self._cond:
                    self.done.set()
                    self._cond.notify_all()

        self.thread = threading.Thread(target=work, daemon=True, name="trainjob-magics-worker")
        self.thread.start()
        try:
            while True:
                finished = self.done.is_set()  # read before taking: nothing can follow it
                events = self._take()
                for event in merge(events) if merge is not None and events else events:
                    handle(*event)
                tick()
                if finished and not self._events:
                    break
                if merge is not None and events and not finished:
                    self.done.wait(GATHER)  # let the next batch build up: fewer, larger ones
        except BaseException:
            self.cancel()  # nobody takes events any more: never leave the worker waiting
            raise
        if "error" in self._box:
            raise self._box["error"]
        return self.value

    def _take(self) -> list[tuple[Any, ...]]:
        """Every queued event (waiting up to ``interval`` for the first one)."""
        with self._cond:
            if not self._events and not self.done.is_set():
                self._cond.wait(self.interval)
            events = list(self._events)
            self._events.clear()
            self._pending = 0
            self._cond.notify_all()
        return events


def join_text(events: list[tuple[Any, ...]], kind: str = "out") -> list[tuple[Any, ...]]:
    """Join runs of ``(kind, ..., text)`` events that differ only in their text (same pod and
    stream): one event per run, the order kept, so a view works on whole batches of output."""
    out: list[tuple[Any, ...]] = []
    run: list[str] = []
    for event in events:
        if run and event[0] == kind and event[:-1] == out[-1][:-1]:
            run.append(event[-1])
            continue
        if len(run) > 1:
            out[-1] = (*out[-1][:-1], "".join(run))
        run = [event[-1]] if event[0] == kind else []
        out.append(event)
    if len(run) > 1:
        out[-1] = (*out[-1][:-1], "".join(run))
    return out
