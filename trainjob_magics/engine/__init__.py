"""Session engine: connect / attach / execute / close. Never imports IPython."""

from __future__ import annotations

from . import errors
from .connecting import attach, connect
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
from .fanout import MultiExecResult
from .files import TransferError, TransferResult, UnsafeArchiveError
from .interrupt import StopReport
from .kueue import (
    QueuedTimeoutError,
    QueueStatus,
    QueueUnavailableError,
    SessionPreemptedError,
)
from .logs import PodLogs
from .orphans import ManagedTrainJob, close_trainjob, list_trainjobs
from .output import MAX_MEMORY_OUTPUT
from .result import ExecResult, JobStatus, PodInfo
from .session import TrainJobSession
from .targets import PodRef

__all__ = [
    "MAX_MEMORY_OUTPUT",
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
    "ManagedTrainJob",
    "MultiExecResult",
    "NotFoundError",
    "PermissionDeniedError",
    "PodInfo",
    "PodLogs",
    "PodNotRunningError",
    "PodRef",
    "QueueStatus",
    "QueueUnavailableError",
    "QueuedTimeoutError",
    "SessionClosedError",
    "SessionPreemptedError",
    "StopReport",
    "TrainJobError",
    "TrainJobFailedError",
    "TrainJobSession",
    "TransferError",
    "TransferResult",
    "UnsafeArchiveError",
    "attach",
    "close_trainjob",
    "connect",
    "errors",
    "list_trainjobs",
]
