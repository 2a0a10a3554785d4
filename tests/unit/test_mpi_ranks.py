"""Per-rank output (engine/exec/ranks.py) over launcher output recorded from the real binaries
(tests/unit/data/mpi/README.md says which and how) and Open MPI 5's forms from its sources."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.end_marks import unmarked
from trainjob_magics.engine.exec.output import SpillDir
from trainjob_magics.engine.exec.ranks import (
    HYDRA,
    OPENMPI4,
    OPENMPI5,
    RANKS_SCRIPT,
    JobPod,
    MpiOutput,
    MpiRun,
    RankDemux,
    RankEvent,
    parse_failure,
    ranked_argv,
    wants_ranks,
    world_warning,
)
from trainjob_magics.engine.exec.scripts import ARGV0, WRAPPER

DATA = Path(__file__).parent / "data" / "mpi"
TOKEN = "tjm0123456789abcdef"
OMPI4_TAG = re.compile(rb"\[\d+,\d+\]<std(?:out|err|diag)>:")
HYDRA_TAG = re.compile(rb"\x1e\d+@[^\x1f]*\x1f")


def fixture(name: str, stream: str) -> bytes:
    path = DATA / f"{name}.{stream}"
    return path.read_bytes() if path.exists() else b""


def begin(
    impl: str, *, map_added: int = 0, np: str = "-", env: str = "orte", hosts: str = ""
) -> bytes:
    return f"\x1e{TOKEN} begin 1 {impl} {map_added} {np} 0 {env} mpirun{hosts}\n".encode()


def end(rc: int) -> bytes:
    return f"\x1e{TOKEN} end 1 {rc}\n".encode()


def demux(
    streams: dict[int, bytes], chunk: int | None = None, **kwargs: object
) -> tuple[dict[int, bytes], MpiOutput]:
    """Feed both streams, interleaved chunk by chunk; returns the plain bytes and the result."""
    d = RankDemux(TOKEN, **kwargs)  # type: ignore[arg-type]
    plain = {1: b"", 2: b""}
    at = {1: 0, 2: 0}
    while any(at[ch] < len(data) for ch, data in streams.items()):
        for ch, data in streams.items():
            step = chunk or len(data) or 1
            piece = data[at[ch] : at[ch] + step]
            at[ch] += step
            if piece:
                plain[ch] += bytes(d.feed(ch, piece))
    for ch, rest in d.close().items():
        plain[ch] += rest
    return plain, d.result()


def run_fixture(
    name: str, impl: str, rc: int, chunk: int | None = None, **marker: object
) -> tuple[dict[int, bytes], MpiOutput]:
    b = begin(impl, **marker)  # type: ignore[arg-type]
    return demux(
        {
            1: b"before\n" + b + fixture(name, "stdout") + end(rc) + b"after\n",
            2: b + fixture(name, "stderr") + end(rc),
        },
        chunk,
    )


CHUNKS = [1, 3, 13, 64, 4096, None]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_openmpi4_ranks_apart_stdout_as_untagged_and_the_failed_rank_named(
    chunk: int | None,
) -> None:
    plain, out = run_fixture("openmpi4-rank2-exit3", OPENMPI4, 3, chunk)
    raw_out, raw_err = (
        fixture("openmpi4-rank2-exit3", "stdout"),
        fixture("openmpi4-rank2-exit3", "stderr"),
    )
    assert plain[1] == b"before\n" + OMPI4_TAG.sub(b"", raw_out) + b"after\n"
    assert plain[2] == OMPI4_TAG.sub(b"", raw_err)
    ranks = out.by_rank
    assert sorted(ranks) == [0, 1, 2, 3]
    assert ranks[2].stdout == "hi 2\nlast words of 2\n"
    assert ranks[2].stderr == "err 2\n"
    assert ranks[3].stdout == "hi 3\n" and ranks[3].stderr == "err 3\n"
    assert "mpirun detected that one or more processes exited" in out.launcher
    assert "err" not in out.launcher  # rank lines never count as the launcher's
    failure = out.failure
    assert failure is not None and (failure.rank, failure.exit_code) == (2, 3)
    assert "last words of 2" in failure.line()
    assert failure.line().startswith("mpirun: rank 2 failed first: exit code 3")


def test_openmpi4_every_rank_failing_at_once_names_no_rank() -> None:
    """Open MPI 4.1.4 prints no "detected" report when all ranks exit 3 together."""
    _plain, out = run_fixture("openmpi4-all-exit3", OPENMPI4, 3)
    assert out.failure is not None and out.failure.rank is None
    assert out.failure.line() == "mpirun exited with code 3; it named no rank that failed"
    assert {r: o.stderr for r, o in out.by_rank.items()} == {r: "err\n" for r in range(4)}


def test_openmpi4_rank_killed_by_a_signal() -> None:
    _plain, out = run_fixture("openmpi4-rank1-sigkill", OPENMPI4, 137)
    failure = out.failure
    assert failure is not None
    assert (failure.rank, failure.signal, failure.signal_name) == (1, 9, "Killed")
    assert failure.host == "vm"
    assert "rank 1 (host vm) failed first: killed by signal 9 (Killed)" in failure.line()


@pytest.mark.parametrize("chunk", CHUNKS)
def test_openmpi4_partial_and_long_lines_are_put_back_together(chunk: int | None) -> None:
    raw = fixture("openmpi4-partial-lines", "both")
    plain, out = demux({1: begin(OPENMPI4) + raw + end(0), 2: b""}, chunk)
    assert plain[1] == OMPI4_TAG.sub(b"", raw)
    whole = "abcdef\nghi\n\nx\r\ny" + "a" * 9000 + "\n"
    assert out.by_rank[0].stdout == whole and out.by_rank[1].stdout == whole
    assert out.launcher == ""


@pytest.mark.parametrize("chunk", [1, 5, 200, None])
def test_openmpi4_job_map_gives_hosts_and_is_kept_out_of_stdout(chunk: int | None) -> None:
    name = "openmpi4-localcluster-4pods-rank2-exit3"
    plain, out = run_fixture(name, OPENMPI4, 3, chunk, map_added=1)
    assert b"JOB MAP" not in plain[1] and b"Data for" not in plain[1]
    lines = plain[1].decode().splitlines()
    assert lines[0] == "before" and lines[-1] == "after" and len(lines) == 6
    hosts = {r: o.host for r, o in out.by_rank.items()}
    assert hosts == {
        0: "fbea62c098b8-launcher-0-0",
        1: "fbea62c098b8-node-0-0",
        2: "fbea62c098b8-node-0-1",
        3: "fbea62c098b8-node-0-2",
    }
    assert out.runs[0].map_read
    failure = out.failure
    assert failure is not None and failure.rank == 2 and failure.host == hosts[2]
    assert "JOB MAP" not in out.launcher  # the map the engine asked for is nobody's output


def test_a_job_map_the_user_asked_for_stays() -> None:
    plain, out = run_fixture("openmpi4-display-map", OPENMPI4, 0, map_added=0)
    assert b"JOB MAP" in plain[1]
    assert (
        plain[1]
        == b"before\n" + OMPI4_TAG.sub(b"", fixture("openmpi4-display-map", "stdout")) + b"after\n"
    )
    assert "JOB MAP" in out.launcher
    assert {o.host for o in out.by_rank.values()} == {"vm"}


@pytest.mark.parametrize("chunk", [1, 4, None])
def test_hydra_pattern_ranks_hosts_and_its_signal_report(chunk: int | None) -> None:
    plain, out = run_fixture("hydra-rank1-sigkill", HYDRA, 9, chunk)
    assert (
        plain[1]
        == b"before\n" + HYDRA_TAG.sub(b"", fixture("hydra-rank1-sigkill", "stdout")) + b"after\n"
    )
    assert out.by_rank[1].stdout == "hi 1\nlast words of 1\n"
    assert {o.host for o in out.by_rank.values()} == {"vm"}
    assert "BAD TERMINATION" in out.launcher
    failure = out.failure
    # Hydra 4.0.2 names a pid and a host; three ranks ran on vm: which one is not said
    assert failure is not None and failure.rank is None and failure.host == "vm"
    assert (failure.signal, failure.signal_name) == (9, "Killed")


def test_hydra_plain_exit_code_and_stderr_by_rank() -> None:
    _plain, out = run_fixture("hydra-rank2-exit3", HYDRA, 3)
    assert {r: o.stderr for r, o in out.by_rank.items()} == {r: f"err {r}\n" for r in range(4)}
    assert out.failure is not None and out.failure.rank is None


def test_hydra_newer_report_names_the_rank() -> None:
    run = MpiRun(1, "mpiexec", HYDRA, returncode=9)
    text = (
        "===================================================================================\n"
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
        "=   RANK 3 PID 1234 RUNNING AT c001-001\n"
        "=   KILLED BY SIGNAL: 9 (Killed)\n"
    )
    failure = parse_failure(text, run)
    assert (failure.rank, failure.host, failure.signal) == (3, "c001-001", 9)
    exit_text = text.replace("KILLED BY SIGNAL: 9 (Killed)", "EXIT STATUS: 3")
    assert parse_failure(exit_text, run).exit_code == 3


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_hydra_partial_and_long_lines(chunk: int | None) -> None:
    raw = fixture("hydra-partial-lines", "both")
    plain, out = demux({1: begin(HYDRA) + raw + end(0), 2: b""}, chunk)
    assert plain[1] == HYDRA_TAG.sub(b"", raw)
    whole = "abcdef\nghi\n\nx\r\ny" + "a" * 70000 + "\n"
    assert out.by_rank[0].stdout == whole and out.by_rank[1].stdout == whole


# Open MPI 5: PMIx v5.0.6 pmix_iof.c "[%s,%s][%s:%s]<%s>: " (jobid part after '@', rank, host,
# pid, stream) and PRRTE v3.0.6 help-prun.rst [prun:non-zero-exit] with PRTE_NAME_PRINT's
# "[nspace,rank]" process name.
OMPI5_STDOUT = (
    b"[1,0][job-node-0-0.job:101]<stdout>: hello from 0\n"
    b"[1,1][job-node-0-1.job:202]<stdout>: hello from 1\n"
    b"[1,1][job-node-0-1.job:202]<stdout>: [1,0] is not a tag here: mid-line\n"
)
OMPI5_STDERR = (
    b"[1,1][job-node-0-1.job:202]<stderr>: Traceback: boom\n"
    b"--------------------------------------------------------------------------\n"
    b"prterun detected that one or more processes exited with non-zero status, thus causing\n"
    b"the job to be terminated. The first process to do so was:\n\n"
    b"  Process name: [prterun-job-node-0-0-77@1,1]\n"
    b"  Exit code:    3\n"
    b"--------------------------------------------------------------------------\n"
)


@pytest.mark.parametrize("chunk", [1, 9, None])
def test_openmpi5_tag_detailed_hosts_and_prterun_report(chunk: int | None) -> None:
    b = begin(OPENMPI5)
    plain, out = demux({1: b + OMPI5_STDOUT + end(3), 2: b + OMPI5_STDERR + end(3)}, chunk)
    assert plain[1] == b"hello from 0\nhello from 1\n[1,0] is not a tag here: mid-line\n"
    assert out.by_rank[1].host == "job-node-0-1.job"
    assert out.by_rank[1].stderr == "Traceback: boom\n"
    failure = out.failure
    assert failure is not None and (failure.rank, failure.exit_code) == (1, 3)
    assert failure.host == "job-node-0-1.job"
    assert "Traceback: boom" in failure.line()


def test_ssh_warnings_are_the_launchers_lines() -> None:
    """What the real node's launcher prints before any rank (ssh, once per node pod)."""
    warning = (
        b"Warning: Permanently added '[job-node-0-1.job]:2222' (ECDSA) to the list of known "
        b"hosts.\r\n"
    )
    b = begin(OPENMPI4)
    plain, out = demux({1: b + b"[1,0]<stdout>:hi\n" + end(0), 2: b + warning + warning + end(0)})
    assert plain[2] == warning * 2
    assert out.launcher_lines == [("stderr", warning.decode().rstrip("\n"))] * 2
    assert out.by_rank[0].stdout == "hi\n" and out.by_rank[0].stderr == ""


