"""``kubectl get trainjobs`` for an admitted, running TrainJob, as upstream prints it.

The STATE column is the CRD's printer column ``.status.conditions[-1:].type``
(kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go, ``+kubebuilder:printcolumn``;
the same in every CRD of /work/shared/k8s trainer-v2.0.1 ... v2.3.0). A job Kueue admitted was
created suspended; on resume the controller sets the condition ``Suspended`` to ``False`` with
reason ``Resumed`` (pkg/controller/trainjob_controller.go ``setSuspendedCondition``), and it
stays the last condition until ``Complete`` or ``Failed`` is added. So a real cluster prints
``Suspended`` for a running job; the local cluster prints what a real one does, and the magics
show the state from the pods (``Running``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainjob_magics import connect
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kueue_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("kubectl-state")
    with LocalCluster(root_dir=root / "cluster", kueue=True) as cluster:
        yield cluster


def kubectl(cluster: LocalCluster, home: Path, *args: str) -> str:
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(cluster.kubeconfig_path)}
    proc = subprocess.run(
        ["kubectl", "--cache-dir", str(home / "cache"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_admitted_running_trainjob_state_column_is_upstreams(
    kueue_cluster: LocalCluster, tmp_path: Path
) -> None:
    session = connect(
        "torch-distributed",
        cpu="1",
        queue="user-queue",
        config_file=str(kueue_cluster.kubeconfig_path),
        timeout=120,
    )
    try:
        assert session.status().state == "Running"
        table = kubectl(kueue_cluster, tmp_path, "get", "trainjobs")
        header, *rows = table.splitlines()
        assert header.split() == ["NAME", "STATE", "AGE"], table
        (row,) = [r for r in rows if r.startswith(session.name)]
        conditions = json.loads(
            kubectl(
                kueue_cluster,
                tmp_path,
                "get",
                "trainjob",
                session.name,
                "-o",
                "jsonpath={.status.conditions}",
            )
        )
        last = conditions[-1]
        assert (last["type"], last["status"], last["reason"]) == ("Suspended", "False", "Resumed")
        assert row.split()[1] == last["type"] == "Suspended"  # as a real cluster prints it
    finally:
        session.close()
