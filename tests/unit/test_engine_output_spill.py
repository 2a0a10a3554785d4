"""Bounded output capture: memory up to a limit, then a spill file owned by the result."""

from __future__ import annotations

import gc
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainjob_magics.engine.exec.client import STDERR, STDOUT, Collector
from trainjob_magics.engine.exec.output import (
    ROOT_PREFIX,
    OutputBuffer,
    SpillDir,
    sweep_stale_roots,
)
from trainjob_magics.engine.result import ExecResult


def feed(collector: Collector, channel: int, data: bytes, step: int = 1000) -> None:
    for i in range(0, len(data), step):
        collector.add(channel, memoryview(data[i : i + step]))


def test_output_under_the_limit_stays_in_memory() -> None:
    collector = Collector(None, limit=10_000, spill_dir=SpillDir("t"))
    feed(collector, STDOUT, b"a" * 10_000)  # exactly the limit: no spill
    result = collector.result(0, 0.0, "p")
    assert result.stdout_path is None and result.stderr_path is None
    assert result.stdout_size == 10_000 and result.stdout == "a" * 10_000


def test_output_over_the_limit_spills_and_stays_byte_exact() -> None:
    spill = SpillDir("sess-1")
    data = "é€😀x".encode() * 3001  # multi-byte characters cut at chunk and spill boundaries
    collector = Collector(None, pod="pod-a", limit=4096, spill_dir=spill)
    feed(collector, STDOUT, data, step=777)
    feed(collector, STDERR, b"small")
    buffer = collector.buffers[STDOUT]
    assert buffer.chunks == []  # nothing of stdout is held in memory any more
    result = collector.result(3, 0.0, "pod-a")
    path = result.stdout_path
    assert path is not None and Path(path).parent == Path(spill.path or "")
    assert Path(path).name.startswith("pod-a-stdout-")
    assert result.stdout_size == len(data) == os.path.getsize(path)
    assert result.stdout_bytes == data
    assert result.stdout == data.decode()
    assert result.stderr_path is None and result.stderr == "small"
    assert "bytes in" in repr(result) and path in repr(result)


def test_spill_file_is_removed_with_its_result_and_dir_on_close() -> None:
    spill = SpillDir("sess-2")
    collector = Collector(None, limit=10, spill_dir=spill)
    feed(collector, STDOUT, b"z" * 100)
    result = collector.result(0, 0.0, "p")
    path = result.stdout_path
    assert path is not None and os.path.exists(path)
    spill.close()  # a result still holds a file: the directory stays, the result stays readable
    assert os.path.isdir(spill.path or "") and result.stdout == "z" * 100
    del result, collector
    gc.collect()
    assert not os.path.exists(path)
    spill.close()
    assert not os.path.exists(spill.path or "")


def test_partial_then_final_result_share_one_spill() -> None:
    buffer = OutputBuffer(5, SpillDir("sess-3"), "x-")
    buffer.add(b"0123456789")
    first, second = buffer.freeze(), buffer.freeze()
    assert first is second and first.read_bytes() == b"0123456789"


def test_sinks_get_raw_bytes_and_bypass_collection() -> None:
    got: list[bytes] = []
    err_file = io.BytesIO()
    seen: list[tuple[str, str]] = []
    collector = Collector(
        lambda s, t: seen.append((s, t)), sinks={STDOUT: got.append, STDERR: err_file}
    )
    collector.add(STDOUT, memoryview(b"\xff\x00raw"))
    collector.add(STDERR, memoryview(b"err"))
    result = collector.result(0, 0.0, "p")
    assert got == [b"\xff\x00raw"] and isinstance(got[0], bytes)
    assert err_file.getvalue() == b"err"
    assert result.stdout_bytes == b"" and result.stderr == "" and seen == []


def test_exec_result_keeps_dataclass_like_construction() -> None:
    r = ExecResult("out", "err", 0, 1.5, b"out", b"err", "pod")
    assert (r.stdout, r.stderr, r.returncode, r.duration, r.pod, r.ok) == (
        "out",
        "err",
        0,
        1.5,
        "pod",
        True,
    )
    assert r == ExecResult(stdout="out", stderr="err", returncode=0, duration=1.5, pod="pod")
    assert r != ExecResult("out", "err", 1, 1.5, pod="pod")
    r.stdout = "new"
    r.pod = "other"
    assert r.stdout_bytes == b"new" and r.stdout_size == 3 and r.pod == "other"
    empty = ExecResult("", "", None, 0.5)
    assert empty.stdout_bytes == b"" and empty.stdout_path is None and not empty.ok


def test_sweep_removes_roots_of_dead_processes_only(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    dead_root = tmp_path / f"{ROOT_PREFIX}{dead.stdout.strip()}-abc"
    live_root = tmp_path / f"{ROOT_PREFIX}{os.getpid()}-def"
    other = tmp_path / "unrelated-1"
    for d in (dead_root, live_root, other):
        (d / "s").mkdir(parents=True)
    assert sweep_stale_roots(str(tmp_path)) == [str(dead_root)]
    assert not dead_root.exists() and live_root.exists() and other.exists()


@pytest.mark.parametrize("bad", [-1, 1.5, "64M", True])
def test_max_memory_output_is_validated(bad: object) -> None:
    from trainjob_magics.engine.errors import InvalidInputError
    from trainjob_magics.engine.validation import validate_max_memory_output

    with pytest.raises(InvalidInputError, match="max_memory_output"):
        validate_max_memory_output(bad)


def test_live_snapshot_keeps_the_output_so_far(tmp_path) -> None:
    """What an interrupted cell keeps when its command did not end: the engine's own buffer
    (memory up to the limit, then the spill file), not a copy in the front end."""
    spill = SpillDir("snap")
    collector = Collector(None, pod="p", limit=1000, spill_dir=spill)
    lines = [f"{i:09d}\n".encode() for i in range(10_000)]
    for line in lines[:5000]:
        collector.add(STDOUT, memoryview(line))
    first = collector.snapshot(time.monotonic(), "p")
    for line in lines[5000:]:
        collector.add(STDOUT, memoryview(line))
    assert first.returncode is None and first.pod == "p"
    assert first.stdout.startswith("000000000\n") and "000004999\n" in first.stdout
    final = collector.result(0, time.monotonic(), "p")
    assert final.stdout == b"".join(lines).decode() and final.stdout_path is not None
    spill.close()