def test_output_without_markers_is_untouched() -> None:
    d = RankDemux(TOKEN)
    data = b"[1,0]<stdout>: looks like a tag, but no tagged run began\n"
    assert d.feed(1, data) is data
    other = b"\x1etjmother begin 1 openmpi4 0 - 0 - mpirun\n"  # another command's token
    assert d.feed(1, other) == other
    assert d.close() == {1: b"", 2: b""}
    assert d.result().runs == []


def test_a_run_cut_off_ends_without_an_exit_code() -> None:
    """Ctrl-C kills the shell: no end marker; what came is still the ranks'."""
    plain, out = demux({1: begin(OPENMPI4) + b"[1,0]<stdout>:partial", 2: b""})
    assert plain[1] == b"partial"
    assert out.runs[0].returncode is None and out.failure is None
    assert out.by_rank[0].stdout == "partial"


def test_events_for_a_live_view() -> None:
    events: list[RankEvent] = []
    b = begin(OPENMPI4)
    demux(
        {1: b + b"[1,0]<stdout>:a\n[1,1]<stdout>:b\n" + end(0), 2: b + b"mpirun: note\n" + end(0)},
        on_event=events.append,
    )
    kinds = [(e.kind, e.rank, e.stream, e.text) for e in events]
    assert kinds[0][0] == "begin" and kinds[-1][0] == "end"
    assert ("output", 0, "stdout", "a\n") in kinds and ("output", 1, "stdout", "b\n") in kinds
    assert ("launcher", None, "stderr", "mpirun: note\n") in kinds
    assert events[-1].run.returncode == 0


