"""Plain data returned by the engine: command results, pod rows and job status."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from .output import EMPTY, CapturedOutput

if TYPE_CHECKING:
    from .kueue_status import QueueStatus


class ExecResult:
    """Outcome of one command in a pod.

    ``stdout``/``stderr`` are UTF-8 with invalid bytes replaced, decoded on access; the raw
    bytes stay available (``stdout_bytes``). Output beyond the memory limit was spilled to a
    file: ``stdout_path`` names it (None when in memory) and it is read on access, so keep the
    text you use (``r.stdout`` reads and decodes the file each time). ``returncode`` is
    ``None`` only when the server sent no exit status.
    """

    __hash__ = None  # type: ignore[assignment]

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
        self._out = _captured(stdout, stdout_bytes)
        self._err = _captured(stderr, stderr_bytes)

    @classmethod
    def from_captured(
        cls,
        stdout: CapturedOutput,
        stderr: CapturedOutput,
        returncode: int | None,
        duration: float,
        pod: str = "",
    ) -> ExecResult:
        """A result over captured streams (nothing read or decoded yet)."""
        result = cls(returncode=returncode, duration=duration, pod=pod)
        result._out, result._err = stdout, stderr
        return result

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
