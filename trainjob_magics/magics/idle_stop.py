"""Idle stop in the magics (``%trainjob_connect --idle-stop 30m``, ``TrainJobMagics.idle_stop``;
off by default). The engine's clock (``session.set_idle_stop``) stops a session in which no
command has run for that long, though the kernel lives, and never cuts a running cell. This
module parses the option, and once the engine stopped a session forgets it in the kernel's
registry, says so in its panels, and makes the next magic that names it fail in one line. The
panels and the sidebar warn 5 minutes before, from the ``idle-stop`` and ``last-command``
annotations the engine writes.

Off by default because a session left idle on purpose (a model loaded in ``--python``, a
dashboard behind a forward) would lose its state; the job's own ``idle_timeout`` already ends
jobs whose kernel died."""

from __future__ import annotations

from typing import Any

from ..engine import IdleStoppedError, duration_words
from .failures import TrainJobMagicError
from .registry import left_line
from .sidebar_notes import note_command
from .views.status_text import duration_seconds

_stopped: dict[tuple[int, str], str] = {}  # (id(registry), alias) -> what the next magic says
_last: dict[int, str] = {}  # id(registry) -> the alias stopped last (the default then)


def parse_idle_stop(value: Any) -> float | None:
    """Seconds of ``--idle-stop`` (30m, 1h, 1800); None when off ('' or 0)."""
    if value in (None, "", 0, "0"):
        return None
    seconds = duration_seconds(value)
    if seconds is None or seconds <= 0:
        raise TrainJobMagicError(
            f"--idle-stop {value!r} is not a duration: give e.g. 30m, 2h or 1800 (seconds)"
        )
    return seconds


def arm(host: Any, alias: str, session: Any, value: Any) -> None:
    """Start the engine's idle clock of a new session (nothing but the sidebar's note when
    off)."""
    seconds = parse_idle_stop(value)
    _stopped.pop((id(host.registry), alias), None)
    _last.pop(id(host.registry), None)
    if seconds is None:
        note_command(session)
        return

    def stopped(stopped_session: Any, error: IdleStoppedError) -> None:
        _stopped_by_engine(host, alias, stopped_session, error)

    session.set_idle_stop(seconds, on_stop=stopped)


def stopped_line(alias: str, session: Any, error: IdleStoppedError) -> str:
    """The one line a magic naming a session stopped for being idle fails with."""
    when = f"{error.stopped_at:%H:%M:%S}" if error.stopped_at is not None else "?"
    if error.run is not None:
        return f"idle stop at {when}: {left_line(alias, session, error)}"
    return (
        f"session {alias!r} was stopped for being idle (no command for "
        f"{duration_words(error.idle_stop)}) at {when}; reconnect with %trainjob_connect "
        "(the same options), or connect with a longer --idle-stop"
    )


def _stopped_by_engine(host: Any, alias: str, session: Any, error: IdleStoppedError) -> None:
    """The engine stopped ``session`` (its clock's thread): forget it, and show it ended."""
    registry = host.registry
    entry = registry.find(alias)
    if entry is None or entry.session is not session:
        return
    _stopped[(id(registry), alias)] = stopped_line(alias, session, error)
    _last[id(registry)] = alias
    registry.remove(alias)
    if error.run is not None:  # its live detached run holds the job: left, not deleted
        entry.push_final("Left running", left_line(alias, session, error))
    else:
        entry.push_final("Deleted", f"session {alias!r} closed", cause="deleted at idle stop")


def check_not_stopped(host: Any, alias: str | None) -> None:
    """Fail in one line when ``alias`` (or the default session) was stopped for being idle."""
    registry = host.registry
    name = alias or registry.default_alias or _last.get(id(registry)) or "default"
    entry = registry.find(name)
    if entry is not None:
        error = getattr(entry.session, "idle_stopped", None)
        if isinstance(error, IdleStoppedError):  # stopped a moment ago, not forgotten yet
            raise TrainJobMagicError(stopped_line(name, entry.session, error))
        return
    line = _stopped.get((id(registry), name))
    if line:
        raise TrainJobMagicError(line)
