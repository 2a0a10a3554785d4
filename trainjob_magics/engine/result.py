"""Plain data returned by the engine: command output, results, pod rows, job and queue status.

A leaf: imports no other engine module.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict


class ExecResult:
    """Outcome of one command in a pod.

    ``stdout``/``stderr`` are UTF-8 with invalid bytes replaced, decoded on access; the raw
    bytes stay available (``stdout_bytes``). ``output`` is both streams in the order their
    bytes arrived, as a terminal shows them. Output beyond the memory limit was spilled to a
    file: ``stdout_path`` names it (None when in memory) and it is read on access, so keep the
    text you use (``r.stdout`` reads and decodes the file each time). ``returncode`` is
    ``None`` only when the server sent no exit status.
    """

    __hash__ = None  # type: ignore[assignment]  # unhashable: compared by value, mutable

    def __init__(
        self,
        stdout: str | None = None,
        stderr: str | None = None,
        returncode: int | None = None,
        duration: float = 0.0,
        stdout_bytes: bytes | None = None,
        stderr_bytes: bytes | None = None,
        pod: str = "",
    ) -> None:
        self.returncode = returncode
        self.duration = duration
        self.pod = pod
        # what the engine learned about how the command ended, e.g. that it ran out of memory
        self.note = ""
        # per-rank output of the mpirun/mpiexec the command ran (exec/ranks.py's MpiOutput)
        self.mpi: Any = None
        self._out = _captured(stdout, stdout_bytes)
        self._err = _captured(stderr, stderr_bytes)
        self._order: tuple[tuple[int, int], ...] | None = None

    @classmethod
    def from_captured(
        cls,
        stdout: CapturedOutput,
        stderr: CapturedOutput,
        returncode: int | None,
        duration: float,
        pod: str = "",
        order: tuple[tuple[int, int], ...] | None = None,
    ) -> ExecResult:
        """A result over captured streams (nothing read or decoded yet). ``order``: the runs
        ``(stream, bytes)`` in arrival order (stream 1 stdout, 2 stderr) that ``output``
        interleaves; None: stdout, then stderr."""
        result = cls(returncode=returncode, duration=duration, pod=pod)
        result._out, result._err = stdout, stderr
        result._order = order
        return result

    @property
    def output(self) -> str:
        """stdout and stderr interleaved in the order their bytes arrived (UTF-8, invalid
        bytes replaced; a character split by the other stream's bytes stays whole)."""
        if self._order is None:
            return self.stdout + self.stderr
        data = {STDOUT: self._out.read_bytes(), STDERR: self._err.read_bytes()}
        decoders = {ch: codecs.getincrementaldecoder("utf-8")(errors="replace") for ch in data}
        at = {STDOUT: 0, STDERR: 0}
        parts = []
        for channel, size in self._order:
            start = at[channel]
            at[channel] = start + size
            parts.append(decoders[channel].decode(data[channel][start : start + size]))
        for channel, decoder in decoders.items():  # what the runs do not cover, and the tails
            parts.append(decoder.decode(data[channel][at[channel] :], final=True))
        return "".join(parts)

    # -- streams ------------------------------------------------------------------------------
    @property
    def stdout(self) -> str:
        return self._out.text()

    @stdout.setter
    def stdout(self, value: str) -> None:
        self._out = _captured(value, None)

    @property
    def stderr(self) -> str:
        return self._err.text()

    @stderr.setter
    def stderr(self, value: str) -> None:
        self._err = _captured(value, None)

    @property
    def stdout_bytes(self) -> bytes:
        return self._out.read_bytes()

    @stdout_bytes.setter
    def stdout_bytes(self, value: bytes) -> None:
        self._out = _captured(None, value)

    @property
    def stderr_bytes(self) -> bytes:
        return self._err.read_bytes()

    @stderr_bytes.setter
    def stderr_bytes(self, value: bytes) -> None:
        self._err = _captured(None, value)

    @property
    def stdout_path(self) -> str | None:
        """The file holding the whole stdout when it outgrew the memory limit, else None."""
        return self._out.path

    @property
    def stderr_path(self) -> str | None:
        """The file holding the whole stderr when it outgrew the memory limit, else None."""
        return self._err.path

    @property
    def stdout_size(self) -> int:
        """Bytes of stdout received."""
        return self._out.size

    @property
    def stderr_size(self) -> int:
        """Bytes of stderr received."""
        return self._err.size

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.returncode == 0

    @property
    def by_rank(self) -> dict[int, Any]:
        """rank -> ``RankOutput`` (``.stdout``, ``.stderr`` as that rank printed them, ``.host``,
        ``.pod``) of the ``mpirun``/``mpiexec`` the command ran; empty when none ran tagged."""
        return self.mpi.by_rank if self.mpi is not None else {}

    @property
    def launcher(self) -> str:
        """The lines of ``mpirun``/``mpiexec`` that no rank printed (ssh's, mpirun's own)."""
        return self.mpi.launcher if self.mpi is not None else ""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExecResult):
            return NotImplemented
        return (self.returncode, self.duration, self.pod) == (
            other.returncode,
            other.duration,
            other.pod,
        ) and all(
            a.size == b.size and a.read_bytes() == b.read_bytes() and a.text() == b.text()
            for a, b in ((self._out, other._out), (self._err, other._err))
        )

    def __repr__(self) -> str:
        def clip(out: CapturedOutput) -> str:
            head = out.head(61)
            text = repr(head if len(head) <= 60 and out.size <= 60 else head[:57] + "...")
            return f"{text} ({out.size} bytes in {out.path})" if out.path else text

        return (
            f"ExecResult(returncode={self.returncode!r}, stdout={clip(self._out)}, "
            f"stderr={clip(self._err)}, duration={self.duration:.3f}, pod={self.pod!r})"
        )


