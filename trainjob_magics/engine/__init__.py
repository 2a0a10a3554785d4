"""Session engine: connect / attach / execute / close. Never imports IPython."""

from __future__ import annotations

from . import errors
from .errors import (
    ApiServerError,
    CommandInterruptedError,
    ConfigError,
    ConnectionLostError,
    ConnectTimeoutError,
    ExecTimeoutError,
    IdleReleasedError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    PodNotRunningError,
    SessionClosedError,
    TrainJobError,
    TrainJobFailedError,
)
from .kueue import (
    QueuedTimeoutError,
    QueueStatus,
    QueueUnavailableError,
    SessionPreemptedError,
)
from .result import ExecResult, JobStatus, PodInfo
from .session import TrainJobSession, attach, connect

__all__ = [
    "ApiServerError",
    "CommandInterruptedError",
    "ConfigError",
    "ConnectTimeoutError",
    "ConnectionLostError",
    "ExecResult",
    "ExecTimeoutError",
    "IdleReleasedError",
    "InvalidInputError",
    "JobStatus",
    "NotFoundError",
    "PermissionDeniedError",
    "PodInfo",
    "PodNotRunningError",
    "QueueStatus",
    "QueueUnavailableError",
    "QueuedTimeoutError",
    "SessionClosedError",
    "SessionPreemptedError",
    "TrainJobError",
    "TrainJobFailedError",
    "TrainJobSession",
    "attach",
    "connect",
    "errors",
]
