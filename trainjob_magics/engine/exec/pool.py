"""The one bounded per-pod runner: call a function for each pod on at most ``max_parallel``
threads. Fan-out, file transfers, logs and stopping commands all go through it."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
MAX_PARALLEL = 256


class PodPool(Generic[T]):
    """Runs ``fn(item)`` for every item on at most ``max_parallel`` daemon threads.

    ``fn`` must not raise (each item's failure is the caller's to record). :meth:`join` is
    interruptible: a KeyboardInterrupt while waiting reaches the caller, the work goes on.
    """

    def __init__(
        self,
        fn: Callable[[T], None],
        items: Sequence[T],
        *,
        max_parallel: int = MAX_PARALLEL,
        name: str = "trainjob-pod",
    ) -> None:
        self._fn = fn
        self._todo: queue.SimpleQueue[T] = queue.SimpleQueue()
        for item in items:
            self._todo.put(item)
        workers = max(1, min(len(items), max_parallel))
        self._threads = [
            threading.Thread(target=self._work, daemon=True, name=f"{name}-{i}")
            for i in range(workers if items else 0)
        ]

    def _work(self) -> None:
        while True:
            try:
                item = self._todo.get_nowait()
            except queue.Empty:
                return
            self._fn(item)

    def start(self) -> PodPool[T]:
        for thread in self._threads:
            thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every item is done (at most ``timeout`` s); True when all are."""
        if timeout is None:
            for thread in self._threads:
                thread.join()
            return True
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)


def run_each(
    fn: Callable[[T], None],
    items: Sequence[T],
    *,
    max_parallel: int = MAX_PARALLEL,
    name: str = "trainjob-pod",
) -> None:
    """``fn(item)`` for every item, at most ``max_parallel`` at a time; returns when all are
    done."""
    PodPool(fn, items, max_parallel=max_parallel, name=name).start().join()


__all__ = ["MAX_PARALLEL", "PodPool", "run_each"]
