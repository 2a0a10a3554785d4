"""Run one command on several pods at once: one thread and one exec per pod.

Each pod's output reaches ``on_output(pod, stream, text)`` as it arrives (called from that pod's
thread), so one slow or dead pod never holds back the others. A pod whose exec fails (gone,
connection lost, timeout) gets its own entry in :attr:`MultiExecResult.errors`, with whatever
output arrived before the failure in :attr:`MultiExecResult.results`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import CommandInterruptedError
from .interrupt import StopReport, stop_summary
from .result import ExecResult

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


@dataclass
class MultiExecResult(Mapping[str, ExecResult]):
    """Results of one command on several pods: a mapping pod -> :class:`ExecResult`.

    ``errors`` holds the pods whose exec itself failed (their result then has
    ``returncode=None`` and the output received before the failure).
    """

    results: dict[str, ExecResult]
    errors: dict[str, BaseException] = field(default_factory=dict)
    duration: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, pod: str) -> ExecResult:
        return self.results[pod]

    def __iter__(self) -> Iterator[str]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @property
    def pods(self) -> list[str]:
        """Pod names in target order."""
        return list(self.results)

    @property
    def failed(self) -> list[str]:
        """Pods whose command exited non-zero, ended without status, or could not run."""
        return [p for p, r in self.results.items() if p in self.errors or r.returncode != 0]

    @property
    def ok(self) -> bool:
        """True when every pod's command exited 0."""
        return not self.failed

    @property
    def returncodes(self) -> dict[str, int | None]:
        """pod -> exit code (None when the exec failed or sent no status)."""
        return {p: r.returncode for p, r in self.results.items()}

    def reason(self, pod: str) -> str:
        """Why ``pod`` failed, in a few words: ``exit 3``, ``ConnectionLostError: ...``."""
        if pod in self.errors:
            err = self.errors[pod]
            return f"{type(err).__name__}: {' '.join(str(err).split())}"
        code = self.results[pod].returncode
        return "no exit status" if code is None else f"exit {code}"

    def summary(self) -> str:
        """One line: ``8 pods ok`` or ``2 of 8 pods failed: a (exit 1), b (PodNotRunningError)``."""
        failed = self.failed
        if not failed:
            return f"{len(self)} pod{'s' if len(self) != 1 else ''} ok ({self.duration:.2f}s)"
        names = ", ".join(f"{self._name(p)} ({self._short_reason(p)})" for p in failed)
        return f"{len(failed)} of {len(self)} pods failed: {names}"

    def _name(self, pod: str) -> str:
        label = self.labels.get(pod)
        return f"{pod} [{label}]" if label else pod

    def _short_reason(self, pod: str) -> str:
        return type(self.errors[pod]).__name__ if pod in self.errors else self.reason(pod)

    def __repr__(self) -> str:
        return f"MultiExecResult({self.summary()}, pods={self.pods!r})"


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


__all__ = [
    "MultiExecResult",
    "OnPodDone",
    "OnPodOutput",
    "PodCommand",
    "PodRunner",
    "run_on_pods",
]
