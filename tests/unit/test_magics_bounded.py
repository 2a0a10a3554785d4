"""Bounded memory on the magics side: the worker pump's backpressure, the views' tails, the
partial-result tail, and the footer after a ``^C`` echoed by a terminal."""

from __future__ import annotations

import io
import os
import select
import threading
import time
from typing import Any

import pytest

from trainjob_magics.magics.views.pods import PrefixedTextView
from trainjob_magics.magics.views.text import TextOutputView, echoes_ctrl_c
from trainjob_magics.magics.worker import Pump, join_text

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------ Pump


def test_pump_bounds_queued_text_when_the_screen_is_slow() -> None:
    pump = Pump(interval=0.01, max_pending=10_000)
    chunk = "x" * 1000
    peak = {"pending": 0}
    got: list[int] = []

    def work(emit: Any) -> str:
        for _ in range(300):
            emit("stdout", chunk)
            peak["pending"] = max(peak["pending"], pump.pending)
        return "done"

    def handle(stream: str, text: str) -> None:
        got.append(len(text))
        time.sleep(0.0005)  # a screen slower than the producer

    assert pump.run(work, handle) == "done"
    assert sum(got) == 300_000  # nothing lost, in order
    assert peak["pending"] <= 10_000 + len(chunk)


def test_pump_cancel_releases_a_blocked_producer() -> None:
    pump = Pump(interval=0.01, max_pending=10)
    released = threading.Event()

    def work(emit: Any) -> None:
        for _ in range(100):
            emit("stdout", "0123456789")
        released.set()

    def handle(stream: str, text: str) -> None:
        raise KeyboardInterrupt  # what Ctrl-C does in the cell's thread

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pump.run(work, handle)
    assert released.wait(2), "the producer stayed blocked after the caller stopped"
    assert pump.join(2) and time.monotonic() - t0 < 2
    assert pump.pending == 0


def test_pump_explicit_cancel_drops_events_and_unblocks() -> None:
    pump = Pump(max_pending=5)
    pump.emit("stdout", "12345")  # fills it; nobody consumes (run not called)
    t = threading.Thread(target=pump.emit, args=("stdout", "more"), daemon=True)
    t.start()
    time.sleep(0.2)
    assert t.is_alive()  # waiting for room
    pump.cancel()
    t.join(1)
    assert not t.is_alive()
    assert pump.pending == 0 and not pump._events


def test_pump_returns_value_raises_error_and_keeps_order() -> None:
    seen: list[Any] = []
    assert Pump().run(lambda emit: [emit(i) for i in range(50)] and 7, seen.append) == 7
    assert seen == list(range(50))

    def boom(emit: Any) -> None:
        emit("x")
        raise ValueError("bad")

    pump = Pump()
    with pytest.raises(ValueError, match="bad"):
        pump.run(boom, seen.append)
    assert isinstance(pump.error, ValueError)


def test_join_text_merges_runs_of_one_pod_and_stream_in_order() -> None:
    events = [
        ("out", "p", "stdout", "a"),
        ("out", "p", "stdout", "b"),
        ("out", "p", "stderr", "c"),
        ("out", "q", "stderr", "d"),
        ("out", "q", "stderr", "e"),
        ("done", "q", None, None),
        ("out", "p", "stdout", "f"),
    ]
    assert join_text(events) == [
        ("out", "p", "stdout", "ab"),
        ("out", "p", "stderr", "c"),
        ("out", "q", "stderr", "de"),
        ("done", "q", None, None),
        ("out", "p", "stdout", "f"),
    ]


def test_pump_hands_batches_to_merge_and_loses_nothing() -> None:
    release = threading.Event()
    batches: list[int] = []
    got: list[str] = []

    def work(emit: Any) -> None:
        for i in range(500):
            emit("out", "p", "stdout", f"{i}\n")
        release.set()

    def merge(events: list[Any]) -> list[Any]:
        batches.append(len(events))
        return join_text(events)

    def handle(kind: str, pod: str, stream: str, text: str) -> None:
        release.wait(10)  # the first batch waits until everything is queued
        got.append(text)

    Pump(interval=0.01).run(work, handle, merge=merge)
    assert "".join(got) == "".join(f"{i}\n" for i in range(500))
    assert sum(batches) == 500 and len(got) < 500  # later events came in joined batches


