"""`%trainjob_sessions --all` lists every TrainJob of the project; attach to or close any."""

from __future__ import annotations

import os
import socket

import pytest

from tests.helpers.kube import create_namespace
from trainjob_magics import connect
from trainjob_magics.engine.trainjob.orphans import list_trainjobs

pytestmark = pytest.mark.timeout(60)


def test_list_attach_and_close_orphans(shell, cluster, capsys) -> None:
    cfg = str(cluster.kubeconfig_path)
    orphan_a = connect("mpi-interactive", config_file=cfg, timeout=30)  # "another kernel's"
    orphan_b = connect("mpi-interactive", config_file=cfg, timeout=30)
    try:
        jobs = {j.name: j for j in list_trainjobs(config_file=cfg)}
        a = jobs[orphan_a.name]
        assert a.host == socket.gethostname() and a.pid == str(os.getpid()) and a.mine
        assert a.state == "Running" and a.idle_timeout == "1800" and a.runtime == "mpi-interactive"

        shell.run_line_magic("trainjob_sessions", "--all")
        out = capsys.readouterr().out
        assert orphan_a.name in out and orphan_b.name in out
        assert f"@{socket.gethostname()}:{os.getpid()}" in out and "Running" in out
        assert "%trainjob_connect --attach NAME" in out and "%trainjob_close NAME" in out

        shell.run_line_magic("trainjob_connect", f"--attach {orphan_a.name}")
        shell.run_cell_magic("trainjob", orphan_a.name, "echo attached")
        assert "attached" in capsys.readouterr().out

        shell.run_line_magic("trainjob_close", orphan_b.name)  # not a session of this kernel
        out = capsys.readouterr().out
        assert f"Closed TrainJob {orphan_b.name}" in out
        assert orphan_b.name not in {j.name for j in list_trainjobs(config_file=cfg)}

        with pytest.raises(Exception) as info:
            shell.run_line_magic("trainjob_close", "zzznosuchjob")
        assert "no session or TrainJob named 'zzznosuchjob'" in str(info.value)
    finally:
        for s in (orphan_a, orphan_b):
            s.close(timeout=20)


def test_sessions_all_searches_the_namespaces_of_this_kernels_sessions(
    shell, cluster, capsys
) -> None:
    """Tried on a real API server: after a connect in team-a, --all searched only the
    configured namespace and said "No TrainJobs created by trainjob-magics."."""
    create_namespace(cluster.kubeconfig_path, "team-a")
    shell.run_line_magic("trainjob_connect", "mpi-interactive --namespace team-a --as a")
    try:
        name = _session_name(shell, "a")
        capsys.readouterr()
        shell.run_line_magic("trainjob_sessions", "--all")
        out = capsys.readouterr().out
        assert "in namespaces default, team-a:" in out, out
        assert name in out and "team-a" in out and "NAMESPACE" in out
        shell.run_line_magic("trainjob_sessions", "--all --namespace default")
        out = capsys.readouterr().out
        assert "trainjob-magics in namespace default" in out and name not in out, out
    finally:
        shell.run_line_magic("trainjob_close", "--all")


def _session_name(shell, alias: str) -> str:
    from trainjob_magics.magics.extension import loaded_magics

    magics = loaded_magics(shell)
    assert magics is not None
    return magics.host.registry.get(alias).session.name
