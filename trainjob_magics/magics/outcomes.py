"""What a failed ``%%trainjob`` cell tells about its session, shown in the session's panels.

A preempted job, a job that ended by itself (finished, failed, deleted) or released itself
(idle_timeout) is a final state of the session: its status panels (the connect cell's, those of
``%trainjob_status``) then say it instead of "Running". A disruption the job recovers from only
updates them (their "Last disruption" line).
"""

from __future__ import annotations

from typing import Any

from ..engine import (
    ConnectionLostError,
    IdleReleasedError,
    NotFoundError,
    PodGoneError,
    PodNotRunningError,
    SessionPreemptedError,
)
from .registry import Entry

ENDED_STATES = ("Complete", "Failed", "Deleted")
# errors after which the job itself may have changed (the others: the command, the user)
_ABOUT_THE_JOB = (PodNotRunningError, PodGoneError, ConnectionLostError, NotFoundError)


def learn_from_cell(entry: Entry, result: Any, error: BaseException | None) -> None:
    """After a cell: push what its error (or, with several pods, the first pod error about
    the job) says about the job to the session's panels (never raises)."""
    if error is None:
        errors = (getattr(result, "errors", None) or {}).values()
        error = next((e for e in errors if isinstance(e, _ABOUT_THE_JOB)), None)
    if error is not None:
        learn_from_cell_error(entry, error)


def learn_from_cell_error(entry: Entry, error: BaseException) -> None:
    """Push what ``error`` says about ``entry``'s job to its panels (never raises)."""
    if not entry.views:
        return
    note = " ".join(str(error).split())
    if isinstance(error, IdleReleasedError):
        entry.push_final("Deleted (idle)", note, cause="deleted when idle")
        return
    if not isinstance(error, (SessionPreemptedError, *_ABOUT_THE_JOB)):
        return
    try:
        status: Any = entry.session.status()
    except NotFoundError:
        status = None  # the TrainJob is gone
    except Exception:
        return  # nothing known for sure: the panels stay as they are
    if status is not None:
        entry.push_status(status)
    if isinstance(error, SessionPreemptedError):
        verb = getattr(error.queue, "taken_away", "preempted")  # or evicted (PodsReadyTimeout)
        entry.push_final(verb.capitalize(), note, cause=verb)
    elif status is None:
        entry.push_final("Deleted", note, cause="gone")
    elif status.state in ENDED_STATES:
        message = getattr(status, "message", "") or note
        entry.push_final(status.state, message, cause=status.state.lower())
