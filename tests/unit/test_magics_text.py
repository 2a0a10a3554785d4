"""Text rendering: terminal-like buffer, throttle, streamed text output, status tables."""

from __future__ import annotations

import dataclasses
import io
import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from trainjob_magics.engine.result import JobStatus, PodInfo
from trainjob_magics.magics.views.status_text import (
    format_age,
    format_sessions,
    format_status,
    status_change_line,
)
from trainjob_magics.magics.views.text import (
    ScreenBuffer,
    TextOutputView,
    Throttle,
    footer_text,
    hidden_note,
    strip_ansi,
)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_buffer_lines_and_partials() -> None:
    b = ScreenBuffer()
    assert b.feed("stdout", "a\nb", want=5) == [("stdout", "a")]
    assert b.feed("stdout", "c\n", want=5) == [("stdout", "bc")]
    assert b.feed("stdout", "d\n") == []  # nothing asked for: nothing split
    b.feed("stderr", "warn")
    assert b.view() == [("stdout", "a"), ("stdout", "bc"), ("stdout", "d"), ("stderr", "warn")]


def test_carriage_return_overwrites_like_a_terminal() -> None:
    b = ScreenBuffer()
    b.feed("stderr", "progress 10%\rprogress 50%\rprogress 100%\n")
    assert b.view() == [("stderr", "progress 100%")]
    b.feed("stdout", "abcdef\rXY")
    assert b.partials() == [("stdout", "XYcdef")]
    b.feed("stdout", "\r\n")
    assert b.lines[-1] == ("stdout", "XYcdef")
    b.feed("stdout", "x\r\ny\n")  # CRLF ends lines
    assert list(b.lines)[-2:] == [("stdout", "x"), ("stdout", "y")]


def test_cr_split_across_chunks() -> None:
    b = ScreenBuffer()
    for chunk in ["12", "%\r", "50", "%", "\r10", "0%", "\n"]:
        b.feed("stdout", chunk)
    assert b.view() == [("stdout", "100%")]


def test_cap_keeps_last_lines_and_counts_hidden() -> None:
    b = ScreenBuffer(max_lines=3)
    b.feed("stdout", "".join(f"{i}\n" for i in range(10)))
    assert [t for _, t in b.view()] == ["7", "8", "9"]
    assert b.hidden == 7 and b.total == 10


def test_long_line_is_cut() -> None:
    b = ScreenBuffer(max_line_chars=5)
    b.feed("stdout", "x" * 12 + "\n")
    assert b.lines[0] == ("stdout", "xxxxx … [7 more characters]")


def test_throttle_limits_rate() -> None:
    clock = Clock()
    t = Throttle(0.1, clock)
    assert t.ready()
    assert not t.ready()
    clock.t = 0.05
    assert not t.ready()
    clock.t = 0.11
    assert t.ready()


def test_hidden_note_and_footer() -> None:
    assert hidden_note(1234, "r.stdout") == "[… 1,234 lines hidden; the full output is in r.stdout]"
    assert footer_text(0, 1.234, "p-0") == "exit code 0 · 1.23 s · pod p-0"
    assert footer_text(None, 2, extra="interrupted") == "no exit code · 2.00 s · interrupted"


def test_strip_ansi() -> None:
    assert strip_ansi("\x1b[31mred\x1b[0m \x1b]0;title\x07ok") == "red ok"


def _view(max_lines: int = 1000) -> tuple[TextOutputView, io.StringIO, io.StringIO, Clock]:
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    v = TextOutputView(
        max_lines=max_lines, interval=0.1, where="res.stdout", stdout=out, stderr=err, clock=clock
    )
    return v, out, err, clock


def test_text_view_streams_lines_live_to_their_streams() -> None:
    v, out, err, _ = _view()
    v.write("stdout", "hello\n")
    assert out.getvalue() == "hello\n"
    v.write("stderr", "oops\n")
    assert err.getvalue() == "oops\n"
    v.finish("exit code 0 · 0.10 s")
    assert out.getvalue().endswith("exit code 0 · 0.10 s\n")


def test_text_view_progress_bar_is_throttled_and_overwritten() -> None:
    v, _, err, clock = _view()
    for i in range(100):
        v.write("stderr", f"\r{i:3d}%")
    shown = err.getvalue()
    assert shown.count("\r") <= 2  # first update only; the rest within the same interval
    clock.t = 1.0
    v.tick()
    assert err.getvalue().endswith("\r 99%")
    v.write("stderr", "\rdone\n")
    assert err.getvalue().endswith("\rdone\n")


