"""Per-rank output of a real torchrun (engine/exec/torchrun_*.py) on the local cluster: Debian's
``python3-torch`` (tests/helpers/torch.py says why its launcher is wrapped), run by a cell as a
user would, in a torch-distributed job's pod (a process of this machine: torchrun's workers are
too). Skipped without python3-torch, failed instead under TRAINJOB_MAGICS_REQUIRE_TORCH=1."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.torch import require_torch, torchrun_launcher
from trainjob_magics.engine import connect
from trainjob_magics.engine.exec.torchrun_report import TorchFailure
from trainjob_magics.engine.exec.torchrun_runs import TorchRankOutput, TorchRun
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

SCRIPT = """\
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} of {os.environ['WORLD_SIZE']} (local {os.environ['LOCAL_RANK']})")
print(f"err {rank}", file=sys.stderr)
if rank == int(sys.argv[1]):
    print(f"last words of {rank}")
    sys.exit(3)
time.sleep(1)
"""


@pytest.fixture(scope="module")
def torch_version() -> str:
    return require_torch()


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster, torch_version: str) -> Iterator[Any]:
    s = connect("torch-distributed", num_nodes=1, config_file=str(local_cluster.kubeconfig_path))
    s.write_file("ranks.py", SCRIPT)
    yield s
    s.close(timeout=30)


@pytest.fixture(scope="module")
def launcher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("torchrun")
    torchrun_launcher(directory)
    return directory


def cell(launcher_dir: Path, failing_rank: int) -> str:
    """The cell's text: torchrun as a user types it (the launcher first on PATH; the job's
    master address is a name only a real cluster resolves, so the loopback here, on a free
    port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return (
        f"export PATH={shlex.quote(str(launcher_dir))}:$PATH; echo before; "
        f"torchrun --nproc_per_node 4 --master_addr 127.0.0.1 --master_port {port} "
        f"--monitor_interval 1 ranks.py {failing_rank}; echo after"
    )


def test_four_ranks_apart_and_stdout_untagged(session: Any, launcher_dir: Path) -> None:
    r = session.execute(cell(launcher_dir, -1))
    assert r.returncode == 0, r.stderr
    assert sorted(r.by_rank) == [0, 1, 2, 3]
    pod = session.pods("trainer")[0].name
    for rank, out in r.by_rank.items():
        assert isinstance(out, TorchRankOutput) and out.pod == pod and out.local_rank == rank
        assert out.stdout == f"rank {rank} of 4 (local {rank})\n"
        assert out.stderr == f"err {rank}\n"
    lines = r.stdout.splitlines()
    assert lines[0] == "before" and lines[-1] == "after"
    assert sorted(lines[1:-1]) == [f"rank {k} of 4 (local {k})" for k in range(4)]
    assert "[default" not in r.stdout + r.stderr and "\x1e" not in r.stdout + r.stderr
    assert sorted(r.stderr.splitlines())[-4:] == [f"err {k}" for k in range(4)]
    (run,) = r.mpi.runs
    assert isinstance(run, TorchRun) and run.form == "default" and run.global_ranks
    assert r.mpi.notes() == ["ranks tagged by torchrun --tee 3"]
    assert r.mpi.failure is None and r.mpi.warnings == []
    assert "OMP_NUM_THREADS" in r.launcher  # torchrun's own warning, no rank's


def test_the_failed_rank_is_named(session: Any, launcher_dir: Path) -> None:
    r = session.execute(cell(launcher_dir, 2))
    assert r.returncode == 0  # `echo after` ran last
    assert sorted(r.by_rank) == [0, 1, 2, 3]
    assert r.by_rank[2].stdout == "rank 2 of 4 (local 2)\nlast words of 2\n"
    (run,) = r.mpi.runs
    assert run.returncode == 1  # torchrun's own exit code after ChildFailedError
    failure = r.mpi.failure
    assert isinstance(failure, TorchFailure)
    assert (failure.rank, failure.local_rank, failure.exit_code) == (2, 2, 3)
    pod = session.pods("trainer")[0].name
    assert failure.pod == pod
    assert failure.line().startswith(
        f"torchrun: rank 2 (local rank 2, pod {pod}) failed first: exit code 3; last lines: "
    )
    assert "last words of 2" in failure.last_lines
    assert "Root Cause (first observed failure)" in r.launcher and "Root Cause" in r.stderr
    assert "[default" not in r.stdout + r.stderr


def test_a_users_own_tee_runs_as_written(session: Any, launcher_dir: Path) -> None:
    text = cell(launcher_dir, -1).replace("--nproc_per_node 4", "--nproc_per_node 2 --tee 1")
    r = session.execute(text)
    assert r.returncode == 0, r.stderr
    assert r.mpi is None and r.by_rank == {}
    assert "[default0]:rank 0 of 2" in r.stdout  # theirs, as they asked


@pytest.fixture(scope="module")
def two_nodes(local_cluster: LocalCluster, torch_version: str) -> Iterator[Any]:
    s = connect("torch-distributed", num_nodes=2, config_file=str(local_cluster.kubeconfig_path))
    s.write_file("ranks.py", SCRIPT, pods="all")
    yield s
    s.close(timeout=30)


def test_every_pod_its_own_ranks_with_pod_all(two_nodes: Any, launcher_dir: Path) -> None:
    """torchrun in both pods of a 2-node job (Trainer's PET_NNODES and PET_NODE_RANK, the job's
    PET_NPROC_PER_NODE=2): each pod's result has its ranks, global from the static
    rendezvous, with that pod."""
    text = cell(launcher_dir, -1).replace("--nproc_per_node 4 ", "")
    r = two_nodes.execute("export PET_NPROC_PER_NODE=2; " + text, pods="all")
    assert r.ok, r.summary()
    by_pod = {p.name: i for i, p in enumerate(two_nodes.pods("all"))}
    assert len(by_pod) == 2
    for pod, result in r.items():
        node = by_pod[pod]
        assert sorted(result.by_rank) == [2 * node, 2 * node + 1], (pod, result.stderr)
        for rank, out in result.by_rank.items():
            assert out.pod == pod and out.local_rank == rank - 2 * node
            assert out.stdout == f"rank {rank} of 4 (local {rank - 2 * node})\n"
        (note,) = result.mpi.notes()
        assert (
            note == f"ranks tagged by torchrun --tee 3 (rank = node rank {node} * 2 + local rank)"
            or (node == 0 and note == "ranks tagged by torchrun --tee 3")
        )
        assert "[default" not in result.stdout
