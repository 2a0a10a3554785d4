"""The one bounded per-pod runner: call a function for each pod on at most ``max_parallel``
threads. Fan-out, file transfers, logs and stopping commands all go through it."""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)
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


class WorkQueue:
    """Calls each submitted function once, on at most ``max_parallel`` daemon threads that
    start on demand and end when nothing is left (for work that may block: the fan-out's
    fallbacks and error handling)."""

    def __init__(self, *, max_parallel: int = MAX_PARALLEL, name: str = "trainjob-work") -> None:
        self._todo: collections.deque[Callable[[], None]] = collections.deque()
        self._lock = threading.Lock()
        self._workers = 0
        self._max = max(1, max_parallel)
        self._name = name
        self._spawned = 0

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self._todo.append(fn)
            if self._workers >= self._max:
                return
            self._workers += 1
            self._spawned += 1
            name = f"{self._name}-{self._spawned}"
        threading.Thread(target=self._work, daemon=True, name=name).start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._todo:
                    self._workers -= 1
                    return
                fn = self._todo.popleft()
            try:
                fn()
            except Exception:  # each function records its own failure
                log.exception("a pod worker failed")


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


__all__ = ["MAX_PARALLEL", "PodPool", "WorkQueue", "run_each"]
