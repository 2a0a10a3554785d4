"""Per-rank output of torchrun (engine/exec/torchrun_*.py) over output recorded from the real
torchrun (tests/unit/data/torchrun/README.md says which and how), through the exec's
RankedStreams as a command's streams reach it."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from trainjob_magics.engine.exec.ranks import RankedStreams, RankEvent
from trainjob_magics.engine.exec.torchrun_demux import chain
from trainjob_magics.engine.exec.torchrun_report import TorchFailure, parse_report
from trainjob_magics.engine.exec.torchrun_runs import (
    TEMPLATE,
    TorchRankOutput,
    TorchRun,
    global_rank_rule,
    torch_run,
)
from trainjob_magics.engine.result import ExecResult

DATA = Path(__file__).parent / "data" / "torchrun"
MPI_DATA = Path(__file__).parent / "data" / "mpi"
TOKEN = "tjm0123456789abcdef"
DEFAULT_TAG = re.compile(rb"\[default(\d+)\]:")
TEMPLATE_TAG = re.compile(rb"\x1e(\d+):(\d+)\x1f")

V113 = "1.13.0a0+gitunknown"
V26 = "2.6.0+debian"


def words(form: str, version: str, nproc: int, **kw: str) -> str:
    """A tbegin marker's words (the prelude's order)."""
    w = {"n": "1", "role": "default", "backend": "static", "nnodes": "1:1", "node_rank": "0"}
    w.update(job_nproc="-", given="1", launcher="torchrun", host="node-0")
    w.update(kw)
    return (
        f"{w['n']} {form} {w['role']} {w['backend']} {w['nnodes']} {w['node_rank']} {nproc} "
        f"{w['job_nproc']} {w['given']} {w['launcher']} {version} {w['host']}"
    )


def begin(marker_words: str) -> bytes:
    return f"\x1e{TOKEN} tbegin {marker_words}\n".encode()


def end(rc: int, n: int = 1) -> bytes:
    return f"\x1e{TOKEN} tend {n} {rc}\n".encode()


def recorded(name: str, stream: str) -> bytes:
    return (DATA / f"{name}.{stream}").read_bytes()


def command_streams(name: str, marker_words: str, rc: int) -> dict[int, bytes]:
    """What the exec carries for ``echo before; torchrun ...; echo after`` on each stream."""
    b = begin(marker_words)
    return {
        1: b"before\n" + b + recorded(name, "stdout") + end(rc) + b"after\n",
        2: b + recorded(name, "stderr") + end(rc),
    }


def feed(
    streams: dict[int, bytes], sizes: list[int] | None = None, events: list[RankEvent] | None = None
) -> ExecResult:
    """The streams through RankedStreams (the exec's sink), interleaved chunk by chunk
    (``sizes`` repeated; None: whole); returns the ExecResult."""
    ranked = RankedStreams(
        TOKEN,
        pod="job-node-0-0-abcde",
        limit=None,
        spill_dir=None,
        on_output=None,
        on_ranks=events.append if events is not None else None,
        chain=chain(TOKEN, "job-node-0-0-abcde"),
    )
    at = {1: 0, 2: 0}
    i = 0
    while any(at[ch] < len(data) for ch, data in streams.items()):
        for ch, data in streams.items():
            step = sizes[i % len(sizes)] if sizes else len(data) or 1
            i += 1
            piece = data[at[ch] : at[ch] + step]
            at[ch] += step
            if piece:
                ranked.take(ch, memoryview(piece) if i % 3 == 0 else piece)
    return ranked.finish(None)


def oracle(data: bytes, tag: re.Pattern[bytes]) -> tuple[bytes, dict[int, bytes], bytes]:
    """The untagged bytes, each tag's text and the untagged lines of a recorded stream, read
    the simple way: a tag's text runs to the next tag or newline; an untagged line is the
    launcher's."""
    plain, ranks, launcher = b"", {}, b""
    owner: int | None = None
    pos = 0
    while pos < len(data):
        m = tag.search(data, pos)
        nl = data.find(b"\n", pos)
        stop = min(x for x in (m.start() if m else len(data), nl + 1 if nl >= 0 else len(data)))
        text = data[pos:stop]
        plain += text
        if owner is None:
            launcher += text
        else:
            ranks[owner] = ranks.get(owner, b"") + text
        if text.endswith(b"\n"):
            owner = None
        if m is not None and stop == m.start():
            owner = int(m.group(1))
            pos = m.end()
        else:
            pos = stop
    return plain, ranks, launcher


CASES = [
    ("torch113-rank2-exit3", "default", V113, 4, 1),
    ("torch113-ok", "default", V113, 2, 0),
    ("torch113-rank1-sigkill", "default", V113, 3, 1),
    ("torch113-rank3-raise", "default", V113, 4, 1),
    ("torch113-partial-lines", "default", V113, 2, 0),
    ("torch26-rank2-exit3", "default", V26, 4, 1),
    ("torch26-template-rank2-exit3", TEMPLATE, V26, 4, 1),
    ("torch26-template-rank1-sigkill", TEMPLATE, V26, 3, 1),
    ("torch26-template-rank3-raise", TEMPLATE, V26, 4, 1),
    ("torch26-template-partial-lines", TEMPLATE, V26, 2, 0),
]
CHUNKINGS = [None, [1], [3, 1, 7], [4096], [65536, 5]]


@pytest.mark.parametrize("sizes", CHUNKINGS, ids=lambda s: f"chunks{s}")
@pytest.mark.parametrize(("name", "form", "version", "nproc", "rc"), CASES, ids=lambda c: str(c))
def test_recorded_torchrun_cut_anywhere(
    name: str, form: str, version: str, nproc: int, rc: int, sizes: list[int] | None
) -> None:
    result = feed(command_streams(name, words(form, version, nproc), rc), sizes)
    tag = TEMPLATE_TAG if form == TEMPLATE else DEFAULT_TAG
    plain = {}
    expected_ranks: dict[tuple[int, str], bytes] = {}
    for ch, stream in ((1, "stdout"), (2, "stderr")):
        plain[ch], ranks, _launcher = oracle(recorded(name, stream), tag)
        for r, text in ranks.items():
            expected_ranks[(r, stream)] = text
    assert result.stdout_bytes == b"before\n" + plain[1] + b"after\n"
    assert result.stderr_bytes == plain[2]
    by_rank = result.by_rank
    assert sorted(by_rank) == sorted({r for r, _ in expected_ranks})
    for (r, stream), text in expected_ranks.items():
        assert getattr(by_rank[r], f"{stream}_bytes") == text, (r, stream)
    for r, out in by_rank.items():
        assert isinstance(out, TorchRankOutput) and out.pod == "job-node-0-0-abcde"
        assert out.local_rank == r and out.host == "node-0"
    mpi = result.mpi
    (run,) = mpi.runs
    assert isinstance(run, TorchRun) and run.returncode == rc and run.global_ranks
    if rc == 0:
        assert run.failure is None
    else:
        assert isinstance(run.failure, TorchFailure) and run.failure.returncode == rc
    # torchrun's own lines are the launcher's, none of a rank's
    assert "Setting OMP_NUM_THREADS" in result.launcher
    assert "[default" not in result.launcher and "\x1e" not in result.launcher


def test_a_failed_rank_from_the_report_exit_code() -> None:
    result = feed(command_streams("torch113-rank2-exit3", words("default", V113, 4), 1))
    failure = result.mpi.failure
    assert (failure.rank, failure.global_rank, failure.local_rank) == (2, 2, 2)
    assert failure.exit_code == 3 and failure.signal is None and failure.cause == ""
    # both streams as they came (here: all of stdout, then stderr)
    assert failure.last_lines == ["rank 2 local 2 of 4", "last words of 2", "stderr of 2"]
    assert failure.line() == (
        "torchrun: rank 2 (local rank 2, pod job-node-0-0-abcde) failed first: exit code 3; "
        "last lines: rank 2 local 2 of 4 | last words of 2 | stderr of 2"
    )
    by_rank = result.by_rank
    assert by_rank[2].stdout == "rank 2 local 2 of 4\nlast words of 2\n"
    assert by_rank[2].stderr == "stderr of 2\n"
    assert by_rank[0].stdout == "rank 0 local 0 of 4\ndone 0\n"  # 1.13 noticed late


@pytest.mark.parametrize("name", ["torch113-rank1-sigkill", "torch26-template-rank1-sigkill"])
def test_a_rank_killed_by_a_signal(name: str) -> None:
    form = TEMPLATE if "template" in name else "default"
    result = feed(command_streams(name, words(form, V26 if form == TEMPLATE else V113, 3), 1))
    failure = result.mpi.failure
    assert (failure.rank, failure.signal, failure.signal_name) == (1, 9, "SIGKILL")
    assert failure.exit_code is None and failure.how == "signal"
    assert "failed first: killed by signal 9 (SIGKILL); last lines: rank 1 up | about to die" in (
        failure.line()
    )


@pytest.mark.parametrize("name", ["torch113-rank3-raise", "torch26-template-rank3-raise"])
def test_the_root_cause_from_the_workers_traceback(name: str) -> None:
    form = TEMPLATE if "template" in name else "default"
    result = feed(command_streams(name, words(form, V26 if form == TEMPLATE else V113, 4), 1))
    failure = result.mpi.failure
    assert (failure.rank, failure.exit_code, failure.cause) == (3, 1, "ValueError: bad batch 17")
    # the last lines: the end of the traceback the worker printed on its stderr
    assert "; root cause: ValueError: bad batch 17; last lines: " in failure.line()
    assert failure.last_lines[-1] == "ValueError: bad batch 17"


def test_partial_lines_long_lines_and_carriage_returns() -> None:
    result = feed(
        command_streams("torch113-partial-lines", words("default", V113, 2), 0), [7, 4096, 1]
    )
    by_rank = result.by_rank
    body = "\ncr\nend\n" + "x" * 9000 + "\n" + "y" * 70000 + "\né ü\n"
    # torch reads the files as text: \r and \r\n came through as \n
    assert by_rank[0].stdout == "abc0def0\nghi0" + body + "tail0"
    assert by_rank[1].stderr == "abc1def1\nghi1" + body + "tail1"
    assert by_rank[0].stderr == "" and by_rank[1].stdout == ""
    assert result.stdout == "before\n" + "abc0def0\nghi0" + body + "tail0after\n"


def test_two_static_nodes_global_ranks_from_the_template() -> None:
    marker = words(TEMPLATE, V26, 2, nnodes="2", node_rank="1", job_nproc="2", given="0")
    result = feed(command_streams("torch26-template-2nodes-node1", marker, 0), [5])
    by_rank = result.by_rank
    assert sorted(by_rank) == [2, 3]
    assert [by_rank[r].local_rank for r in (2, 3)] == [0, 1]
    assert by_rank[3].stdout == "rank 3 local 1 of 4\n" and by_rank[2].stderr == "stderr of 2\n"
    note = result.mpi.notes()
    assert note == [
        "ranks tagged by torchrun --tee 3 (global ranks from TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)"
    ]


def test_default_prefix_global_ranks_from_a_static_rendezvous() -> None:
    # node 1 of 2 with Trainer's PET_NPROC_PER_NODE=2: [default0]: is rank 2
    data = b"[default0]:a\n[default1]:b\n"
    marker = words("default", V113, 2, nnodes="2", node_rank="1", job_nproc="2", given="0")
    result = feed({1: begin(marker) + data + end(0), 2: begin(marker) + end(0)})
    assert {r: o.stdout for r, o in result.by_rank.items()} == {2: "a\n", 3: "b\n"}
    assert result.mpi.notes() == [
        "ranks tagged by torchrun --tee 3 (rank = node rank 1 * 2 + local rank)"
    ]


def test_default_prefix_local_ranks_when_the_rendezvous_is_not_static() -> None:
    data = b"[trainer0]:a\n[trainer1]:b\n[default0]:not a tag\n"
    marker = words("default", V113, 2, role="trainer", backend="c10d", nnodes="1:4")
    report = b"  rank      : 5 (local_rank: 1)\n"  # only part of a report: not read
    result = feed({1: begin(marker) + data + end(1), 2: begin(marker) + report + end(1)})
    by_rank = result.by_rank
    assert {r: o.stdout for r, o in by_rank.items()} == {0: "a\n", 1: "b\n"}
    assert "[default0]:not a tag" in result.launcher
    (note,) = result.mpi.notes()
    assert note == (
        "local ranks tagged by torchrun --tee 3 (torch 1.13.0a0+gitunknown's prefix has no "
        "global rank; c10d rendezvous)"
    )
    assert result.mpi.failure.line() == "torchrun exited with code 1; it named no rank that failed"


def test_local_only_failure_keys_by_local_rank_and_names_the_global_one() -> None:
    text = recorded("torch113-rank2-exit3", "stderr").decode().replace("rank      : 2", "rank 6")
    text = text.replace("rank 6 (local_rank: 2)", "rank      : 6 (local_rank: 2)")
    run = torch_run(words("default", V113, 4, backend="c10d").split(), pod="p")
    failure = parse_report(text, run)
    assert (failure.rank, failure.global_rank, failure.local_rank) == (2, 6, 2)
    assert failure.line().startswith(
        "torchrun: rank 6 (local rank 2, host localhost) failed first: exit code 3"
    )


def test_the_agents_failed_line_when_there_is_no_report() -> None:
    run = torch_run(words("default", V113, 4).split(), pod="p")
    text = (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) "
        "local_rank: 3 (pid: 77) of binary: /usr/bin/python3\n"
    )
    failure = parse_report(text, run)
    assert (failure.rank, failure.local_rank, failure.signal) == (3, 3, 9)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("static", "1:1", "0", "4", "-", True), (0, 4, "")),
        (("static", "2", "1", "4", "4", False), (1, 4, "")),
        (("static", "2", "1", "4", "4", True), (1, 4, "")),  # the job's count, given again
        (("static", "2:2", "1", "8", "4", True), (None, None, "--nproc-per-node may differ")),
        (("static", "2", "1", "4", "-", False), (None, None, "other nodes' worker counts")),
        (("c10d", "1:1", "0", "4", "-", True), (None, None, "c10d rendezvous")),
        (("static", "1:2", "0", "4", "4", False), (None, None, "nodes or node rank not fixed")),
        (("static", "2", "2", "4", "4", False), (None, None, "nodes or node rank not fixed")),
        (("static", "1", "0", "auto", "auto", False), (None, None, "workers per node not fixed")),
    ],
)
def test_global_rank_rule(
    args: tuple[str, str, str, str, str, bool], expected: tuple[int | None, int | None, str]
) -> None:
    node_rank, nproc, why = global_rank_rule(*args)
    assert (node_rank, nproc) == expected[:2]
    assert why.startswith(expected[2]) if expected[2] else why == ""


