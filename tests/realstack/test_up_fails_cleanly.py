"""An ``up`` that fails stops what it started and says which step failed (issue 37: a failed
``up --kubernetes v1.37.2`` once left etcd running). Here kube-apiserver refuses a feature gate
it does not know, after etcd started: the control plane step fails, the command exits non-zero
naming the step and the API server's own words, and no process of the run is left."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.realstack import paths, procs
from devtools.realstack.versions import DEFAULT
from tests.realstack.conftest import _missing

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


def test_a_failed_up_stops_what_it_started_and_names_the_step() -> None:
    if os.geteuid() != 0:
        _missing("the real stack's node needs root")
    if not (paths.bin_dir("kubernetes", DEFAULT.kubernetes) / "kube-apiserver").exists():
        _missing(f"Kubernetes {DEFAULT.kubernetes} is not built (python -m devtools.realstack up)")
    run = paths.cache_root() / "run" / f"f-{secrets.token_hex(3)}"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "devtools.realstack",
                "--run",
                str(run),
                "up",
                "--apiserver-feature-gates",
                "NoSuchGateOfTrainjobMagics=true",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=540,
        )
        said = done.stdout + done.stderr
        assert done.returncode != 0, said
        assert "up failed at control plane" in said, said[-3000:]
        assert "NoSuchGateOfTrainjobMagics" in said, said[-3000:]
        assert (run / "logs" / "etcd.log").exists()  # etcd had started: it had to be stopped
        assert procs.running(run) == [], said[-3000:]
        leftovers = subprocess.run(["pgrep", "-af", str(run)], capture_output=True, text=True)
        assert leftovers.stdout == "", leftovers.stdout
    finally:
        subprocess.run(
            [sys.executable, "-m", "devtools.realstack", "--run", str(run), "down"],
            cwd=REPO,
            capture_output=True,
            timeout=300,
        )