STDOUT, STDERR = 1, 2  # the exec channels, as ``ExecResult.from_captured(order=...)`` names them


def _captured(text: str | None, data: bytes | None) -> CapturedOutput:
    """Captured output from constructor arguments (text, bytes, or both)."""
    if data is None and not text:
        return EMPTY
    return CapturedOutput(bytes(data) if data is not None else None, text=text)


@dataclass
class PodInfo:
    """One pod of a TrainJob, as shown in status tables."""

    name: str
    role: str
    phase: str
    ready: bool
    node: str
    restarts: int
    created: datetime | None
    waiting_reason: str
    is_trainer: bool


@dataclass(frozen=True)
class PodShape:
    """What the trainer pod got beyond its image: volumes (``"pvc data -> /data (ro)"``), the
    service account, its node and what placed it there (from the pod spec)."""

    volumes: tuple[str, ...] = ()
    service_account: str = ""
    node: str = ""
    node_selector: tuple[str, ...] = ()  # "key=value"
    tolerations: tuple[str, ...] = ()  # "key=value:Effect"
    image_pull_secrets: tuple[str, ...] = ()


EXEC_V4 = "v4.channel.k8s.io"  # exec without the v5 stdin close: the server's fallback
FORWARD_PER_CONNECTION = "websocket"  # Forward.mode of one v4 WebSocket per connection


@dataclass(frozen=True)
class Protocols:
    """What a session's streams negotiated with the API server: the WebSocket subprotocol of
    its latest exec (``v5.channel.k8s.io``, or ``v4.channel.k8s.io`` where the server serves
    no v5) and, per open forward, its pod port, mode (``tunnel``, or ``websocket``: one
    WebSocket per connection) and subprotocol. Empty before any exec or forward."""

    exec: str = ""
    forwards: tuple[tuple[int, str, str], ...] = ()  # (pod port, mode, subprotocol)

    @property
    def fallback(self) -> bool:
        """A stream took the server's fallback: exec on v4, or a forward without the tunnel."""
        return self.exec == EXEC_V4 or any(m == FORWARD_PER_CONNECTION for _, m, _ in self.forwards)

    def summary(self) -> str:
        """``exec v4.channel.k8s.io · forward 8080 websocket (v4.channel.k8s.io)``."""
        parts = [f"exec {self.exec}"] if self.exec else []
        parts += [f"forward {port} {mode} ({sub})" for port, mode, sub in self.forwards]
        return " · ".join(parts)