# Each launcher's tag (rank r of job 1) and its form, for output written as the launchers do:
# each chunk read from a rank tagged at its start and after each newline but the last.
TAGGERS = {
    OPENMPI4: (lambda r: b"[1,%d]<stdout>:" % r, OMPI4_TAG),
    OPENMPI5: (
        lambda r: b"[1,%d][n-%d.job:%d]<stdout>: " % (r, r, 100 + r),
        re.compile(rb"\[\d+,\d+\]\[[^\s\[\]]*:\d+\]<stdout>: "),
    ),
    HYDRA: (lambda r: b"\x1e%d@n-%d\x1f" % (r, r), re.compile(rb"\x1e\d+@[^\x1e\x1f\n]*\x1f")),
}


def launcher_chunks(impl: str, seed: int, lines: list[bytes]) -> tuple[bytes, dict[int, bytes]]:
    """4 ranks printing ``lines`` in turn, read in chunks of up to 4096 bytes (cut mid-line)
    and tagged as the launcher does; returns the stream and what each rank printed."""
    tag_of = TAGGERS[impl][0]
    rng = random.Random(seed)
    left = {r: b"".join(lines[r::4]) for r in range(4)}
    printed = dict(left)
    out = []
    while any(left.values()):
        r = rng.choice([r for r in left if left[r]])
        cut = rng.randint(1, 4096)
        chunk, left[r] = left[r][:cut], left[r][cut:]
        tag = tag_of(r)
        body = chunk[:-1].replace(b"\n", b"\n" + tag) + chunk[-1:]
        out.append(tag + body)
    return b"".join(out), printed


