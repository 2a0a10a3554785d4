"""Run one command on several pods at once, through the bounded :class:`~.pool.PodPool`.

Each pod's output reaches ``on_output(pod, stream, text)`` as it arrives (called from that pod's
worker), so one slow or dead pod never holds back the others. A pod whose exec fails (gone,
connection lost, timeout) gets its own entry in :attr:`MultiExecResult.errors`, with whatever
output arrived before the failure in :attr:`MultiExecResult.results`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import CommandInterruptedError
from ..result import ExecResult, MultiExecResult, PodRef
from .commands import CommandGroup
from .multiplexed import Multiplexed, MultiplexedRun
from .pool import MAX_PARALLEL, PodPool
from .stop import INTERRUPT_WAIT, stop_summary

OnPodOutput = Callable[[str, str, str], None]  # (pod, stream, text)
OnPodDone = Callable[[str, ExecResult, "BaseException | None"], None]  # (pod, result, error)
RunOne = Callable[[PodRef, "Callable[[str, str], None] | None"], ExecResult]


@dataclass(frozen=True)
class PodCommand:
    """Where one exec runs: the pod, and the container (None: the server's default)."""

    pod: str
    container: str | None = None
    label: str = ""  # e.g. "node-2"; shown next to the pod name


def _empty(pod: str, started: float) -> ExecResult:
    return ExecResult("", "", None, time.monotonic() - started, pod=pod)


def where(n: int) -> str:
    return f"on {n} pod{'s' if n != 1 else ''}"


def run_on_pods(
    run_one: RunOne,
    refs: Sequence[PodRef],
    *,
    group: CommandGroup,
    on_output: OnPodOutput | None = None,
    on_done: OnPodDone | None = None,
    labels: dict[str, str] | None = None,
    max_parallel: int = MAX_PARALLEL,
    multiplexed: Multiplexed | None = None,
) -> MultiExecResult:
    """``run_one(ref, on_output)`` for every pod concurrently; wait for all of them. With
    ``multiplexed`` the commands run on one thread (:mod:`.multiplexed`), ``run_one`` only
    for a pod that cannot.

    ``on_output`` and ``on_done`` are called from the workers (make them thread-safe). A pod
    that fails gets an entry in ``errors`` and does not delay the others. An interrupt (a
    KeyboardInterrupt while waiting) stops every pod's command and raises
    :class:`CommandInterruptedError` with the results so far in ``.partial``.
    """
    started = time.monotonic()
    results: dict[str, ExecResult] = {r.name: _empty(r.name, started) for r in refs}
    finished: set[str] = set()
    errors: dict[str, BaseException] = {}
    lock = threading.Lock()

    def output_of(pod: str) -> Callable[[str, str], None] | None:
        if on_output is None:
            return None
        return lambda stream, text: on_output(pod, stream, text)

    def record(pod: str, result: ExecResult | None, error: BaseException | None) -> None:
        if error is not None:
            partial = getattr(error, "partial", None)
            result = partial if isinstance(partial, ExecResult) else _empty(pod, started)
            result.pod = pod
        assert result is not None
        with lock:
            results[pod] = result
            finished.add(pod)
            if error is not None:
                errors[pod] = error
        if on_done is not None:
            on_done(pod, result, error)

    def one(ref: PodRef) -> None:
        try:
            result = run_one(ref, output_of(ref.name))
        except Exception as exc:  # each pod's failure is its own entry
            record(ref.name, None, exc)
            return
        record(ref.name, result, None)

    def snapshot() -> MultiExecResult:
        live = group.output_so_far()
        with lock:
            merged = {p: r if p in finished else live.get(p, r) for p, r in results.items()}
            return MultiExecResult(
                results=merged,
                errors=dict(errors),
                duration=time.monotonic() - started,
                labels=dict(labels or {}),
                refs={r.name: r for r in refs},
            )

    target = multiplexed.target() if multiplexed is not None and refs else None
    pool: PodPool[PodRef] | MultiplexedRun
    if multiplexed is not None and target is not None:
        pool = MultiplexedRun(
            multiplexed,
            target,
            refs,
            group=group,
            output_of=output_of,
            usual=one,
            record=record,
            max_parallel=max_parallel,
        ).start()
    else:
        pool = PodPool(one, list(refs), max_parallel=max_parallel, name="trainjob-exec").start()
    try:
        pool.join()
    except KeyboardInterrupt:
        reports = group.interrupt()
        if group.any_stopped():  # the stopped commands end: collect what they sent
            pool.join(INTERRUPT_WAIT)
        message = "interrupted: " + stop_summary(where(len(refs)), reports)
        raise CommandInterruptedError(message, partial=snapshot(), reports=reports) from None
    return snapshot()


__all__ = ["OnPodDone", "OnPodOutput", "PodCommand", "RunOne", "run_on_pods", "where"]
