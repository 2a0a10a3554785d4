"""Run an engine call in a worker thread; its events are handled in the cell's thread.

The cell's thread stays interruptible (Ctrl-C, Kernel > Interrupt) and does every display
update itself, so output lands in the right cell.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class Pump:
    """Runs ``fn(emit)`` in a worker thread; the caller's thread handles what ``emit`` sends.

    ``run`` returns ``fn``'s value or raises its exception. A ``KeyboardInterrupt`` in the
    caller's thread propagates with the worker still running; ``cancel`` then drops its events.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._box: dict[str, Any] = {}
        self.thread: threading.Thread | None = None

    @property
    def value(self) -> Any:
        """What ``fn`` returned (None while running or after an exception)."""
        return self._box.get("value")

    def emit(self, *event: Any) -> None:
        """Queue an event for the caller's thread (dropped after ``cancel``)."""
        if not self.cancelled.is_set():
            self._q.put(event)

    def cancel(self) -> None:
        """Stop delivering events."""
        self.cancelled.set()

    def join(self) -> None:
        """Wait until the worker has finished."""
        if self.thread is not None:
            self.thread.join()

    def run(
        self,
        fn: Callable[[Callable[..., None]], Any],
        handle: Callable[..., None],
        tick: Callable[[], None] = lambda: None,
    ) -> Any:
        """Run ``fn`` and pump its events into ``handle`` until it returns."""

        def work() -> None:
            try:
                self._box["value"] = fn(self.emit)
            except BaseException as exc:  # re-raised in the caller's thread
                self._box["error"] = exc
            finally:
                self.done.set()
                self._q.put(None)

        self.thread = threading.Thread(target=work, daemon=True, name="trainjob-magics-worker")
        self.thread.start()
        while True:
            self._drain(handle)
            tick()
            if self.done.is_set() and self._q.empty():
                break
        if "error" in self._box:
            raise self._box["error"]
        return self.value

    def _drain(self, handle: Callable[..., None]) -> None:
        """Handle the queued events (waiting up to ``interval`` for the first one)."""
        try:
            event = self._q.get(timeout=self.interval)
        except queue.Empty:
            return
        while event is not None:
            handle(*event)
            try:
                event = self._q.get_nowait()
            except queue.Empty:
                return
