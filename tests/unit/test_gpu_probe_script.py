"""The GPU probe's pod-side script (engine/inventory/gpu_probe.py) run by a real ``sh`` here,
with the stand-in ``nvidia-smi`` (tests/helpers/standin_nvidia_smi: NOT NVIDIA's tool): a live
command wrapper's pid file makes it answer ``busy`` and run nothing; a stale one does not; no
nvidia-smi is ``absent``; ``check`` never runs nvidia-smi."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.gpu_standin import LOG_ENV, STANDIN_DIR, STANDIN_GPU_NAME, calls
from trainjob_magics.engine.inventory.gpu_probe import probe_argv, read_probe
from trainjob_magics.engine.result import ExecResult

pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")


def _run(tmp: Path, *, sample: bool = True, standin: bool = True) -> ExecResult:
    bare = tmp / "bin"
    bare.mkdir(exist_ok=True)
    for tool in ("sh", "cat", "timeout"):  # what the script may use, nvidia-smi aside
        found = shutil.which(tool)
        if found and not (bare / tool).exists():
            (bare / tool).symlink_to(found)
    path = f"{STANDIN_DIR}{os.pathsep}{bare}" if standin else str(bare)
    env = {"PATH": path, "TMPDIR": str(tmp), LOG_ENV: str(tmp / "calls"), "POD_NAME": "p0"}
    done = subprocess.run(
        probe_argv(sample), env=env, capture_output=True, text=True, timeout=30, check=False
    )
    return ExecResult(done.stdout, done.stderr, done.returncode, 0.0, pod="p0")


def _pid_file(tmp: Path, pid: int) -> None:
    state = tmp / "trainjob-magics"
    state.mkdir(exist_ok=True)
    (state / "x1-abc.pid").write_text(f"{pid}\n")


def test_samples_through_nvidia_smi(tmp_path: Path) -> None:
    answer = read_probe("p0", _run(tmp_path))
    assert answer.state == "ok", answer
    assert [g.text() for g in answer.gpus] == [
        "GPU 0: 37 % · 1234/81920 MiB",
        "GPU 1: n/a · 512/81920 MiB",
    ]
    assert answer.gpus[0].name == STANDIN_GPU_NAME
    assert calls(tmp_path / "calls") == ["p0"]


def test_a_running_command_of_ours_means_busy_and_nothing_runs(tmp_path: Path) -> None:
    _pid_file(tmp_path, os.getpid())  # a live process: a command still runs
    assert read_probe("p0", _run(tmp_path)).state == "busy"
    assert calls(tmp_path / "calls") == []


def test_a_stale_pid_file_is_no_command(tmp_path: Path) -> None:
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    _pid_file(tmp_path, int(gone.stdout))
    assert read_probe("p0", _run(tmp_path)).state == "ok"


def test_no_nvidia_smi_is_said_cleanly(tmp_path: Path) -> None:
    answer = read_probe("p0", _run(tmp_path, standin=False))
    assert (answer.state, answer.message) == ("absent", "no nvidia-smi in the pod")


def test_check_only_never_runs_nvidia_smi(tmp_path: Path) -> None:
    assert read_probe("p0", _run(tmp_path, sample=False)).state == "idle"
    _pid_file(tmp_path, os.getpid())
    assert read_probe("p0", _run(tmp_path, sample=False)).state == "busy"
    assert calls(tmp_path / "calls") == []
