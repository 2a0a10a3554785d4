"""The real-cluster suite (tests/realcluster), run against the local cluster: what it asks of a
cluster works wherever the API behaves as Kubernetes does, and the suite itself stays runnable
(it only runs for real when TRAINJOB_MAGICS_E2E_KUBECONFIG names a real cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.kueue import KueueConfig

REPO = Path(__file__).resolve().parents[2]
SUITE = "tests/realcluster"
pytestmark = pytest.mark.timeout(900)


def test_the_real_cluster_suite_passes_on_the_local_cluster(tmp_path: Path) -> None:
    kueue = KueueConfig(quota={"cpu": "16", "memory": "64Gi"})
    with LocalCluster(root_dir=tmp_path / "cluster", kueue=kueue, bookmark_interval=0.5) as c:
        env = {
            **os.environ,
            "TRAINJOB_MAGICS_E2E_KUBECONFIG": str(c.kubeconfig_path),
            "TRAINJOB_MAGICS_E2E_QUEUE": "user-queue",
            "TRAINJOB_MAGICS_E2E_TIMEOUT": "120",
        }
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
                # what only a real node shows (its own network, sshd, cgroups, a kubelet)
                "--ignore=tests/realcluster/test_node_real.py",
                # and what a real control plane enforces that the local cluster does not
                # (ResourceQuota)
                "--ignore=tests/realcluster/test_pod_counts_real.py",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=840,
        )
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout, tail
    # the one thing the local cluster's Kueue lacks (docs/local-cluster.md): priority preemption
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all("does not preempt by priority" in line for line in skips), tail
