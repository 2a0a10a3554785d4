"""Session engine: connect / attach / execute / close. Never imports IPython."""

from __future__ import annotations

from . import errors
from .errors import (
    ApiServerError,
    ConfigError,
    ConnectionLostError,
    ConnectTimeoutError,
    ExecTimeoutError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    PodNotRunningError,
    SessionClosedError,
    TrainJobError,
    TrainJobFailedError,
)
from .result import ExecResult, JobStatus, PodInfo
from .session import TrainJobSession, attach, connect

__all__ = [
    "ApiServerError",
    "ConfigError",
    "ConnectTimeoutError",
    "ConnectionLostError",
    "ExecResult",
    "ExecTimeoutError",
    "InvalidInputError",
    "JobStatus",
    "NotFoundError",
    "PermissionDeniedError",
    "PodInfo",
    "PodNotRunningError",
    "SessionClosedError",
    "TrainJobError",
    "TrainJobFailedError",
    "TrainJobSession",
    "attach",
    "connect",
    "errors",
]
