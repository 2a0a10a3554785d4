"""Whole-job magics in a real InteractiveShell (text mode) against the local cluster."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.mpi import mpirun_sh, require_openmpi
from tests.helpers.shell import magics_shell
from trainjob_magics.engine.result import MultiExecResult
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics import TrainJobCellError, TrainJobUsageError

pytestmark = pytest.mark.timeout(150)

SCRIPT = """\
import os
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
print(f"rank {rank} of {size} on {os.environ['HOSTNAME']} data={open('data/n.txt').read().strip()}")
"""


@pytest.fixture(scope="module")
def shell(local_cluster: LocalCluster) -> Iterator[InteractiveShell]:
    with magics_shell(local_cluster.kubeconfig_path, widgets="off") as sh:
        sh.run_line_magic("trainjob_connect", "mpi-interactive --nodes 4")
        try:
            yield sh
        finally:
            sh.run_line_magic("trainjob_close", "--all")


def session(sh: InteractiveShell) -> Any:
    return sh.find_line_magic("trainjob_connect").__self__.registry.find().session


def test_writefile_then_mpirun_prints_one_line_per_rank(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], mpi_impl: str
) -> None:
    capsys.readouterr()
    shell.run_cell_magic("trainjob_writefile", "script.py --pod all", SCRIPT)
    assert "on 4 pods" in capsys.readouterr().out
    shell.run_cell_magic("trainjob", "--pod all", "mkdir -p data && echo 42 > data/n.txt")
    capsys.readouterr()
    shell.run_cell_magic("trainjob", "", mpirun_sh(mpi_impl, "python3 script.py"))
    out = capsys.readouterr().out
    ranks = re.findall(r"^rank (\d) of 4 on (\S+) data=42$", out, re.M)
    assert sorted(int(r) for r, _ in ranks) == [0, 1, 2, 3], out
    assert len({host for _, host in ranks}) == 4  # one rank per pod


def test_plain_mpirun_in_a_cell_is_open_mpi(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's plain mpirun runs the real Open MPI, configured by the launcher's environment."""
    real = require_openmpi()
    version = subprocess.run([real, "--version"], capture_output=True, text=True, check=True)
    capsys.readouterr()
    cell = "mpirun --version; mpirun -np 2 hostname; echo $OMPI_MCA_orte_default_hostfile"
    shell.run_cell_magic("trainjob", "", cell)
    out = capsys.readouterr().out
    assert version.stdout.splitlines()[0] in out and "shim" not in out
    name = session(shell).name
    hosts = re.findall(rf"^({name}-\S+)$", out, re.M)
    assert sorted(hosts) == [f"{name}-launcher-0-0", f"{name}-node-0-0"], out
    assert re.search(r"^/etc/mpi/hostfile$", out, re.M)  # Trainer's env on the launcher


def test_pod_all_grouped_output_and_exit_codes(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    shell.run_cell_magic("trainjob", "--pod all --out outs", 'echo "hi from $POD_NAME"')
    out = capsys.readouterr().out
    result = shell.user_ns["_trainjob"]
    assert isinstance(result, MultiExecResult) and len(result) == 4 and result.ok
    for pod, label in result.labels.items():
        assert f"[{label}] hi from {pod}\n" in out
        assert f"[{label}] exit code 0 · " in out
    assert re.search(r"^4 pods ok", out, re.M)
    assert shell.user_ns["outs"] == {p: f"hi from {p}\n" for p in result}
    assert [lbl for lbl in result.labels.values()] == ["launcher-0", "node-0", "node-1", "node-2"]


def test_failing_pod_fails_the_cell_and_is_named(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = session(shell).pods("node-1")[0].name
    with pytest.raises(
        TrainJobCellError, match=rf"1 of 4 pods failed: {victim} \[node-1\] \(exit 3\)"
    ):
        shell.run_cell_magic(
            "trainjob", "--pod all", f'echo "x $POD_NAME"; [ "$POD_NAME" != {victim} ] || exit 3'
        )
    out = capsys.readouterr().out
    assert "[node-1] exit code 3" in out and "[node-0] exit code 0" in out
    shell.run_cell_magic(  # --no-raise-error: shown, not raised
        "trainjob", "--pod node-1 --no-raise-error", "exit 5"
    )
    assert shell.user_ns["_trainjob"].failed == [victim]
    with pytest.raises(TrainJobUsageError):
        shell.run_cell_magic("trainjob", "--pod", "true")


def test_upload_download_with_progress(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "inputs"
    data.mkdir()
    (data / "big.bin").write_bytes(os.urandom(6 << 20))
    (data / "small.txt").write_text("small\n")
    capsys.readouterr()
    shell.run_line_magic("trainjob_upload", f"{data} inputs --pod all")
    out = capsys.readouterr().out
    assert "Uploading: 100.0%" in out and "copied" in out and "verified by sha256" in out
    shell.run_line_magic("trainjob_download", f"inputs {tmp_path}/back/ --pod node-2")
    out = capsys.readouterr().out
    assert "Downloading: 100.0%" in out
    assert (tmp_path / "back" / "inputs" / "big.bin").read_bytes() == (
        data / "big.bin"
    ).read_bytes()
    assert (tmp_path / "back" / "inputs" / "small.txt").read_text() == "small\n"


def test_logs_of_node_pods(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    shell.run_line_magic("trainjob_logs", "--pod node --tail 5")
    out = capsys.readouterr().out
    for i in range(3):
        assert f"[node-{i}] Server listening" in out
    assert "logs of 3 pods" in out
    with pytest.raises(Exception, match="no pod matches target 'node-9'"):
        shell.run_line_magic("trainjob_logs", "--pod node-9")
