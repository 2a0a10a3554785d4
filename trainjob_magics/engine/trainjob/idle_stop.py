"""Idle stop (``connect(idle_stop=...)``, off by default): the clock that stops a session in
which no command has run for that long, though the process lives.

A command that runs is never cut: the clock starts again when the last running one ends. The
clock's thread also writes, at most once a minute, when the session was last in use (the
``last-command`` annotation the sidebar and the panels read to warn before the stop); the
newest use is always written in the end.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from ..errors import IdleStoppedError, InvalidInputError
from ..kueue.labels import parse_duration

log = logging.getLogger(__name__)

NOTE_EVERY = 60.0  # seconds between two last-command notes, at most
RETRY_EVERY = 30.0  # a stop that failed (e.g. the API server is down) is tried again after this


def validate_idle_stop(value: object) -> float | None:
    """Seconds of an idle stop: a number or a duration (``1800``, ``"30m"``, ``"2h"``);
    None, 0 or '' is off."""
    if value is None or value == "" or (isinstance(value, (int, float)) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidInputError(f"idle_stop must be a duration or None, got {value!r}")
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise InvalidInputError(
            f"idle_stop {value!r} is not a duration: give seconds or e.g. '30m', '2h' "
            "(at least 1 s), or None for no idle stop"
        ) from None
    return float(seconds) if seconds else None


def idle_stopped_error(
    name: str,
    idle_stop: float,
    idle_words: str,
    when: datetime,
    run: Any = None,
    *,
    deleted: bool = True,
) -> IdleStoppedError:
    """The error every later command of a session stopped for being idle raises: when, for
    how long idle, and how to go on. ``run``: the live detached run it was left running for;
    ``deleted=False`` (and no run): the stop is still under way."""
    said = f"TrainJob session {name} was stopped for being idle (no command for {idle_words})"
    at = f"at {when:%H:%M:%S}"
    if run is not None:
        what = run.summary() if hasattr(run, "summary") else "its detached run"
        message = (
            f"{said} {at}, and left running for its detached run: {what}; attach({name!r}) "
            "to use it again, or close(force=True) to end it"
        )
    elif deleted:
        message = (
            f"{said} {at}, and TrainJob {name} deleted; reconnect with connect(...) (the same "
            "arguments; a longer idle_stop, or none, keeps a session)"
        )
    else:
        message = f"{said} {at}; reconnect with connect(...) once it is closed"
    return IdleStoppedError(message, stopped_at=when, idle_stop=idle_stop, run=run)


class IdleClock:
    """One session's idle clock and the daemon thread that acts on it.

    ``on_idle()`` is called (on the thread) once no command has run for ``seconds``; it stops
    the session and returns True, or returns False to be called again after ``retry_every``.
    ``on_note(when)`` writes when the session was last in use (UTC), at most every
    ``note_every`` seconds.
    """

    def __init__(
        self,
        seconds: float,
        on_idle: Callable[[], bool],
        *,
        on_note: Callable[[datetime], None] | None = None,
        note_every: float = NOTE_EVERY,
        retry_every: float = RETRY_EVERY,
    ) -> None:
        self.seconds = seconds
        self.fired_at: datetime | None = None  # when it began stopping the session (local time)
        self._on_idle = on_idle
        self._on_note = on_note
        self._note_every = note_every
        self._retry_every = retry_every
        self._cond = threading.Condition()
        self._busy = 0
        self._last = time.monotonic()
        self._last_wall = datetime.now(timezone.utc)
        self._noted = time.monotonic()  # the caller notes the start itself
        self._dirty = False
        self._state = "armed"  # -> "stopping" -> "stopped"; or "cancelled"
        self._cancelled = False
        self._decided = False  # the stop under way said what it does (see decided())
        self._thread = threading.Thread(target=self._run, daemon=True, name="tjm-idle-stop")

    def start(self) -> IdleClock:
        self._thread.start()
        return self

    @property
    def stopped(self) -> bool:
        """True once the clock stopped the session (or the stop under way decided how)."""
        return self._state == "stopped" or (self._state == "stopping" and self._decided)

    def decided(self) -> None:
        """Called by ``on_idle`` once it knows how it stops the session, before the slow part
        (waiting for the pods to go): commands stop waiting for it then, and are refused."""
        with self._cond:
            self._decided = True
            self._cond.notify_all()

    @property
    def busy(self) -> int:
        """Commands running now."""
        return self._busy

    def idle_for(self) -> float:
        """Seconds since the last command ended (0 while one runs)."""
        with self._cond:
            return 0.0 if self._busy else max(0.0, time.monotonic() - self._last)

    def begin(self) -> bool:
        """A command starts; False when the clock stopped the session. While a stop is being
        decided (a moment: whether a detached run lives) it waits for the decision."""
        with self._cond:
            self._cond.wait_for(lambda: self._state != "stopping" or self._decided)
            if self.stopped:
                return False
            self._busy += 1
            self._dirty = True
            self._cond.notify_all()
        return True

    def end(self) -> None:
        """A command ended: the clock starts again (once no other command runs)."""
        with self._cond:
            self._busy = max(0, self._busy - 1)
            self._last = time.monotonic()
            self._last_wall = datetime.now(timezone.utc)
            self._dirty = True
            self._cond.notify_all()

    def cancel(self) -> None:
        """End the thread (the session closed or was left); a stop under way goes on."""
        with self._cond:
            self._cancelled = True
            if self._state == "armed":
                self._state = "cancelled"
            self._cond.notify_all()

    def _step(self) -> tuple[datetime | None, bool, float]:
        """Under the lock: what to note now, whether to stop now, and how long to wait."""
        now = time.monotonic()
        due = self._noted + self._note_every
        note: datetime | None = None
        if self._busy:  # in use right now: noted once a minute while it lasts
            if now >= due:
                note, self._noted, self._dirty = datetime.now(timezone.utc), now, False
            return note, False, max(0.01, self._noted + self._note_every - now)
        if self._dirty and now >= due:
            note, self._noted, self._dirty = self._last_wall, now, False
        left = self._last + self.seconds - now
        if left <= 0:
            self._state = "stopping"
            self.fired_at = datetime.now()
            return note, True, 0.0
        wait = left if not self._dirty else min(left, self._noted + self._note_every - now)
        return note, False, max(0.01, wait)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._state in ("cancelled", "stopped"):
                    return
                note, fire, wait = self._step()
                if note is None and not fire:
                    self._cond.wait(wait)
                    continue
            if note is not None and self._on_note is not None:
                try:
                    self._on_note(note)
                except Exception as exc:  # best effort: the sidebar's idle time is stale
                    log.debug("could not note the last command: %s", exc)
            if fire and self._fire():
                return

    def _fire(self) -> bool:
        try:
            stopped = bool(self._on_idle())
        except Exception:
            log.warning("idle stop failed; trying again in %gs", self._retry_every, exc_info=True)
            stopped = False
        with self._cond:
            if stopped:
                self._state = "stopped"
            elif self._cancelled:  # closed or left meanwhile: nothing more to stop
                self._state, self.fired_at, self._decided = "cancelled", None, False
            else:  # try again later; commands may run meanwhile
                self._state, self.fired_at, self._decided = "armed", None, False
                self._last = time.monotonic() - self.seconds + self._retry_every
            self._cond.notify_all()
        return stopped


__all__ = ["NOTE_EVERY", "IdleClock", "idle_stopped_error", "validate_idle_stop"]
