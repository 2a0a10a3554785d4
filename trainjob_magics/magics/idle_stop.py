"""Idle stop (``%trainjob_connect --idle-stop 30m``, ``TrainJobMagics.idle_stop``; off by
default): a session in which no command has run for that long is closed by the kernel, though
the kernel lives. A running cell is never cut: the clock starts again when it ends. The panels
and the sidebar warn 5 minutes before (from the ``idle-stop`` and ``last-command`` annotations
the server extension reads); the next ``%%trainjob`` of a stopped session fails in one line.

Off by default because a session left idle on purpose (a model loaded in ``--python``, a
dashboard behind a forward) would lose its state; the job's own ``idle_timeout`` already ends
jobs whose kernel died."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

from ..engine import duration_words
from .failures import TrainJobMagicError
from .sidebar_notes import note_command, note_idle_stop
from .views.status_text import duration_seconds

CHECK_EVERY = 1.0

_stoppers: dict[int, IdleStop] = {}  # id(session) -> its stopper
_stopped: dict[tuple[int, str], tuple[datetime, float]] = {}  # (id(registry), alias) -> when
_left: dict[tuple[int, str], str] = {}  # stopped, but left running: its detached run lives


class IdleStop:
    """One session's idle clock and the daemon thread that closes it."""

    def __init__(self, host: Any, alias: str, session: Any, seconds: float) -> None:
        self.host, self.alias, self.session, self.seconds = host, alias, session, seconds
        self.last = time.monotonic()
        self.busy = 0
        self._done = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="tjm-idle-stop").start()

    def begin(self) -> None:
        self.busy += 1

    def end(self) -> None:
        self.busy = max(0, self.busy - 1)
        self.last = time.monotonic()

    def cancel(self) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(CHECK_EVERY):
            if getattr(self.session, "closed", False):
                return
            if self.busy or time.monotonic() - self.last < self.seconds:
                continue
            entry = self.host.registry.find(self.alias)
            if entry is None or entry.session is not self.session:
                return
            key = (id(self.host.registry), self.alias)
            _stopped[key] = (datetime.now(), self.seconds)
            report = self.host.registry.close(self.alias, by="idle stop")
            if report.left:  # a live detached run: the job stays, the next cell says so
                _left[key] = report.left
            return


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
    """Start the idle clock of a new session (nothing when off)."""
    seconds = parse_idle_stop(value)
    _stopped.pop((id(host.registry), alias), None)
    _left.pop((id(host.registry), alias), None)
    old = _stoppers.pop(id(session), None)
    if old is not None:
        old.cancel()
    note_command(session, force=True)
    if seconds is None:
        return
    _stoppers[id(session)] = IdleStop(host, alias, session, seconds)
    note_idle_stop(session, seconds)


def check_not_stopped(host: Any, alias: str | None) -> None:
    """Fail in one line when ``alias`` (or the default session) was stopped for being idle."""
    key = (id(host.registry), alias or host.registry.default_alias or "default")
    entry = host.registry.find(key[1])
    live = entry is not None and not getattr(entry.session, "closed", False)
    if live or key not in _stopped:
        return
    when, seconds = _stopped[key]
    if key in _left:
        raise TrainJobMagicError(f"idle stop at {when:%H:%M:%S}: {_left[key]}")
    raise TrainJobMagicError(
        f"session {key[1]!r} was stopped for being idle (no command for "
        f"{duration_words(seconds)}) at {when:%H:%M:%S}; reconnect with %trainjob_connect "
        "(the same options), or connect with a longer --idle-stop"
    )


def cell_started(session: Any) -> None:
    stopper = _stoppers.get(id(session))
    if stopper is not None:
        stopper.begin()
    note_command(session)


def cell_ended(session: Any) -> None:
    stopper = _stoppers.get(id(session))
    if stopper is not None:
        stopper.end()
