"""Exception hierarchy of the session engine.

Every exception derives from :class:`TrainJobError` (a ``RuntimeError``) and carries a one-line
message that says what to do next. ``status`` holds the HTTP status when the error came from the
API server (``None`` otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .result import ExecResult


class TrainJobError(RuntimeError):
    """Base class of every engine error."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class InvalidInputError(TrainJobError, ValueError):
    """Bad user input (name, command, node count, quantity, unknown runtime); nothing was sent."""


class NotFoundError(TrainJobError, LookupError):
    """A named object (TrainJob, pod) does not exist."""


class SessionClosedError(TrainJobError):
    """``execute()`` on a closed session."""


class PodNotRunningError(TrainJobError):
    """The trainer pod is gone, not Running, Succeeded or Failed."""


class TrainJobFailedError(PodNotRunningError):
    """The TrainJob reports a ``Failed`` condition."""


class IdleReleasedError(PodNotRunningError):
    """The TrainJob ended itself after ``idle_timeout`` without a heartbeat; reconnect."""


class CommandInterruptedError(TrainJobError):
    """KeyboardInterrupt during ``execute()``: the remote command was stopped (SIGINT, SIGTERM,
    SIGKILL); ``partial`` holds the output so far (a ``MultiExecResult`` for several pods),
    ``reports`` what stopping did."""

    def __init__(self, message: str, *, partial: Any = None, reports: list | None = None) -> None:
        super().__init__(message)
        self.partial = partial
        self.reports = list(reports or [])


class ConnectTimeoutError(TrainJobError, TimeoutError):
    """The trainer pod did not run in time; the TrainJob still exists."""


class ExecTimeoutError(TrainJobError, TimeoutError):
    """A command ran longer than its timeout; ``partial`` holds the output so far, ``reports``
    what stopping the remote command did (empty when it was not stopped)."""

    def __init__(
        self, message: str, *, partial: ExecResult | None = None, reports: list | None = None
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.reports = list(reports or [])


class PermissionDeniedError(TrainJobError, PermissionError):
    """RBAC denied a request (403); the message names the verb and resource."""


class ConnectionLostError(TrainJobError):
    """The exec WebSocket dropped before the exit status; ``partial`` holds the output so far."""

    def __init__(self, message: str, *, partial: ExecResult | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class ApiServerError(TrainJobError):
    """Any other API failure (5xx, 401, unreachable server, exec InternalError).

    ``partial`` is set when the failure ended a command (exec ``InternalError`` status).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        partial: ExecResult | None = None,
    ) -> None:
        super().__init__(message, status=status, reason=reason)
        self.partial = partial


class ConfigError(TrainJobError):
    """No usable Kubernetes configuration."""


__all__ = [
    "ApiServerError",
    "CommandInterruptedError",
    "ConfigError",
    "ConnectTimeoutError",
    "ConnectionLostError",
    "ExecTimeoutError",
    "IdleReleasedError",
    "InvalidInputError",
    "NotFoundError",
    "PermissionDeniedError",
    "PodNotRunningError",
    "SessionClosedError",
    "TrainJobError",
    "TrainJobFailedError",
]