@pytest.mark.parametrize("impl", [OPENMPI4, OPENMPI5, HYDRA])
@pytest.mark.parametrize("chunk", [1, 7, 4096, 65536, None])
def test_runs_of_a_ranks_lines_read_at_once_as_tag_by_tag(impl: str, chunk: int | None) -> None:
    """Most of a big output is runs of one rank's whole lines, each with the same tag: the
    parser takes a run at once, and gives what the tags one by one give (a tag anywhere counts,
    also in a line of a run: there the run stops; its lines before it are the rank's)."""
    tag_of, tag_re = TAGGERS[impl]
    lines = [b"%05d " % i + b"0" * 90 + b"\n" for i in range(2000)]
    lines[10] = b"[INFO] a bracket, \x1f and a [1,2] that is no tag\n"
    lines[500] = b"before " + tag_of(2) + b"after: rank 2's, by its tag\n"
    lines[501] = tag_of(3)[:-2] + b" a tag's start, cut\n"
    lines[900] = b"a \x1e alone, a \x1e1@ cut\n"
    raw, printed = launcher_chunks(impl, 7, lines)
    pieces = tag_re.split(raw)
    expected = {r: b"" for r in range(4)}  # the tags one by one: text after each is its rank's
    for tag, text in zip(tag_re.findall(raw), pieces[1:], strict=True):
        expected[next(r for r in range(4) if tag == tag_of(r))] += text
    assert pieces[0] == b"" and expected != printed  # the tag in line 500 moved its end
    plain, out = demux({1: begin(impl) + raw + end(0), 2: b""}, chunk)
    assert plain[1] == tag_re.sub(b"", raw)
    assert {r: o.stdout_bytes for r, o in out.by_rank.items()} == expected
    assert out.launcher == ""