@dataclass
class JobStatus:
    """A snapshot of a TrainJob and its pods."""

    name: str
    namespace: str
    runtime: str
    state: str
    message: str
    pods: list[PodInfo] = field(default_factory=list)
    trainer_pod: str | None = None
    elapsed: float = 0.0
    queue: QueueStatus | None = None  # Kueue state, position and message (queued jobs only)
    problem: str = ""  # why the trainer pod waits: the scheduler's or kubelet's words
    disruption: str = ""  # the last pod deletion/eviction/preemption a command of this session saw
    shape: PodShape | None = None  # the trainer pod's volumes, service account and placement
    uid: str = ""  # the TrainJob's uid once it exists (a newer job of the same name has another)
    pods_expected: int = 0  # how many pods the job runs, created or not (0: not known)
    protocols: Protocols = field(default_factory=Protocols)  # what the session's streams speak


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class SpillFile:
    """Owns one spill file: removed when this object is collected (or at exit)."""

    __slots__ = ("__weakref__", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        weakref.finalize(self, _unlink, path)  # the finalizer registry keeps it


class CapturedOutput:
    """One stream's captured bytes: in memory, or in a spill file (:attr:`path`)."""

    __slots__ = ("_data", "_spill", "_text", "size")

    def __init__(
        self,
        data: bytes | None = None,
        *,
        text: str | None = None,
        spill: SpillFile | None = None,
        size: int | None = None,
    ) -> None:
        self._data = data
        self._text = text
        self._spill = spill
        if size is None:
            size = len(data) if data is not None else len(self.read_bytes())
        self.size = size

    @property
    def path(self) -> str | None:
        """The spill file, None when the bytes are in memory."""
        return self._spill.path if self._spill is not None else None

    def read_bytes(self) -> bytes:
        """Every byte (read from the spill file when there is one)."""
        if self._data is not None:
            return self._data
        if self._spill is not None:
            with open(self._spill.path, "rb") as fh:
                return fh.read()
        self._data = (self._text or "").encode("utf-8", "surrogatepass")
        return self._data

    def text(self) -> str:
        """UTF-8 text, invalid bytes replaced (cached unless spilled)."""
        if self._text is not None:
            return self._text
        text = self.read_bytes().decode("utf-8", "replace")
        if self._spill is None:
            self._text = text
        return text

    def head(self, n: int) -> str:
        """The first ``n`` bytes as text (a cut multi-byte character is dropped)."""
        if self._text is not None:
            return self._text[:n]
        if self._data is not None:
            raw = self._data[:n]
        elif self._spill is not None:
            with open(self._spill.path, "rb") as fh:
                raw = fh.read(n)
        else:
            raw = b""
        return raw.decode("utf-8", "ignore" if len(raw) == n else "replace")


EMPTY = CapturedOutput(b"")


# Messages Kueue writes when the queue itself keeps a workload out (not a matter of quota).
QUEUE_PROBLEM = re.compile(
    r"^(LocalQueue|ClusterQueue) (\S*) (doesn't exist|is inactive|is stopped|"
    r"is terminating or missing)$"
)


WAITING_STATES = ("Queued", "Preempted", "Evicted", "Pending")


@dataclass
class QueueStatus:
    """Where a queued TrainJob stands in Kueue.

    ``state``: "Pending" (no Workload yet), "Queued", "QuotaReserved", "Admitted", "Evicted",
    "Preempted", "Inactive" (queue missing/inactive/stopped), "Deactivated", "Finished",
    "Unknown" (Workloads cannot be read). Positions are 0-based; None means unknown.
    """

    state: str
    reason: str = ""
    message: str = ""
    local_queue: str | None = None
    cluster_queue: str | None = None
    workload: str | None = None
    position_in_local_queue: int | None = None
    position_in_cluster_queue: int | None = None
    since: datetime | None = None
    evictions: int = 0
    position_note: str = ""  # why the position is unknown ("forbidden", "not served", ...)
    last_eviction: tuple[str, str] | None = None  # (reason, message) of the latest eviction
    raw_conditions: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def waiting(self) -> bool:
        """True while the job waits for (re)admission."""
        return self.state in WAITING_STATES

    @property
    def admitted(self) -> bool:
        return self.state == "Admitted"

    @property
    def taken_away(self) -> str:
        """How Kueue last took the job away: "preempted" (a preemption), else "evicted"
        (waitForPodsReady's PodsReadyTimeout, a stopped queue, a deactivation, ...)."""
        reason = (self.last_eviction or (self.reason, ""))[0]
        return "preempted" if reason == "Preempted" else "evicted"

    def position_text(self) -> str:
        """'position 2 in LocalQueue q (3 in ClusterQueue cq)' (1-based), or 'position unknown'."""
        if self.position_in_local_queue is None:
            note = f" ({self.position_note})" if self.position_note else ""
            return f"position unknown{note}"
        text = f"position {self.position_in_local_queue + 1} in LocalQueue {self.local_queue}"
        if self.position_in_cluster_queue is not None:
            text += f" ({self.position_in_cluster_queue + 1} in ClusterQueue"
            text += f" {self.cluster_queue})" if self.cluster_queue else ")"
        return text

    def summary(self) -> str:
        """One line for status displays."""
        where = f" in {self.local_queue}" if self.local_queue else ""
        if self.state == "Queued":
            head = f"Queued{where}, {self.position_text()}"
        elif self.state in ("Preempted", "Evicted"):
            head = f"{self.state} ({self.reason}), waiting for readmission{where}"
            if self.position_in_local_queue is not None:
                head += f", {self.position_text()}"
        elif self.state == "QuotaReserved":
            head = f"Quota reserved in ClusterQueue {self.cluster_queue}"
            if self.message.startswith("Quota reserved"):
                return f"{head}, waiting for admission checks"
        elif self.state == "Admitted":
            head = f"Admitted by ClusterQueue {self.cluster_queue}"
            return head
        else:
            head = f"{self.state}{where}"
        return f"{head}: {self.message}" if self.message else head


@dataclass(frozen=True)
class PodRef:
    """One pod a command can target."""

    name: str
    role: str
    index: int
    phase: str
    container: str | None = None  # "node" when present, else the first container

    @property
    def label(self) -> str:
        """``role-index``, e.g. ``node-2``."""
        return f"{self.role}-{self.index}"


@dataclass
class MultiExecResult(Mapping[str, ExecResult]):
    """Results of one command on several pods: a mapping pod -> :class:`ExecResult`.

    ``errors`` holds the pods whose exec itself failed (their result then has
    ``returncode=None`` and the output received before the failure).
    """

    results: dict[str, ExecResult]
    errors: dict[str, BaseException] = field(default_factory=dict)
    duration: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)  # pod -> "node-2" (not the trainer)
    refs: dict[str, PodRef] = field(default_factory=dict)  # pod -> the PodRef it ran on

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