def test_events_carry_each_rank_and_the_launcher() -> None:
    events: list[RankEvent] = []
    marker = words(TEMPLATE, V26, 4)
    result = feed(command_streams("torch26-template-rank2-exit3", marker, 1), [9], events)
    kinds = [e.kind for e in events]
    assert kinds[0] == "begin" and kinds[-1] == "end" and kinds.count("begin") == 1
    text: dict[tuple[int, str], str] = {}
    for e in events:
        if e.kind == "output":
            assert e.rank is not None and e.host == "node-0"
            text[(e.rank, e.stream)] = text.get((e.rank, e.stream), "") + e.text
    by_rank = result.by_rank
    assert text == {
        (r, s): getattr(o, s)
        for r, o in by_rank.items()
        for s in ("stdout", "stderr")
        if getattr(o, s)
    }
    launcher = "".join(e.text for e in events if e.kind == "launcher")
    assert launcher == result.launcher
    assert events[-1].run.failure.rank == 2


def test_torchrun_and_mpiexec_in_one_command() -> None:
    hydra = MPI_DATA / "hydra-rank2-exit3"
    mpi_begin = f"\x1e{TOKEN} begin 2 hydra 0 4 0 - mpiexec\n".encode()
    mpi_end = f"\x1e{TOKEN} end 2 3\n".encode()
    t = command_streams("torch26-template-rank2-exit3", words(TEMPLATE, V26, 4), 1)
    streams = {
        1: t[1] + mpi_begin + hydra.with_suffix(".stdout").read_bytes() + mpi_end,
        2: t[2] + mpi_begin + hydra.with_suffix(".stderr").read_bytes() + mpi_end,
    }
    result = feed(streams, [13])
    runs = result.mpi.runs
    assert [r.launcher for r in runs] == ["torchrun", "mpiexec"]
    assert runs[0].failure.rank == 2 and runs[1].returncode == 3
    out = result.stdout
    assert "\x1e" not in out and "rank 0 local 0 of 4\n" in out


def test_spill_keeps_a_bound_and_the_output_whole(tmp_path: Path) -> None:
    from trainjob_magics.engine.exec.output import SpillDir

    lines = b"".join(b"[default%d]:%s\n" % (i % 2, b"z" * 200) for i in range(2000))
    marker = words("default", V113, 2)
    ranked = RankedStreams(
        TOKEN, pod="p", limit=50_000, spill_dir=SpillDir(str(tmp_path)), chain=chain(TOKEN, "p")
    )
    data = begin(marker) + lines + end(0)
    rng = random.Random(5)
    pos = 0
    while pos < len(data):
        step = rng.randint(1, 5000)
        ranked.take(1, data[pos : pos + step])
        pos += step
    ranked.take(2, begin(marker) + end(0))
    result = ranked.finish(None)
    by_rank = result.by_rank
    assert by_rank[0].stdout == ("z" * 200 + "\n") * 1000
    assert by_rank[0].stdout_path is not None or by_rank[1].stdout_path is not None


def test_without_markers_nothing_changes() -> None:
    data = b"[default0]:looks like a tag\n\x1enot a marker\n"
    result = feed({1: data, 2: b""}, [3])
    assert result.stdout_bytes == data and result.mpi is None