def test_text_view_caps_and_prints_tail_with_note() -> None:
    v, out, _, _ = _view(max_lines=20)
    v.write("stdout", "".join(f"line {i}\n" for i in range(1000)))
    v.finish("exit code 0 · 1.00 s")
    lines = out.getvalue().splitlines()
    assert lines[:20] == [f"line {i}" for i in range(20)]
    assert lines[20] == "[… 978 lines hidden; the full output is in res.stdout]"
    assert lines[21:23] == ["line 998", "line 999"]
    assert lines[-1] == "exit code 0 · 1.00 s"


def test_text_view_unfinished_line_printed_at_finish() -> None:
    v, out, _, _ = _view()
    v.write("stdout", "no newline")
    v.finish()
    assert out.getvalue().endswith("no newline\n")


def _status(state: str = "Running") -> JobStatus:
    now = datetime.now(timezone.utc)
    pods = [
        PodInfo(
            "j-launcher-0",
            "launcher",
            "Running",
            True,
            "local",
            0,
            now - timedelta(seconds=75),
            "",
            True,
        ),
        PodInfo("j-node-0", "node", "Pending", False, "", 2, now, "ContainerCreating", False),
    ]
    return JobStatus(
        "j", "default", "mpi-interactive", state, "waiting for pods", pods, "j-launcher-0", 12.5
    )


def test_format_status_table() -> None:
    text = format_status(_status())
    lines = text.splitlines()
    assert (
        lines[0]
        == "TrainJob j · namespace default · runtime mpi-interactive · Running · elapsed 12s"
    )
    assert "waiting for pods" in lines[1]
    assert lines[2].split() == [
        "NAME",
        "ROLE",
        "PHASE",
        "READY",
        "NODE",
        "RESTARTS",
        "AGE",
        "WAITING",
    ]
    assert lines[3].split()[:7] == ["j-launcher-0", "*", "launcher", "Running", "yes", "local", "0"]
    assert "1m15s" in lines[3] or "1m16s" in lines[3]
    assert lines[4].split()[-1] == "ContainerCreating"


def test_status_change_line() -> None:
    line = status_change_line(_status("Pending"))
    assert line == "[12s] j: Pending, 1/2 pods running (ContainerCreating) - waiting for pods"


def test_format_age() -> None:
    now = datetime(2024, 1, 1, tzinfo=timezone.utc)
    assert format_age(None) == "-"
    assert format_age(now - timedelta(seconds=5), now) == "5s"
    assert format_age(now - timedelta(hours=2, minutes=5), now) == "2h05m"
    assert format_age(now - timedelta(days=3), now) == "3d0h"


def test_format_sessions_empty() -> None:
    assert "%trainjob_connect" in format_sessions([])


def test_hidden_note_names_the_spill_file() -> None:
    note = hidden_note(5, "_trainjob.stdout", "/tmp/x/p-stdout-1.out")
    assert note == (
        "[… 5 lines hidden; the full output is in _trainjob.stdout, stored in the file "
        "/tmp/x/p-stdout-1.out]"
    )


# ------------------------------------------------------------------ whole chunks


