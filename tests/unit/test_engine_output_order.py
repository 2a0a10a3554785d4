"""``ExecResult.output``: both streams in the order their bytes arrived."""

from __future__ import annotations

from trainjob_magics.engine.exec.client import STDERR, STDOUT, Collector
from trainjob_magics.engine.exec.output import SpillDir
from trainjob_magics.engine.python.results import Outcome, python_result, read_outcome
from trainjob_magics.engine.result import ExecResult


def add(collector: Collector, channel: int, data: bytes) -> None:
    collector.add(channel, memoryview(data))


def test_output_interleaves_the_streams_in_arrival_order() -> None:
    collector = Collector(None)
    for i in range(1000):
        add(collector, STDOUT, f"out{i}\n".encode())
        add(collector, STDERR, f"err{i}\n".encode())
    result = collector.result(0, 0.0, "p")
    assert result.output == "".join(f"out{i}\nerr{i}\n" for i in range(1000))
    assert result.stdout == "".join(f"out{i}\n" for i in range(1000))
    assert result.stderr == "".join(f"err{i}\n" for i in range(1000))
    assert len(collector.runs) == 2000


def test_runs_of_one_stream_are_one_entry() -> None:
    collector = Collector(None)
    for _ in range(500):
        add(collector, STDOUT, b"x" * 100)
    assert collector.runs == [[STDOUT, 50_000]]


def test_a_character_cut_by_the_other_stream_stays_whole() -> None:
    collector = Collector(None)
    euro = "€".encode()
    add(collector, STDOUT, b"a" + euro[:1])
    add(collector, STDERR, b"warn\n")
    add(collector, STDOUT, euro[1:] + b"b\n")
    assert collector.result(0, 0.0, "p").output == "a" + "warn\n" + "€b\n"


def test_output_of_spilled_streams_and_of_a_snapshot() -> None:
    collector = Collector(None, limit=1000, spill_dir=SpillDir("order"))
    for i in range(300):
        add(collector, STDOUT, f"o{i}\n".encode())
        add(collector, STDERR, f"e{i}\n".encode())
    snap = collector.snapshot(0.0, "p")
    assert snap.output == "".join(f"o{i}\ne{i}\n" for i in range(300))
    add(collector, STDOUT, b"late\n")
    result = collector.result(0, 0.0, "p")
    assert result.stdout_path is not None and result.stderr_path is not None
    assert result.output == "".join(f"o{i}\ne{i}\n" for i in range(300)) + "late\n"


def test_output_without_an_order_is_stdout_then_stderr() -> None:
    assert ExecResult("a\n", "b\n", 0).output == "a\nb\n"
    assert ExecResult().output == ""


def test_python_result_output_keeps_the_order_and_drops_the_result_frame() -> None:
    nonce = "\x1etrainjob-magics-0123\x1e"
    collector = Collector(None)
    add(collector, STDOUT, b"one\n")
    add(collector, STDERR, b"warning\n")
    add(collector, STDOUT, b"two\n" + nonce.encode() + b'{"ok": true}\n')
    exec_result = collector.result(0, 0.0, "p")
    outcome = read_outcome(exec_result, nonce)
    py = python_result(exec_result, outcome)
    assert py.stdout == "one\ntwo\n" and py.stderr == "warning\n"
    assert py.output == "one\nwarning\ntwo\n"
    assert python_result(ExecResult("x\n", "y\n", 0), Outcome("x\n", None)).output == "x\ny\n"
