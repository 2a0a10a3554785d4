"""``GpuSampler``: each GPU's utilisation and memory in a job's pods, through one exec per pod at
most every :data:`SAMPLE_EVERY` seconds (answers are shared by every caller meanwhile), never
while one of our commands runs in the pod.

Only running pods that request GPUs are sampled. The job's lead pod (its trainer: the MPI
launcher, or node 0) is asked first: while a command runs there (mpirun's ranks run in the
other pods) no pod of the job is sampled. The engine passes the pods where its own commands
run (``busy``); the in-pod check (``gpu_probe.PROBE``) finds those of any process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import TrainJobError
from ..exec.client import ExecClient
from ..exec.pool import PodPool
from ..kube.objects import is_running, pod_name
from ..result import PodGpus
from ..trainjob.targets import default_container, pod_refs
from .gpu_probe import probe_argv, read_probe
from .holdings import pod_requests

log = logging.getLogger(__name__)

SAMPLE_EVERY = 10.0  # seconds: at most one exec per pod this often
EXEC_TIMEOUT = 15.0
MAX_PARALLEL = 8
FORGET_AFTER = 600.0  # answers of pods not asked about for this long are dropped


@dataclass
class _Answer:
    at: float  # time.monotonic() when its exec started
    sampled: bool  # a sample (else a check only)
    gpus: PodGpus


def requests_gpus(pod: Mapping[str, Any]) -> bool:
    return pod_requests(pod).gpu > 0


class GpuSampler:
    """Samples pods' GPUs through ``client`` and keeps each pod's answer ``every`` seconds."""

    def __init__(self, client: ExecClient, *, every: float = SAMPLE_EVERY) -> None:
        self.client = client
        self.every = every
        self.execs = 0  # probes run so far (one exec each)
        self._answers: dict[tuple[str, str], _Answer] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()

    def sample(
        self,
        namespace: str,
        pods: Sequence[Mapping[str, Any]],
        *,
        busy: Collection[str] = (),
        lead: str | None = None,
    ) -> list[PodGpus]:
        """One answer per running pod of the job that requests GPUs (none: ``[]``). ``busy``:
        pods where the caller's own commands run (not sampled); ``lead``: the trainer pod
        (default: the launcher, else the first pod)."""
        running = [p for p in pods if is_running(p)]
        order = [r.name for r in pod_refs(running)]
        by_name = {pod_name(p): p for p in running}
        targets = [by_name[n] for n in order if n in by_name and requests_gpus(by_name[n])]
        if not targets:
            return []
        lead_name = lead if lead in by_name else (order[0] if order else None)
        if lead_name in busy:
            return [_busy(pod_name(p)) for p in targets]
        answers: dict[str, PodGpus] = {}
        if lead_name is not None:
            first = self._probe(namespace, by_name[lead_name], requests_gpus(by_name[lead_name]))
            if first.state == "busy":
                return [_busy(pod_name(p)) for p in targets]
            answers[lead_name] = first
        rest = [p for p in targets if pod_name(p) not in answers]

        def one(pod: Mapping[str, Any]) -> None:
            name = pod_name(pod)
            answers[name] = _busy(name) if name in busy else self._probe(namespace, pod, True)

        if len(rest) == 1:
            one(rest[0])
        elif rest:
            PodPool(one, rest, max_parallel=MAX_PARALLEL, name="tjm-gpu").start().join()
        self._forget_old()
        return [answers[pod_name(p)] for p in targets if pod_name(p) in answers]

    def _probe(self, namespace: str, pod: Mapping[str, Any], sample: bool) -> PodGpus:
        """The pod's answer: the kept one when fresh enough, else one exec (one at a time per
        pod: a second caller waits for the first's answer)."""
        key = (namespace, pod_name(pod))
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            kept = self._answers.get(key)
            fresh = kept is not None and time.monotonic() - kept.at < self.every
            if kept is not None and fresh and (kept.sampled or not sample):
                return kept.gpus
            started = time.monotonic()
            gpus = self._run(namespace, pod, sample)
            self._answers[key] = _Answer(started, sample, gpus)
            return gpus

    def _run(self, namespace: str, pod: Mapping[str, Any], sample: bool) -> PodGpus:
        name = pod_name(pod)
        with self._lock:
            self.execs += 1
        try:
            result = self.client.run(
                namespace,
                name,
                probe_argv(sample),
                container=default_container(pod),
                timeout=EXEC_TIMEOUT,
            )
        except TrainJobError as exc:  # said once in the answer, never raised or logged loudly
            log.debug("GPU probe of pod %s failed: %s", name, exc)
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return PodGpus(name, "error", sampled_at=time.time(), message=line)
        return read_probe(name, result)

    def _forget_old(self) -> None:
        now = time.monotonic()
        with self._lock:
            for key in [k for k, a in self._answers.items() if now - a.at > FORGET_AFTER]:
                self._answers.pop(key, None)
                self._locks.pop(key, None)


def _busy(pod: str) -> PodGpus:
    return PodGpus(pod, "busy", message="a command runs in the job: not sampled")


__all__ = ["SAMPLE_EVERY", "GpuSampler", "requests_gpus"]
