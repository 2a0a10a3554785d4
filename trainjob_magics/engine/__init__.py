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
    QueuedTimeoutError,
    QueueUnavailableError,
    SessionClosedError,
    SessionPreemptedError,
    TrainJobError,
    TrainJobFailedError,
    TransferError,
    UnsafeArchiveError,
)
from .exec.output import MAX_MEMORY_OUTPUT
from .files.logs import PodLogs
from .files.transfer import TransferResult
from .kueue.admission import QueueStatus
from .result import ExecResult, JobStatus, MultiExecResult, PodInfo, PodRef, StopReport
from .session import TrainJobSession
from .trainjob.orphans import ManagedTrainJob, close_trainjob, list_trainjobs

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
