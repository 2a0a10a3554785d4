"""Session engine: connect / attach / execute / close. Never imports IPython.

Everything a front end (the magics, a script) may use is in ``__all__``; the rooms below
(``kube``, ``exec``, ``trainjob``, ``kueue``, ``files``) are internals.
"""

from __future__ import annotations

from . import errors
from .connecting import attach, check_runtime, connect
from .detach.lookup import detached_run_of
from .detach.state import DetachedRun, DetachedState
from .errors import (
    ApiServerError,
    CommandInterruptedError,
    ConfigError,
    ConnectionLostError,
    ConnectTimeoutError,
    DetachedRunError,
    ExecTimeoutError,
    IdleReleasedError,
    IdleStoppedError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    PodGoneError,
    PodNotRunningError,
    PodStartError,
    PythonNotFoundError,
    QueuedTimeoutError,
    QueueUnavailableError,
    RemotePythonError,
    SessionClosedError,
    SessionPreemptedError,
    TrainJobError,
    TrainJobFailedError,
    TrainJobGoneError,
    TransferError,
    TransferInterruptedError,
    UnsafeArchiveError,
)
from .exec.output import MAX_MEMORY_OUTPUT
from .exec.runs import CommandRun
from .files.logs import PodLogs
from .files.resume import DEFAULT_RETRIES as TRANSFER_RETRIES
from .files.transfer import TransferResult
from .forward import Forward
from .inventory.holdings import duration_words
from .inventory.notes import note_session
from .inventory.service import SessionInventory
from .inventory.summary import holding_text
from .python.results import MultiPythonResult, PythonResult, RemoteError
from .python.runs import PythonRun
from .result import (
    ExecResult,
    GpuInfo,
    JobStatus,
    MultiExecResult,
    PodGpus,
    PodInfo,
    PodRef,
    PodShape,
    Protocols,
    QueueStatus,
    StopReport,
)
from .session import TrainJobSession
from .trainjob.body import generate_name as new_trainjob_name
from .trainjob.dryrun import to_yaml as manifest_yaml
from .trainjob.orphans import (
    ManagedTrainJob,
    abandon_trainjob,
    close_trainjob,
    find_trainjobs,
    list_trainjobs,
)
from .validation import validate_name

__all__ = [
    "MAX_MEMORY_OUTPUT",
    "TRANSFER_RETRIES",
    "ApiServerError",
    "CommandInterruptedError",
    "CommandRun",
    "ConfigError",
    "ConnectTimeoutError",
    "ConnectionLostError",
    "DetachedRun",
    "DetachedRunError",
    "DetachedState",
    "ExecResult",
    "ExecTimeoutError",
    "Forward",
    "GpuInfo",
    "IdleReleasedError",
    "IdleStoppedError",
    "InvalidInputError",
    "JobStatus",
    "ManagedTrainJob",
    "MultiExecResult",
    "MultiPythonResult",
    "NotFoundError",
    "PermissionDeniedError",
    "PodGoneError",
    "PodGpus",
    "PodInfo",
    "PodLogs",
    "PodNotRunningError",
    "PodRef",
    "PodShape",
    "PodStartError",
    "Protocols",
    "PythonNotFoundError",
    "PythonResult",
    "PythonRun",
    "QueueStatus",
    "QueueUnavailableError",
    "QueuedTimeoutError",
    "RemoteError",
    "RemotePythonError",
    "SessionClosedError",
    "SessionInventory",
    "SessionPreemptedError",
    "StopReport",
    "TrainJobError",
    "TrainJobFailedError",
    "TrainJobGoneError",
    "TrainJobSession",
    "TransferError",
    "TransferInterruptedError",
    "TransferResult",
    "UnsafeArchiveError",
    "abandon_trainjob",
    "attach",
    "check_runtime",
    "close_trainjob",
    "connect",
    "detached_run_of",
    "duration_words",
    "errors",
    "find_trainjobs",
    "holding_text",
    "list_trainjobs",
    "manifest_yaml",
    "new_trainjob_name",
    "note_session",
    "validate_name",
]
