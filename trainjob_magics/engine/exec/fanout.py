"""Run one command on several pods at once: one thread and one exec per pod.

Each pod's output reaches ``on_output(pod, stream, text)`` as it arrives (called from that pod's
thread), so one slow or dead pod never holds back the others. A pod whose exec fails (gone,
connection lost, timeout) gets its own entry in :attr:`MultiExecResult.errors`, with whatever
output arrived before the failure in :attr:`MultiExecResult.results`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import CommandInterruptedError
from ..result import ExecResult, MultiExecResult, StopReport
from .stop import stop_summary

OnPodOutput = Callable[[str, str, str], None]  # (pod, stream, text)


OnPodDone = Callable[[str, ExecResult, "BaseException | None"], None]  # (pod, result, error)


MAX_PARALLEL = 32


INTERRUPT_WAIT = 5.0  # seconds to collect the pods' last output after stopping them


@dataclass(frozen=True)
class PodCommand:
    """Where one exec runs: the pod, and the container (None: the server's default)."""

    pod: str
    container: str | None = None
    label: str = ""  # e.g. "node-2"; shown next to the pod name


def _empty(pod: str, started: float) -> ExecResult:
    return ExecResult("", "", None, time.monotonic() - started, pod=pod)


class PodRunner(Protocol):
    """What runs one pod's command: an :class:`ExecClient` or a session's ``SessionRunner``."""

    def run(self, namespace: str, pod: str, argv: Sequence[str], **options: Any) -> ExecResult:
        """Run ``argv`` in ``pod`` with ``container``, ``stdin``, ``timeout``, ``on_output``."""
        ...


def run_on_pods(
    client: PodRunner,
    namespace: str,
    targets: Sequence[PodCommand],
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    timeout: float | None = None,
    on_output: OnPodOutput | None = None,
    on_done: OnPodDone | None = None,
    on_interrupt: Callable[[], list[StopReport]] | None = None,
    max_parallel: int = MAX_PARALLEL,
) -> MultiExecResult:
    """Run ``argv`` on every target concurrently and wait for all of them.

    ``on_output`` and ``on_done`` are called from the per-pod threads (make them thread-safe).
    ``timeout`` applies to each pod separately; a pod that times out gets an
    :class:`ExecTimeoutError` entry and does not delay the others' results. A KeyboardInterrupt
    while waiting calls ``on_interrupt`` (which stops every pod's command), then raises
    :class:`CommandInterruptedError` with the results so far in ``.partial``.
    """
    started = time.monotonic()
    results: dict[str, ExecResult] = {t.pod: _empty(t.pod, started) for t in targets}
    errors: dict[str, BaseException] = {}
    lock = threading.Lock()
    gate = threading.Semaphore(max(1, max_parallel))
    labels = {t.pod: t.label for t in targets if t.label}

    def one(target: PodCommand) -> None:
        pod = target.pod
        callback = None
        if on_output is not None:

            def callback(stream: str, text: str) -> None:
                on_output(pod, stream, text)

        error: BaseException | None = None
        with gate:
            try:
                result = client.run(
                    namespace,
                    pod,
                    argv,
                    container=target.container,
                    stdin=stdin,
                    timeout=timeout,
                    on_output=callback,
                )
            except Exception as exc:  # each pod's failure is its own entry
                error = exc
                partial = getattr(exc, "partial", None)
                result = partial if isinstance(partial, ExecResult) else _empty(pod, started)
                result.pod = pod
        with lock:
            results[pod] = result
            if error is not None:
                errors[pod] = error
        if on_done is not None:
            on_done(pod, result, error)

    def snapshot() -> MultiExecResult:
        with lock:
            return MultiExecResult(
                results=dict(results),
                errors=dict(errors),
                duration=time.monotonic() - started,
                labels=labels,
            )

    threads = [
        threading.Thread(target=one, args=(t,), name=f"trainjob-exec-{t.pod}", daemon=True)
        for t in targets
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except KeyboardInterrupt:
        reports = on_interrupt() if on_interrupt is not None else []
        deadline = time.monotonic() + INTERRUPT_WAIT
        for thread in threads:  # the stopped commands end: collect what they sent
            thread.join(max(0.0, deadline - time.monotonic()))
        if on_interrupt is None:
            message = (
                f"interrupted: stopped reading; the command may still be running on "
                f"{len(targets)} pod(s)"
            )
        else:
            message = "interrupted: " + stop_summary(f"on {len(targets)} pod(s)", reports)
        raise CommandInterruptedError(message, partial=snapshot(), reports=reports) from None
    return snapshot()
