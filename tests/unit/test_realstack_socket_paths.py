"""The real node's unix sockets fit in ``sun_path`` (108 bytes) whatever the run folder: the
matrix's run folders once named each Kubernetes version and containerd exited at ``up``
("failed to create unix socket ... containerd.sock.ttrpc")."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.realstack import matrix, stack
from devtools.realstack.context import NodeShape, StackContext
from devtools.realstack.procs import StackError
from devtools.realstack.realnode import containerd, host
from devtools.realstack.versions import MATRIX, MATRIX_KUBERNETES, Versions


def test_containerds_socket_is_short_in_a_long_run_folder(tmp_path: Path) -> None:
    run = tmp_path / ("x" * 120)
    ctx = StackContext(run=run, versions=Versions(), nodes=NodeShape())
    path = containerd.socket(ctx)
    assert path.parent == host.socket_dir(ctx.node_slot)
    assert len(f"{path}.ttrpc") <= stack.SUN_PATH


def test_a_stack_started_before_keeps_its_socket(tmp_path: Path) -> None:
    ctx = StackContext(run=tmp_path, versions=Versions(), nodes=NodeShape())
    old = tmp_path / "node" / "containerd" / "containerd.sock"
    old.parent.mkdir(parents=True)
    old.touch()
    assert containerd.socket(ctx) == old


def test_up_refuses_a_run_folder_too_long_for_the_kubelets_sockets(tmp_path: Path) -> None:
    run = tmp_path / ("r" * 100)
    with pytest.raises(StackError, match=r"too long for the kubelet's sockets.*shorter --run"):
        stack.check_run_path(run)
    assert not run.exists()  # refused before anything was made


def test_every_matrix_run_folder_fits_under_roots_home() -> None:
    """The stack runs as root (network namespaces, mounts): its cache is under /root."""
    home = Path("/root")
    parent = home / ".cache" / "trainjob-magics" / "realstack" / "run"
    for kubernetes in MATRIX_KUBERNETES:
        for trainer, kueue, _ in MATRIX:
            stack.check_run_path(matrix.run_folder(parent, kubernetes, trainer, kueue))