# ------------------------------------------------------------------ tails


def test_text_view_keeps_a_bounded_tail() -> None:
    out = io.StringIO()
    view = TextOutputView(max_lines=100, stdout=out, stderr=out, interval=0)
    for i in range(200):
        view.write("stdout", "".join(f"line {i}-{j}\n" for j in range(1000)))
    assert len(view.buffer.lines) == 10 and len(view.buffer._blocks) <= 2
    view.output_path = "/tmp/spill.out"
    view.finish("exit code 0")
    text = out.getvalue()
    assert "line 199-999\n" in text and "stored in the file /tmp/spill.out" in text
    assert "[… 199,890 lines hidden;" in text  # 200,000 lines: 100 shown live, 10 in the tail


def test_prefixed_view_bounds_a_line_without_newline() -> None:
    out = io.StringIO()
    view = PrefixedTextView([("p", "node-0")], stdout=out, stderr=out, max_line_chars=100)
    for _ in range(1000):
        view.write("p", "stdout", "y" * 1000)
    assert len(view._partial[("p", "stdout")]) <= 100
    view.write("p", "stdout", "z\n")
    assert out.getvalue() == f"[node-0] {'y' * 100} … [{1000 * 1000 + 1 - 100} more characters]\n"
    view.write("p", "stdout", "abc\rok\n")
    assert out.getvalue().endswith("[node-0] ok\n")


# ------------------------------------------------------------------ ^C in a terminal


def _pty_stream() -> tuple[int, Any]:
    master, slave = os.openpty()
    return master, os.fdopen(slave, "w", encoding="utf-8")


def _read(master: int) -> str:
    """Everything written to the pty so far (one read may return only part of it)."""
    chunks = []
    while select.select([master], [], [], 0.2)[0]:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_footer_starts_a_new_line_after_an_echoed_ctrl_c() -> None:
    master, stream = _pty_stream()
    try:
        assert echoes_ctrl_c(stream)  # a fresh pty shows ^C, as terminals do
        view = TextOutputView(stdout=stream, stderr=stream)
        view.write("stdout", "started\n")
        view.finish("no exit code · 1.00 s · interrupted", ok=False, interrupted=True)
        assert _read(master) == "started\n\nno exit code · 1.00 s · interrupted\n"
    finally:
        stream.close()
        os.close(master)


def test_footer_not_pushed_down_without_a_terminal_or_interrupt() -> None:
    out = io.StringIO()
    assert not echoes_ctrl_c(out)
    view = TextOutputView(stdout=out, stderr=out)
    view.write("stdout", "started\n")
    view.finish("no exit code · 1.00 s · interrupted", ok=False, interrupted=True)
    assert out.getvalue() == "started\nno exit code · 1.00 s · interrupted\n"

    master, stream = _pty_stream()
    try:
        view = TextOutputView(stdout=stream, stderr=stream)
        view.write("stdout", "done\n")
        view.finish("exit code 0 · 1.00 s")  # not interrupted: no ^C on the screen
        assert _read(master) == "done\nexit code 0 · 1.00 s\n"
    finally:
        stream.close()
        os.close(master)


def test_prefixed_summary_starts_a_new_line_after_an_echoed_ctrl_c() -> None:
    master, stream = _pty_stream()
    try:
        view = PrefixedTextView([("p", "node-0")], stdout=stream, stderr=stream)
        view.write("p", "stdout", "hi\n")
        view.finish("interrupted", ok=False, interrupted=True)
        assert _read(master) == "[node-0] hi\n\ninterrupted\n"
    finally:
        stream.close()
        os.close(master)