class Terminal:
    """Reference model, one character at a time: what ScreenBuffer must show for any chunking."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.lines: list[tuple[str, str]] = []
        self.partial: dict[str, list[Any]] = {}  # stream -> [text, cursor, overflow]

    def feed(self, stream: str, text: str) -> None:
        for ch in text:
            line = self.partial.setdefault(stream, ["", 0, 0])
            if ch == "\n":
                self.lines.append((stream, self.shown(line)))
                del self.partial[stream]
            elif ch == "\r":
                line[1] = 0
            else:
                t, cur, over = line
                if cur < self.cap:
                    t = t[:cur] + ch + t[cur + 1 :]
                else:
                    over = max(over, cur + 1 - self.cap)
                line[:] = [t, cur + 1, over]

    def shown(self, line: list[Any]) -> str:
        return f"{line[0]} … [{line[2]} more characters]" if line[2] else line[0]

    def view(self, max_lines: int) -> list[tuple[str, str]]:
        partials = [
            (n, self.shown(line)) for n, line in sorted(self.partial.items()) if line[0] or line[2]
        ][::-1]
        return self.lines[-max_lines:] + partials


PIECES = ["a", "bc", "é", "€uro", "\r", "\n", "\r\n", "\n\n", "progress 10%\r", "long" * 5]


def _random_chunks(rng: random.Random, n: int) -> list[tuple[str, str]]:
    text = "".join(rng.choice(PIECES) for _ in range(n))
    chunks, i = [], 0
    while i < len(text):
        j = i + rng.choice([1, 2, 3, 7, 40, 300])
        chunks.append((rng.choice(["stdout", "stdout", "stderr"]), text[i:j]))
        i = j
    return chunks


@pytest.mark.parametrize("max_lines,cap", [(1, 3), (3, 5), (10, 12), (1000, 10000)])
def test_any_chunking_shows_what_a_terminal_shows(max_lines: int, cap: int) -> None:
    rng = random.Random(f"{max_lines}-{cap}")
    for _ in range(60):
        chunks = _random_chunks(rng, rng.choice([5, 50, 400]))
        b, ref = ScreenBuffer(max_lines=max_lines, max_line_chars=cap), Terminal(cap)
        for stream, text in chunks:
            before = len(ref.lines)
            ref.feed(stream, text)
            want = rng.choice([0, 1, 2, 1000])
            assert b.feed(stream, text, want=want) == ref.lines[before:][:want]
        assert b.view() == ref.view(max_lines), chunks
        assert b.total == len(ref.lines)
        assert b.hidden == max(0, len(ref.lines) - max_lines)


def test_one_huge_chunk_keeps_only_the_last_lines() -> None:
    b = ScreenBuffer(max_lines=3)
    b.feed("stdout", "".join(f"{i}\n" for i in range(100)) + "par")
    b.feed("stderr", "e\n")
    assert b.view() == [("stdout", "98"), ("stdout", "99"), ("stderr", "e"), ("stdout", "par")]
    assert (b.total, b.hidden) == (101, 98)
    assert sum(block[2] for block in b._blocks) <= 3 * 4  # the big block was cut, not kept


def test_interleaved_streams_keep_their_order_across_chunks() -> None:
    b = ScreenBuffer()
    b.feed("stdout", "o1\no2")
    b.feed("stderr", "e1\ne2\n")
    b.feed("stdout", "+\no3\n")
    b.feed("stderr", "e3")
    assert b.view() == [
        ("stdout", "o1"),
        ("stderr", "e1"),
        ("stderr", "e2"),
        ("stdout", "o2+"),
        ("stdout", "o3"),
        ("stderr", "e3"),
    ]


def test_tqdm_bar_in_one_chunk_shows_its_last_state() -> None:
    bar = "".join(f"\r{i:3d}%|{'#' * (i // 10):<10}| {i}/100" for i in range(101))
    b = ScreenBuffer()
    b.feed("stderr", bar)
    assert b.partials() == [("stderr", "100%|##########| 100/100")]
    b.feed("stderr", "\nnext\n")
    assert [t for _, t in b.view()] == ["100%|##########| 100/100", "next"]


def test_long_lines_in_a_chunk_are_cut_and_counted() -> None:
    b = ScreenBuffer(max_line_chars=4)
    b.feed("stdout", "abcdefgh\nxy\n" + "z" * 50 + "\rQ\n")
    assert [t for _, t in b.view()] == [
        "abcd … [4 more characters]",
        "xy",
        "Qzzz … [46 more characters]",
    ]


def test_utf8_and_crlf_split_anywhere_by_the_exec_stream() -> None:
    """Bytes cut at every position (inside a multi-byte character, between \\r and \\n) reach
    the buffer through the engine's incremental decoding and show the same lines."""
    from trainjob_magics.engine.exec.frames import STDOUT
    from trainjob_magics.engine.exec.streams import Collector

    data = "héllo wörld €100\r\nløst 50%\r100%\r\nend 🙂\n".encode()
    expected = ["héllo wörld €100", "100% 50%", "end 🙂"]
    for i in range(1, len(data)):
        for j in range(i, len(data)):
            b = ScreenBuffer()
            c = Collector(b.feed, limit=None)
            for piece in (data[:i], data[i:j], data[j:]):
                if piece:
                    c.add(STDOUT, memoryview(piece))
            c.flush()
            assert [t for _, t in b.view()] == expected, (i, j)


def test_text_view_prints_the_first_lines_of_a_big_chunk_live() -> None:
    v, out, _, _ = _view(max_lines=1000)
    v.write("stdout", "".join(f"{i}\n" for i in range(2500)))
    assert out.getvalue() == "".join(f"{i}\n" for i in range(1000))  # before finish
    v.finish("exit code 0 · 1.00 s")
    lines = out.getvalue().splitlines()
    assert lines[1000] == "[… 1,400 lines hidden; the full output is in res.stdout]"
    assert lines[1001:-1] == [str(i) for i in range(2400, 2500)]


