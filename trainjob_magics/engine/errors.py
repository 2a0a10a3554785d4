"""Exception hierarchy of the session engine (a leaf: imports no other engine module).

Every exception derives from :class:`TrainJobError` (a ``RuntimeError``) and carries a one-line
message that says what to do next. ``status`` holds the HTTP status when the error came from the
API server (``None`` otherwise).
"""

from __future__ import annotations

from typing import Any


class TrainJobError(RuntimeError):
    """Base class of every engine error; ``partial`` is the output a command sent before it
    (set on every error ``execute`` raises)."""

    partial: Any = None

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


class IdleStoppedError(SessionClosedError):
    """The session was stopped for being idle (``connect(idle_stop=...)``): no command ran for
    ``idle_stop`` seconds. ``stopped_at`` is when (a local ``datetime``); ``run`` is the live
    detached run it was left running for (its TrainJob not deleted), else None."""

    def __init__(
        self, message: str, *, stopped_at: Any = None, idle_stop: float = 0.0, run: Any = None
    ) -> None:
        super().__init__(message)
        self.stopped_at = stopped_at
        self.idle_stop = idle_stop
        self.run = run


class PodNotRunningError(TrainJobError):
    """The trainer pod is gone, not Running, Succeeded or Failed."""


class TrainJobGoneError(PodNotRunningError):
    """The session's TrainJob was deleted, or is being deleted, not by this session: closed from
    the sidebar, ``kubectl delete``, ... ``why`` says it as the sidebar does ("closed by the
    sidebar", "deleted outside trainjob-magics (e.g. kubectl delete)"), ``at`` when (a local
    ``datetime``, None when unknown)."""

    def __init__(self, message: str, *, why: str = "", at: Any = None) -> None:
        super().__init__(message)
        self.why = why
        self.at = at


class PodStartError(PodNotRunningError):
    """The trainer pod cannot start and waiting will not help (a bad image name, an image
    that failed to pull too often); ``problem`` says why."""


class TrainJobFailedError(PodNotRunningError):
    """The TrainJob reports a ``Failed`` condition."""


class IdleReleasedError(PodNotRunningError):
    """The TrainJob ended itself after ``idle_timeout`` without a heartbeat; reconnect."""


class PodGoneError(TrainJobError):
    """The pod a command ran in was deleted, evicted or preempted while the command ran;
    ``partial`` holds the output so far, ``pod`` the pod and ``cause`` what happened
    (``deleted``, ``evicted``, ``preempted`` or ``stopped``)."""

    def __init__(self, message: str, *, partial: Any = None, pod: str = "", cause: str = ""):
        super().__init__(message)
        self.partial = partial
        self.pod = pod
        self.cause = cause


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

    def __init__(self, message: str, *, partial: Any = None, reports: list | None = None) -> None:
        super().__init__(message)
        self.partial = partial
        self.reports = list(reports or [])


class PermissionDeniedError(TrainJobError, PermissionError):
    """RBAC denied a request (403); the message names the verb and resource."""


class ConnectionLostError(TrainJobError):
    """The exec WebSocket dropped before the exit status; ``partial`` holds the output so far,
    ``reports`` what stopping the remote command did afterwards, and ``stopped`` is True when
    nothing of it is left running (False: it may still run)."""

    def __init__(self, message: str, *, partial: Any = None, reports: list | None = None) -> None:
        super().__init__(message)
        self.partial = partial
        self.reports = list(reports or [])
        self.stopped = bool(self.reports) and all(r.stopped for r in self.reports)


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
        partial: Any = None,
    ) -> None:
        super().__init__(message, status=status, reason=reason)
        self.partial = partial


class ConfigError(TrainJobError):
    """No usable Kubernetes configuration."""


class QueueUnavailableError(TrainJobError):
    """The LocalQueue (or its ClusterQueue) is missing, inactive or stopped: nothing will admit."""


class QueuedTimeoutError(ConnectTimeoutError):
    """``connect``/``wait_ready`` timed out while the job was still waiting in its queue;
    ``job`` and ``namespace`` name the TrainJob, which is left in place (it keeps its place)."""

    job: str = ""
    namespace: str = ""


class SessionPreemptedError(TrainJobError):
    """Kueue preempted or evicted the session's job; ``partial`` keeps any output so far.

    ``queue`` is the QueueStatus at the time; ``session.wait_ready()`` waits for readmission.
    """

    def __init__(self, message: str, *, partial: Any = None, queue: Any = None):
        super().__init__(message)
        self.partial = partial
        self.queue = queue


class TransferError(TrainJobError):
    """A copy failed (remote tar error, integrity mismatch); ``result`` has the details."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class TransferInterruptedError(TransferError):
    """A copy was stopped before it ended (Ctrl-C, its ``cancel`` event, the session closed):
    its stream ended, and what it had staged was removed on both sides."""


class UnsafeArchiveError(TransferError):
    """A downloaded archive holds a member that would land outside the target; nothing written."""


class PythonNotFoundError(TrainJobError):
    """The pod has no Python interpreter of the name asked for (``%%trainjob --python``)."""


class RemotePythonError(TrainJobError):
    """Python code raised in the remote interpreter (or a push/pull failed there); ``result``
    is the :class:`PythonResult` (or ``MultiPythonResult``) with the remote traceback."""

    def __init__(self, message: str, *, result: Any = None) -> None:
        super().__init__(message)
        self.result = result
        self.partial = result


class DetachedRunError(TrainJobError):
    """A detached run is in the way: one is alive already (one at a time per session), or
    ``close()`` without ``force`` would kill it; ``run`` is its ``DetachedState`` when known."""

    def __init__(self, message: str, *, run: Any = None) -> None:
        super().__init__(message)
        self.run = run


__all__ = [
    "ApiServerError",
    "CommandInterruptedError",
    "ConfigError",
    "ConnectTimeoutError",
    "ConnectionLostError",
    "DetachedRunError",
    "ExecTimeoutError",
    "IdleReleasedError",
    "IdleStoppedError",
    "InvalidInputError",
    "NotFoundError",
    "PermissionDeniedError",
    "PodGoneError",
    "PodNotRunningError",
    "PythonNotFoundError",
    "QueueUnavailableError",
    "QueuedTimeoutError",
    "RemotePythonError",
    "SessionClosedError",
    "SessionPreemptedError",
    "TrainJobError",
    "TrainJobFailedError",
    "TransferError",
    "UnsafeArchiveError",
]
