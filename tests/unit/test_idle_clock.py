"""The engine's idle clock (engine/trainjob/idle_stop.py) without a cluster: it fires once no
command ran for its time, never while one runs (the time counts from the end), notes the last
use at most once per interval and always the newest in the end, and tries a failed stop again."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest

from tests.helpers.polling import wait_until
from trainjob_magics.engine.errors import IdleStoppedError, InvalidInputError, SessionClosedError
from trainjob_magics.engine.trainjob.idle_stop import (
    IdleClock,
    idle_stopped_error,
    validate_idle_stop,
)


def test_durations_and_off() -> None:
    assert validate_idle_stop(None) is None
    assert validate_idle_stop(0) is None
    assert validate_idle_stop("") is None
    assert validate_idle_stop(90) == 90.0
    assert validate_idle_stop("30m") == 1800.0
    assert validate_idle_stop("1h30m") == 5400.0
    for bad in ("soon", -5, True, [30], "0.2"):
        with pytest.raises(InvalidInputError, match="idle_stop"):
            validate_idle_stop(bad)


def test_fires_once_idle_and_refuses_later_commands() -> None:
    fired = threading.Event()
    started = time.monotonic()
    clock = IdleClock(0.3, lambda: fired.set() or True).start()
    assert fired.wait(10)
    assert time.monotonic() - started >= 0.3
    wait_until(lambda: clock.stopped)
    assert isinstance(clock.fired_at, datetime)
    assert clock.begin() is False


def test_a_running_command_is_never_cut_and_the_clock_restarts_at_its_end() -> None:
    fired = threading.Event()
    busy_notes: list[datetime] = []
    clock = IdleClock(
        0.3, lambda: fired.set() or True, on_note=busy_notes.append, note_every=0.1
    ).start()
    assert clock.begin()
    # a running command is noted once per interval; wait for well past the idle time
    wait_until(lambda: len(busy_notes) >= 6, timeout=10)
    assert not fired.is_set() and not clock.stopped and clock.idle_for() == 0.0
    ended = time.monotonic()
    clock.end()
    assert fired.wait(10)
    assert time.monotonic() - ended >= 0.3


def test_notes_at_most_once_per_interval_and_the_newest_in_the_end() -> None:
    notes: list[datetime] = []
    clock = IdleClock(3600, lambda: True, on_note=notes.append, note_every=0.5).start()
    try:
        for _ in range(20):  # many short commands in a row
            assert clock.begin()
            clock.end()
        last_end = datetime.now().astimezone()
        wait_until(lambda: notes and notes[-1] >= last_end.replace(microsecond=0), timeout=10)
        assert len(notes) <= 2  # one at once (the first), one trailing: the newest
        assert notes[-1] <= datetime.now().astimezone()
    finally:
        clock.cancel()


def test_a_failed_stop_is_tried_again() -> None:
    calls: list[float] = []

    def stop() -> bool:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("API server down")
        return len(calls) >= 2

    clock = IdleClock(0.2, stop, retry_every=0.3).start()
    wait_until(lambda: clock.stopped and len(calls) == 2, timeout=10)
    assert calls[1] - calls[0] >= 0.3


def test_cancel_ends_the_thread_without_stopping() -> None:
    fired = threading.Event()
    clock = IdleClock(0.2, lambda: fired.set() or True)
    clock.start()
    clock.cancel()
    wait_until(lambda: not clock._thread.is_alive())
    assert not fired.is_set() and not clock.stopped
    assert clock.begin() is True


def test_the_error_says_when_how_long_and_how_to_go_on() -> None:
    when = datetime(2026, 12, 7, 14, 3, 12)
    closed = idle_stopped_error("abc", 1800, "30 min", when)
    assert isinstance(closed, SessionClosedError) and isinstance(closed, IdleStoppedError)
    assert str(closed).startswith(
        "TrainJob session abc was stopped for being idle (no command for 30 min) at 14:03:12"
    )
    assert "reconnect with connect(...)" in str(closed) and "\n" not in str(closed)
    assert closed.stopped_at == when and closed.idle_stop == 1800 and closed.run is None

    class Run:
        def summary(self) -> str:
            return "Detached run 1 in TrainJob abc: running"

    left = idle_stopped_error("abc", 1800, "30 min", when, Run())
    assert "left running for its detached run: Detached run 1" in str(left)
    assert "attach('abc')" in str(left) and "close(force=True)" in str(left)