def test_text_view_interleaves_streams_in_order() -> None:
    out, clock = io.StringIO(), Clock()
    v = TextOutputView(max_lines=20, stdout=out, stderr=out, clock=clock, where="r.stdout")
    v.write("stdout", "o1\n")
    v.write("stderr", "e1\ne2\n")
    v.write("stdout", "o2\n")
    assert out.getvalue() == "o1\ne1\ne2\no2\n"  # live, in arrival order
    v.write("stdout", "".join(f"{i}\n" for i in range(20)))
    v.write("stderr", "e3\n")
    v.write("stdout", "o3\n")
    v.finish()
    note = "[… 4 lines hidden; the full output is in r.stdout]"
    assert out.getvalue().endswith(f"\n15\n{note}\ne3\no3\n")


def test_text_view_ends_a_shown_progress_line_that_finished_past_the_cap() -> None:
    v, out, err, _ = _view(max_lines=2)
    v.write("stdout", "one\n50%")
    assert out.getvalue() == "one\n50%"
    v.write("stderr", "warn\n")  # the last line within the cap
    v.write("stdout", "\rdone\nmore\n")
    v.finish()
    assert err.getvalue() == "warn\n"
    assert out.getvalue() == "one\n50%\n[… 1 line hidden; the full output is in res.stdout]\nmore\n"


def _mpi_wait(state: str, running: int, reasons: tuple[str, ...], elapsed: float) -> JobStatus:
    """A 3-node MPI job as connect() reports it while its two node pods start (the engine's
    message carries its own count)."""
    pods = [
        PodInfo(
            f"j-node-0-{i}",
            "node",
            "Running" if i < running else "Pending",
            i < running,
            "local",
            0,
            None,
            reasons[i] if i < len(reasons) else "",
            False,
        )
        for i in range(2)
    ]
    if state == "Creating":
        pods, message = [], "waiting for the pods to be created"
    elif state == "Running":
        message = "trainer pod j-launcher-0-0 is running"
    else:
        message = f"waiting for the launcher pod ({running}/2 node pods running)"
    return JobStatus("j", "default", "mpi-interactive", state, message, pods, None, elapsed)


def test_text_progress_says_the_pod_count_once_and_at_most_a_line_a_second(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Terminal IPython: a line when the state changes, else at most one a second (a change
    held back is printed at the next tick a second on); the pod count said once."""
    from trainjob_magics.magics.views.status import ConnectStatusView

    clock = [0.0]
    view = ConnectStatusView(widgets=False, clock=lambda: clock[0])
    first_second = [
        _mpi_wait("Creating", 0, (), 0.05),
        _mpi_wait("Pending", 0, (), 0.1),
        _mpi_wait("Pending", 0, ("ContainerCreating",), 0.2),
        _mpi_wait("Pending", 0, ("ContainerCreating", "ContainerCreating"), 0.3),
        _mpi_wait("Pending", 1, ("", "ContainerCreating"), 0.5),
        _mpi_wait("Pending", 1, ("",), 0.7),
        _mpi_wait("Pending", 2, (), 0.9),
    ]
    for status in first_second:
        clock[0] = status.elapsed
        view.update(status)
        view.tick()
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "[0s] j: Creating - waiting for the pods to be created",
        "[0s] j: Pending, 0/2 pods running - waiting for the launcher pod",
    ]
    clock[0] = 1.2  # a second on: the last change held back is printed, once
    view.tick()
    view.tick()
    assert capsys.readouterr().out.splitlines() == [
        "[0s] j: Pending, 2/2 pods running - waiting for the launcher pod"
    ]
    clock[0] = 1.3  # a new state is printed at once
    view.update(_mpi_wait("Running", 2, (), 1.3))
    assert capsys.readouterr().out.splitlines() == [
        "[1s] j: Running, 2/2 pods running - trainer pod j-launcher-0-0 is running"
    ]


def test_the_progress_line_counts_the_pods_the_job_will_have() -> None:
    """Issue 36, defect 6: 2 node pods of an MPI job of 3 (its launcher not created yet) read
    0/3, not 0/2."""
    status = dataclasses.replace(_mpi_wait("Pending", 0, (), 0.1), pods_expected=3)
    assert status_change_line(status) == (
        "[0s] j: Pending, 0/3 pods running - waiting for the launcher pod"
    )
