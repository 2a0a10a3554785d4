"""The real-cluster suite (tests/realcluster) against the real stack: upstream kube-apiserver,
scheduler and controller-manager, a real node (kubelet, containerd), the JobSet, Trainer and
Kueue controllers
(devtools/realstack), every test on one torch runtime and one MPI runtime (``CI_RUNTIMES``:
torch-distributed, deepspeed-distributed); mlx-distributed (MPI too, the same image recipe) runs
in ``python -m devtools.realstack matrix`` with the other versions, or here with
``TRAINJOB_MAGICS_E2E_ALL_RUNTIMES=1`` (every runtime of ``stack.RUNTIMES``), to keep the CI
run within its budget.
scripts/test.sh starts the stack when Go is installed; without one this
test skips naming what is missing, and fails under ``TRAINJOB_MAGICS_REQUIRE_REALSTACK=1``
(set by .ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.realstack import paths, procs, stack
from devtools.realstack.context import StackContext

REPO = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"
pytestmark = pytest.mark.timeout(1800)
CI_RUNTIMES = ("torch-distributed", "deepspeed-distributed")


def _running_stack() -> StackContext:
    run = paths.run_dir()
    why = None
    if not (run / "state.json").exists():
        why = f"no real stack at {run}: start one with `python -m devtools.realstack up` (needs Go)"
    elif not stack.status(run).get("ready"):
        down = sorted(set(stack.COMPONENTS) - set(procs.running(run)) - {"jobset", "trainer"})
        why = f"the real stack at {run} is not ready (not running: {', '.join(down) or '?'})"
    if why:
        if REQUIRE:
            pytest.fail(f"{why}; TRAINJOB_MAGICS_REQUIRE_REALSTACK=1 is set", pytrace=False)
        pytest.skip(why)
    return StackContext.load(run)


def test_the_real_cluster_suite_passes_on_the_real_stack() -> None:
    ctx = _running_stack()
    env = {**os.environ, **stack.test_env(ctx), "TRAINJOB_MAGICS_E2E_TIMEOUT": "300"}
    if os.environ.get("TRAINJOB_MAGICS_E2E_ALL_RUNTIMES") != "1":
        assert set(CI_RUNTIMES) <= set(stack.RUNTIMES)
        env["TRAINJOB_MAGICS_E2E_RUNTIMES"] = ",".join(CI_RUNTIMES)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            "tests/realcluster",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1700,
    )
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    summary = proc.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary, tail
    print(summary)
