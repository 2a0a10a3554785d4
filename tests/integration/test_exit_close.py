"""A process that exits with a session open deletes its TrainJob (the registry's atexit hook),
even though the kubernetes client removes its kubeconfig temp files at exit too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.kube import get_trainjob
from tests.helpers.polling import wait_until
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

SCRIPT = """
import sys
from trainjob_magics import connect
from trainjob_magics.magics.registry import SessionRegistry
reg = SessionRegistry()
s = connect("mpi-interactive", name=sys.argv[1], config_file=sys.argv[2], idle_timeout=None)
reg.add("exit", s)
print("connected", flush=True)
"""


def test_a_session_open_at_process_exit_is_deleted(cluster: LocalCluster) -> None:
    name = "exit-close-1"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, name, str(cluster.kubeconfig_path)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "connected", proc.stdout
    assert "Could not close" not in proc.stderr, proc.stderr
    assert "unreachable" not in proc.stderr, proc.stderr
    # the close at exit deleted the object (background propagation: the pods follow)
    wait_until(lambda: get_trainjob(cluster.kubeconfig_path, name) is None, timeout=30)
