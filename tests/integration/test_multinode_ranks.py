"""Per-rank output of mpirun (engine/exec/ranks.py) on the local cluster's 4-pod MPI job, with
the real Open MPI and with the imitation (``mpi_impl``)."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.mpi import mpirun_sh
from trainjob_magics.engine import connect
from trainjob_magics.engine.errors import CommandInterruptedError
from trainjob_magics.engine.exec.ranks import RankEvent
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(150)

RANKS = (
    'sh -c "echo rank \\$OMPI_COMM_WORLD_RANK on \\$HOSTNAME; echo err \\$OMPI_COMM_WORLD_RANK >&2"'
)


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[Any]:
    s = connect("mpi-interactive", num_nodes=4, config_file=str(local_cluster.kubeconfig_path))
    yield s
    s.close(timeout=30)


def test_four_ranks_apart_with_their_host_and_pod(session: Any, mpi_impl: str) -> None:
    r = session.execute("echo before; " + mpirun_sh(mpi_impl, RANKS) + "; echo after")
    assert r.returncode == 0, r.stderr
    assert sorted(r.by_rank) == [0, 1, 2, 3]
    pods = {p.name for p in session.pods("all")}
    for rank, out in r.by_rank.items():
        assert out.stdout == f"rank {rank} on {out.host}\n"
        assert out.stderr == f"err {rank}\n"
        assert out.pod in pods and out.pod.startswith(out.host)
    assert len({o.pod for o in r.by_rank.values()}) == 4  # one rank per pod
    # stdout is what an untagged mpirun prints: no tags, no job map, the text around it kept
    lines = r.stdout.splitlines()
    assert lines[0] == "before" and lines[-1] == "after"
    assert sorted(lines[1:-1]) == sorted(f"rank {k} on {o.host}" for k, o in r.by_rank.items())
    assert "<stdout>" not in r.stdout and "JOB MAP" not in r.stdout and "\x1e" not in r.stdout
    assert sorted(r.stderr.splitlines()) == [f"err {k}" for k in range(4)]
    assert r.launcher == ""
    assert r.mpi.notes() == ["ranks tagged by mpirun --tag-output (hosts from --display-map)"]
    assert r.mpi.warnings == [] and r.mpi.failure is None


# Open MPI's report naming the first failed rank comes in most runs, not all
REPORT = "mpirun detected that one or more processes exited"
REPORT_TRIES = 6


def test_the_failed_rank_is_named_with_its_pod_and_last_lines(session: Any, mpi_impl: str) -> None:
    """Open MPI names the first failed rank in most runs, not all (then only "Primary job
    terminated normally, but 1 process returned a non-zero exit code"): runs again, up to
    REPORT_TRIES times, until it does; a run without the report names no rank."""
    script = (
        'sh -c "echo hello \\$OMPI_COMM_WORLD_RANK; '
        'if [ \\$OMPI_COMM_WORLD_RANK = 2 ]; then echo last words of 2; exit 3; fi; sleep 2"'
    )
    for _ in range(REPORT_TRIES):
        r = session.execute(mpirun_sh(mpi_impl, script))
        assert r.returncode == 3
        if REPORT in r.launcher:
            break
        assert r.mpi.failure is None or r.mpi.failure.rank is None, r.mpi.failure
    else:
        pytest.fail(f"mpirun never named the failed rank in {REPORT_TRIES} runs")
    failure = r.mpi.failure
    assert failure is not None and failure.rank == 2 and failure.exit_code == 3
    node_1 = next(p.name for p in session.pods("node-1"))
    assert failure.pod == node_1 == r.by_rank[2].pod
    line = failure.line()
    assert line.startswith(f"mpirun: rank 2 (pod {node_1}) failed first: exit code 3")
    assert line.endswith("hello 2 | last words of 2")
    assert REPORT in r.stderr  # as mpirun prints


@pytest.mark.parametrize("option", ["--tag-output", "--output-filename out"])
def test_a_users_own_output_form_gets_no_added_tagging(session: Any, option: str) -> None:
    r = session.execute(f"mpirun {option} -np 2 hostname; ls out 2>/dev/null | head -1")
    assert r.returncode == 0, r.stderr
    assert r.by_rank == {} and r.mpi is None
    if option == "--tag-output":
        assert "[1,0]<stdout>:" in r.stdout  # theirs, as they asked
    else:
        assert r.stdout.splitlines()[-1] == "1"  # Open MPI 4 wrote out/1/rank.N/ (and copied)
        assert "<stdout>" not in r.stdout


def test_ranks_off_runs_the_command_as_written(session: Any) -> None:
    r = session.execute("mpirun -np 2 hostname", ranks=False)
    assert r.returncode == 0 and r.mpi is None and len(r.stdout.splitlines()) == 2


def test_world_check_names_the_pods_when_the_hostfile_is_not_read(
    session: Any, mpi_impl: str
) -> None:
    cell = (
        "unset OMPI_MCA_orte_default_hostfile TRAINJOB_LOCAL_HOSTFILE; "
        "export OMPI_MCA_rmaps_base_oversubscribe=1; " + mpirun_sh(mpi_impl, "-np 4 hostname")
    )
    r = session.execute(cell)
    assert r.returncode == 0, r.stderr
    # every rank on the launcher's machine: here the host itself ("vm"), as the local
    # cluster's pods are processes of this machine; on a real cluster the launcher pod
    assert len({o.host for o in r.by_rank.values()}) == 1
    (warning,) = r.mpi.warnings
    assert re.match(r"warning: 4 ranks ran on [01] of the job's 4 pods \(used: ", warning)
    assert all(p.name in warning for p in session.pods("node"))
    assert "likely cause: the hostfile was not read" in warning
    quiet = session.execute(cell, world_check=False)
    assert quiet.mpi.warnings == [] and sorted(quiet.by_rank) == [0, 1, 2, 3]


def test_live_events_per_rank(session: Any, mpi_impl: str) -> None:
    events: list[RankEvent] = []
    plain: list[str] = []
    r = session.execute(
        "echo around; " + mpirun_sh(mpi_impl, RANKS),
        on_ranks=events.append,
        on_output=lambda pod, stream, text: plain.append(text),
    )
    assert r.returncode == 0
    kinds = [e.kind for e in events]
    assert kinds[0] == "begin" and kinds[-1] == "end"
    said: dict[tuple[int | None, str], str] = {}
    for e in events:
        if e.kind == "output":
            said[(e.rank, e.stream)] = said.get((e.rank, e.stream), "") + e.text
    for rank, out in r.by_rank.items():
        assert said[(rank, "stdout")] == out.stdout and said[(rank, "stderr")] == out.stderr
    assert "".join(plain) == "around\n"  # the ranks' text went to on_ranks only


def test_interrupt_stops_every_rank_and_keeps_what_they_printed(
    session: Any, mpi_impl: str
) -> None:
    marker = f"tjm-ranks-{time.monotonic_ns()}"
    seen = threading.Event()

    def on_ranks(event: RankEvent) -> None:
        if event.kind == "output":
            seen.set()

    run = session.start(
        mpirun_sh(mpi_impl, f"sh -c 'echo up; exec sleep 300 {marker}'"), on_ranks=on_ranks
    )
    assert seen.wait(60)
    time.sleep(1)
    error = run.interrupt()
    assert isinstance(error, CommandInterruptedError)
    assert error.partial.by_rank and all(o.stdout == "up\n" for o in error.partial.by_rank.values())
    deadline = time.monotonic() + 15
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "a rank outlived the interrupt"
        time.sleep(0.2)