def test_32_ranks_stay_within_the_memory_bound(tmp_path: Path) -> None:
    """Every rank's output together keeps at most the limit in memory; the rest is spilled."""
    limit = 256 << 10
    line = b"x" * 99 + b"\n"
    chunk = b"".join(b"[1,%d]<stdout>:" % r + line for r in range(32)) * 20  # 64 KiB
    spill = SpillDir("ranks-test")
    d = RankDemux(TOKEN, limit=limit, spill_dir=spill)
    d.feed(1, begin(OPENMPI4))
    peak = 0
    for _ in range(64):  # 4 MiB through 32 ranks
        assert len(d.feed(1, chunk)) == 32 * 20 * 100
        peak = max(peak, d._memory)
    d.feed(1, end(0))
    d.close()
    out = d.result()
    assert peak <= limit
    assert all(o.size == 64 * 20 * 100 for o in out.by_rank.values())
    spilled = [o for o in out.by_rank.values() if o.stdout_path is not None]
    assert len(spilled) >= 16
    assert all(o.stdout == (line * 64 * 20).decode() for o in out.by_rank.values())


def pods(*names: str) -> list[JobPod]:
    return [JobPod(f"{n}-abcde", n) for n in names]


JOB = pods("j-launcher-0-0", "j-node-0-0", "j-node-0-1", "j-node-0-2")
HOSTFILE = {f"{p.hostname}.j": 1 for p in JOB}


def test_world_check_open_mpi_5_on_the_launcher_only() -> None:
    run = MpiRun(1, "mpirun", OPENMPI5, np=4, env="orte", hostfile=HOSTFILE, returncode=0)
    run.hosts = {r: "j-launcher-0-0" for r in range(4)}
    line = world_warning(run, JOB)
    assert line.startswith("warning: 4 ranks ran on 1 of the job's 4 pods")
    assert "used: j-launcher-0-0-abcde" in line
    assert "unused: j-node-0-0-abcde, j-node-0-1-abcde, j-node-0-2-abcde" in line
    assert "kubeflow/trainer#4028" in line


def test_world_check_quiet_when_the_world_is_as_asked() -> None:
    run = MpiRun(1, "mpirun", OPENMPI4, hostfile=HOSTFILE, returncode=0, map_read=True)
    run.hosts = {r: p.hostname for r, p in enumerate(JOB)}
    assert world_warning(run, JOB) == ""
    small = MpiRun(1, "mpirun", OPENMPI4, np=2, hostfile=HOSTFILE, returncode=0, map_read=True)
    small.hosts = {0: "j-launcher-0-0", 1: "j-node-0-0"}  # -np 2 on a 4-pod job: as asked
    assert world_warning(small, JOB) == ""
    packed = MpiRun(1, "mpirun", OPENMPI4, np=4, returncode=0, map_read=True)
    packed.hostfile = {f"{p.hostname}.j": 4 for p in JOB}  # 4 slots each: by-slot mapping
    packed.hosts = {r: "j-launcher-0-0" for r in range(4)}
    assert world_warning(packed, JOB) == ""


def test_world_check_hostfile_not_read_with_open_mpi_4() -> None:
    run = MpiRun(1, "mpirun", OPENMPI4, hostfile=HOSTFILE, returncode=0, map_read=True)
    run.hosts = {0: "j-launcher-0-0", 1: "j-launcher-0-0"}  # 2 local cores, no hostfile
    line = world_warning(run, JOB)
    assert (
        "2 ranks ran on 1 of the job's 4 pods" in line and "2 ranks ran where 4 were asked" in line
    )
    assert "the hostfile was not read" in line and "--hostfile /etc/mpi/hostfile" in line


