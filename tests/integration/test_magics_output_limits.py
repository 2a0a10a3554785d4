"""``%%trainjob`` in a real InteractiveShell against the local cluster: bounded memory while a
large output streams, the hidden-lines note naming the spill file, Ctrl-C on ``--pod all``
stopping every pod's command, and "did you mean" for an unknown runtime."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.shell import magics_shell
from tests.integration.proctools import marker_processes, wait_dead
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics import TrainJobCellError

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def shell(cluster: LocalCluster) -> Iterator[InteractiveShell]:
    with magics_shell(cluster.kubeconfig_path, widgets="off", close_timeout=20.0) as sh:
        yield sh
        sh.run_line_magic("trainjob_close", "--all")


def connect(sh: InteractiveShell, line: str = "mpi-interactive") -> Any:
    sh.run_line_magic("trainjob_connect", line)
    return sh.find_line_magic("trainjob_connect").__self__.registry.find().session


def test_large_output_keeps_the_kernel_light(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """32 MB through a cell with the display capped: Python allocations stay far below the
    output size (the magic keeps no copy of it; the engine spills past its memory limit)."""
    session = connect(shell)
    session.max_memory_output = 1 << 20
    shell.run_line_magic("config", "TrainJobMagics.display_max_lines = 50")
    nbytes = 32 << 20
    capsys.readouterr()
    tracemalloc.start()
    try:
        shell.run_cell_magic("trainjob", "", f"yes {'x' * 1999} | head -c {nbytes}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    result = shell.user_ns["_trainjob"]
    assert result.ok and result.stdout_size == nbytes and result.stdout_path
    assert peak < 12 << 20, f"peak {peak / 2**20:.1f} MiB of Python allocations for 32 MiB"
    out = capsys.readouterr().out
    assert "exit code 0 ·" in out and len(out) < 1 << 20


@pytest.mark.parametrize("widgets", ["off", "on"])
def test_hidden_lines_note_names_the_spill_file(
    cluster: LocalCluster, widgets: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with magics_shell(
        cluster.kubeconfig_path, widgets=widgets, close_timeout=20.0, display_max_lines=20
    ) as sh:
        try:
            session = connect(sh)
            session.max_memory_output = 4096
            capsys.readouterr()
            sh.run_cell_magic("trainjob", "--result r", "seq 1 20000")
            result = sh.user_ns["r"]
            assert result.ok and result.stdout_path and os.path.isfile(result.stdout_path)
            out = capsys.readouterr().out
            note = re.search(r"\[… ([\d,]+) lines hidden; the full output is in (.*)\]", out)
            assert note, out[-2000:]
            assert int(note.group(1).replace(",", "")) > 19_000
            assert note.group(2) == f"r.stdout / .stderr, stored in the file {result.stdout_path}"
            assert "20000\n" in out and "exit code 0 ·" in out
        finally:
            sh.run_line_magic("trainjob_close", "--all")


def test_ctrl_c_on_pod_all_stops_every_pod(shell: InteractiveShell) -> None:
    session = connect(shell, "mpi-interactive --nodes 3")
    pods = [p.name for p in session.pods("all")]
    assert len(pods) == 3  # the launcher and 2 node pods
    marker = f"{os.getpid() % 100000:05d}{int(time.time() * 1000) % 100000:05d}"
    body = f"echo started\nsh -c 'sleep 1000.{marker}1; :' &\nsleep 1000.{marker}2\n"
    box: dict[str, Any] = {}

    def ctrl_c_when_running() -> None:
        deadline = time.monotonic() + 30
        while len(marker_processes(f"sleep 1000.{marker}", prefix=True)) < 2 * len(pods):
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)
        box["tree"] = marker_processes(marker)
        box["t0"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C / Kernel > Interrupt does

    threading.Thread(target=ctrl_c_when_running, daemon=True).start()
    with pytest.raises(TrainJobCellError, match="interrupted") as info:
        shell.run_cell_magic("trainjob", "--pod all", body)
    assert "tree" in box, "the command never ran on every pod"
    assert len(box["tree"]) >= 4 * len(pods)  # wrapper, cell sh, child sh, 2 sleeps per pod
    assert wait_dead(box["tree"], 5) == []
    assert time.monotonic() - box["t0"] < 5
    assert marker_processes(marker) == []
    assert "stopped the remote command" in str(info.value)
    partial = info.value.result
    assert partial is not None and sorted(partial) == sorted(pods)
    assert all(r.stdout == "started\n" for r in partial.values())
    shell.run_cell_magic("trainjob", "--pod all --out o", "echo still-usable")
    assert set(shell.user_ns["o"].values()) == {"still-usable\n"}


def test_unknown_runtime_suggests_the_closest(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    res = shell.run_cell("%trainjob_connect mpi-interactve")
    assert type(res.error_in_exec).__name__ == "InvalidInputError"
    msg = str(res.error_in_exec)
    assert "unknown runtime 'mpi-interactve'" in msg and "did you mean 'mpi-interactive'?" in msg
    for rt in ("mpi-interactive", "torch-distributed", "deepspeed-distributed"):
        assert rt in msg.split("available:", 1)[1]
