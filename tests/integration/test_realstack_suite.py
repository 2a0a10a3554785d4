"""The real-cluster suite (tests/realcluster) against the real stack: upstream kube-apiserver,
scheduler and controller-manager, a real node (kubelet, containerd), the JobSet, Trainer and
Kueue controllers
(devtools/realstack), every test on each runtime of ``stack.RUNTIMES`` (torch-distributed,
deepspeed-distributed, mlx-distributed: ``TRAINJOB_MAGICS_E2E_RUNTIMES`` from ``stack.test_env``).
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