def test_which_commands_get_the_prelude() -> None:
    assert wants_ranks(["sh", "-c", "cd x && mpirun -np 4 python3 t.py"])
    assert wants_ranks(["/bin/bash", "-c", "mpiexec -n 2 hostname"])
    assert not wants_ranks(["sh", "-c", "mpirun.openmpi -np 2 hostname"])  # not our function
    assert not wants_ranks(["sh", "-c", "echo hi"])
    assert not wants_ranks(["mpirun", "-np", "2", "hostname"])  # argv: no shell, no functions
    argv = ranked_argv(["sh", "-c", "mpirun x"], TOKEN)
    assert argv == ["sh", "-c", RANKS_SCRIPT, "sh", TOKEN, "mpirun x"]


# The prelude itself, with this machine's launchers: under the engine's pid-file wrapper, whose
# streams are the exec's (here: pipes of the test).


def prelude(body: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    argv = ["sh", "-c", WRAPPER, ARGV0, "x-test", *ranked_argv(["sh", "-c", body], TOKEN)]
    done = subprocess.run(argv, capture_output=True, timeout=60, env={**os.environ, **(env or {})})
    return unmarked(done, "x-test")


needs_ompi = pytest.mark.skipif(
    shutil.which("mpirun") is None
    or "Open MPI"
    not in subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout,
    reason="Open MPI's mpirun is not installed",
)


@needs_ompi
def test_prelude_tags_open_mpi_4_and_says_so() -> None:
    done = prelude(
        "echo before; mpirun --allow-run-as-root -np 2 sh -c 'echo r$OMPI_COMM_WORLD_RANK';"
        " echo rc=$?"
    )
    out = done.stdout
    assert re.search(rb"\x1e" + TOKEN.encode() + rb" begin 1 openmpi4 1 2 0 ", out), out
    assert b"[1,0]<stdout>:r0\n" in out and b"[1,1]<stdout>:r1\n" in out
    assert b"JOB MAP" in out  # asked by the prelude, removed by RankDemux
    assert out.endswith(b"\x1e" + TOKEN.encode() + b" end 1 0\nrc=0\n")
    assert done.stderr.startswith(b"\x1e" + TOKEN.encode() + b" begin 1 openmpi4")
    d = RankDemux(TOKEN)
    plain = bytes(d.feed(1, out)) + d.close()[1]
    assert sorted(plain.decode().splitlines()) == ["before", "r0", "r1", "rc=0"]


@needs_ompi
def test_prelude_tags_open_mpi_4s_mpiexec() -> None:
    """Open MPI 4's ``mpiexec --version`` says "mpiexec (OpenRTE) 4.x", not "(Open MPI)"."""
    assert b"(OpenRTE) 4." in subprocess.run(["mpiexec", "--version"], capture_output=True).stdout
    done = prelude("mpiexec --allow-run-as-root -np 2 sh -c 'echo r$OMPI_COMM_WORLD_RANK'")
    assert re.search(rb"\x1e" + TOKEN.encode() + rb" begin 1 openmpi4 1 2 0 ", done.stdout)
    d = RankDemux(TOKEN)
    d.feed(1, done.stdout)
    d.feed(2, done.stderr)
    d.close()
    assert {r: o.stdout for r, o in d.result().by_rank.items()} == {0: "r0\n", 1: "r1\n"}


@needs_ompi
@pytest.mark.parametrize(
    "body",
    [
        "mpirun --allow-run-as-root -np 2 --tag-output echo hi",  # the user's own form
        "mpirun --allow-run-as-root -np 2 --output-filename out echo hi",
        "mpirun --allow-run-as-root -np 2 echo hi | cat",  # piped: its output is the user's
        'x=$(mpirun --allow-run-as-root -np 2 echo hi); echo "$x"',
        "mpirun --allow-run-as-root -np 2 echo hi > f; cat f",
    ],
)
def test_prelude_adds_nothing_when_the_user_chose_or_redirected(body: str, tmp_path: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", WRAPPER, ARGV0, "x-test", *ranked_argv(["sh", "-c", body], TOKEN)],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert TOKEN.encode() not in done.stdout + done.stderr
    assert b"JOB MAP" not in done.stdout
    assert done.returncode == 0, done.stderr


def test_prelude_keeps_exit_codes_set_e_and_missing_launchers() -> None:
    done = prelude("mpirun() { return 7; }; mpirun; echo $?")  # the user's own function wins
    assert done.stdout == b"7\n"
    missing = prelude("PATH=/nonexistent; mpirun -np 2 x; echo rc=$?")
    assert missing.stdout == b"rc=127\n" and b"not found" in missing.stderr
    assert prelude("echo $0 $#; exit 4").stdout == b"sh 0\n"
    assert prelude("exit 4").returncode == 4


@pytest.mark.skipif(shutil.which("mpiexec.hydra") is None, reason="MPICH's Hydra is not installed")
def test_prelude_tags_hydra(tmp_path: Path) -> None:
    shim = tmp_path / "mpirun"  # Hydra finds its proxy next to itself: no symlink
    shim.write_text(f'#!/bin/sh\nexec {shutil.which("mpiexec.hydra")} "$@"\n')
    shim.chmod(0o755)
    done = prelude(
        "mpirun -np 2 sh -c 'echo r$PMI_RANK; echo e$PMI_RANK >&2'",
        env={"PATH": f"{tmp_path}:{os.environ['PATH']}"},
    )
    d = RankDemux(TOKEN)
    plain_out = bytes(d.feed(1, done.stdout))
    plain_err = bytes(d.feed(2, done.stderr))
    d.close()
    out = d.result()
    assert sorted(plain_out.split()) == [b"r0", b"r1"] and sorted(plain_err.split()) == [
        b"e0",
        b"e1",
    ]
    assert {r: (o.stdout, o.stderr) for r, o in out.by_rank.items()} == {
        0: ("r0\n", "e0\n"),
        1: ("r1\n", "e1\n"),
    }
    assert out.runs[0].impl == HYDRA and out.runs[0].np == 2
    assert out.runs[0].note() == "ranks tagged by mpirun -prepend-pattern"


# (not chunk 1: a frame that ends right after the map block's leading newline is the one
# split the parser does not wait out, so that lines ending at a frame's end show at once)
@pytest.mark.parametrize("chunk", [7, 11, None])
def test_an_orteds_job_map_after_a_ranks_cut_line_is_not_the_ranks(chunk: int | None) -> None:
    """Each orted prints the map again (two writes); under heavy output one lands right after a
    rank's 4 KiB chunk that ends mid-line (seen on the local cluster: 57 bytes too many)."""
    map_tail = fixture("openmpi4-display-map", "stdout").split(b"\n", 1)[1]  # "\n ==== JOB MAP"
    stream = (
        b"[1,0]<stdout>:abc"
        + b" Data for JOB [1,1] offset 0 Total slots allocated 4\n"
        + b"[1,0]<stdout>:def"
        + map_tail[: map_tail.index(b"[1,")]
        + b"[1,0]<stdout>:ghi\n"
    )
    plain, out = demux({1: begin(OPENMPI4, map_added=1) + stream + end(0), 2: b""}, chunk)
    assert out.by_rank[0].stdout == "abcdefghi\n"
    assert plain[1] == b"abcdefghi\n"


# (not chunk 1: a frame that ends right after the map block's leading newline is the one
# split the parser does not wait out, so that lines ending at a frame's end show at once)
@pytest.mark.parametrize("chunk", [7, 11, None])
def test_an_orteds_job_map_written_into_a_ranks_chunk(chunk: int | None) -> None:
    """A tagged chunk is longer than PIPE_BUF: an orted's write can land in its middle, and the
    chunk goes on, untagged, after it (seen on the local cluster under 64 MB of output)."""
    map_tail = fixture("openmpi4-display-map", "stdout").split(b"\n", 1)[1]
    block = map_tail[: map_tail.index(b"[1,")]
    stream = (
        b"[1,3]<stdout>:000"
        + b" Data for JOB [1,1] offset 0 Total slots allocated 4\n"
        + b"0000\n[1,2]<stdout>:11"
        + block
        + b"11\n[1,3]<stdout>:000"
        + block
        + b"[1,3]<stdout>:0\n"
    )
    plain, out = demux({1: begin(OPENMPI4, map_added=1) + stream + end(0), 2: b""}, chunk)
    assert out.by_rank[3].stdout == "0000000\n0000\n"
    assert out.by_rank[2].stdout == "1111\n"
    assert out.launcher == ""
    assert sorted(plain[1].split(b"\n")) == sorted(b"0000000\n1111\n0000\n".split(b"\n"))
