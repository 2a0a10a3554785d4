"""Plain data returned by the engine: command results, pod rows and job status."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kueue import QueueStatus


@dataclass
class ExecResult:
    """Outcome of one command in the trainer pod.

    ``stdout``/``stderr`` are UTF-8 with invalid bytes replaced; the raw bytes stay available.
    ``returncode`` is ``None`` only when the server sent no exit status.
    """

    stdout: str
    stderr: str
    returncode: int | None
    duration: float
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    pod: str = ""

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.returncode == 0

    def __repr__(self) -> str:
        def clip(text: str) -> str:
            return repr(text if len(text) <= 60 else text[:57] + "...")

        return (
            f"ExecResult(returncode={self.returncode!r}, stdout={clip(self.stdout)}, "
            f"stderr={clip(self.stderr)}, duration={self.duration:.3f}, pod={self.pod!r})"
        )


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