@dataclass
class StopReport:
    """What stopping one remote command did."""

    pod: str
    exec_id: str
    stopped: bool  # nothing of the command is left running
    message: str

    def line(self) -> str:
        """One line for the user."""
        if self.stopped:
            return f"stopped the remote command in pod {self.pod} ({self.message})"
        return (
            f"could not confirm the remote command in pod {self.pod} stopped ({self.message}); "
            "it may still be running: check with `ps` in another cell"
        )


def _amount(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


class GpuRecord(TypedDict):
    """``GpuInfo`` as the REST API sends it (``IGpu`` in the lab extension's types.ts)."""

    index: int | None
    name: str
    utilization: float | None
    memoryUsedMiB: float | None
    memoryTotalMiB: float | None


class PodGpusRecord(TypedDict):
    """``PodGpus`` as the REST API sends it (``IPodGpus`` in the lab extension's types.ts)."""

    pod: str
    state: str
    gpus: list[GpuRecord]
    sampledAt: str | None
    message: str


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as ``nvidia-smi --query-gpu`` reports it; None where it said ``[N/A]`` or
    ``[Not Supported]`` (e.g. utilization under MIG)."""

    index: int | None
    name: str
    utilization: float | None  # percent of the last sample period a kernel ran
    memory_used_mib: float | None
    memory_total_mib: float | None

    def text(self) -> str:
        """``GPU 0: 35 % · 1234/40960 MiB``."""
        which = f"GPU {self.index}" if self.index is not None else "GPU ?"
        util = "n/a" if self.utilization is None else f"{self.utilization:g} %"
        memory = f"{_amount(self.memory_used_mib)}/{_amount(self.memory_total_mib)} MiB"
        return f"{which}: {util} · {memory}"

    def as_dict(self) -> GpuRecord:
        return {
            "index": self.index,
            "name": self.name,
            "utilization": self.utilization,
            "memoryUsedMiB": self.memory_used_mib,
            "memoryTotalMiB": self.memory_total_mib,
        }


# What a pod's GPU sample says: "ok" (``gpus`` read), "busy" (one of our commands runs there:
# not sampled), "absent" (no nvidia-smi), "no-gpu" (nvidia-smi sees none), "error" (``message``).
GPU_STATES = ("ok", "busy", "absent", "no-gpu", "error")


@dataclass(frozen=True)
class PodGpus:
    """One pod's GPUs, sampled at ``sampled_at`` (epoch seconds; 0 when not sampled)."""

    pod: str
    state: str
    gpus: tuple[GpuInfo, ...] = ()
    sampled_at: float = 0.0
    message: str = ""

    def as_dict(self) -> PodGpusRecord:
        when = datetime.fromtimestamp(self.sampled_at).astimezone() if self.sampled_at else None
        return {
            "pod": self.pod,
            "state": self.state,
            "gpus": [g.as_dict() for g in self.gpus],
            "sampledAt": when.isoformat() if when else None,
            "message": self.message,
        }
