"""What a new user meets (docs/troubleshooting.md): one clear line each, no traceback, no hang.

A real InteractiveShell against the local cluster; one test per fix of the new-user QA run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.shell import magics_shell
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


def shown(
    sh: InteractiveShell, source: str, capsys: pytest.CaptureFixture[str]
) -> tuple[bool, str]:
    """Run a cell as a user would; (success, what the terminal showed)."""
    capsys.readouterr()
    res = sh.run_cell(source)
    out = capsys.readouterr()
    return res.success, out.out + out.err


def one_error_line(text: str, ename: str) -> str:
    """The single line naming ``ename``; fails on tracebacks or several error lines."""
    assert "Traceback" not in text, text
    lines = [x for x in text.splitlines() if f"{ename}" in x]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No KUBECONFIG, a HOME without ~/.kube/config, not inside a cluster."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    yield


def test_close_twice_is_harmless(shell, cluster, capsys) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive")
    ok, out = shown(shell, "%trainjob_close", capsys)
    assert ok and "Closed session 'default'" in out
    ok, out = shown(shell, "%trainjob_close", capsys)
    assert ok and out.strip() == "No sessions to close.", out


def test_status_after_close_says_connect(shell, cluster, capsys) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive")
    shell.run_line_magic("trainjob_close", "")
    ok, out = shown(shell, "%trainjob_status", capsys)
    line = one_error_line(out, "TrainJobUsageError")
    assert not ok and "start one with %trainjob_connect RUNTIME" in line


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("%trainjob_connect mpi-interactive --gpus 2", "(did you mean --gpu?)"),
        ("%trainjob_connect mpi-interactive --namspace x", "(did you mean --namespace?)"),
        ("%%trainjob --qiet\necho x", "(did you mean --quiet?)"),
        ("%trainjob_connect mpi-interactive --nodes two", "invalid int value: 'two'"),
    ],
)
def test_option_typos_name_the_fix_and_the_help(shell, cluster, capsys, source, fragment) -> None:
    before = cluster.faults.request_count
    ok, out = shown(shell, source, capsys)
    line = one_error_line(out, "TrainJobUsageError")
    magic = source.split()[0].lstrip("%")
    assert not ok and fragment in line and f"see %{magic}? for every option" in line, line
    assert cluster.faults.request_count == before


def test_no_kubeconfig_names_the_magic_option(no_kubeconfig, capsys) -> None:
    with magics_shell(None, widgets="off") as sh:
        t0 = time.monotonic()
        ok, out = shown(sh, "%trainjob_connect mpi-interactive", capsys)
        line = one_error_line(out, "ConfigError")
        assert not ok and time.monotonic() - t0 < 10
        assert "set KUBECONFIG, pass --kubeconfig PATH" in line and "config_file" not in line
        assert "trainjob-magics local-cluster" in line
        ok, out = shown(
            sh, "%trainjob_connect mpi-interactive --kubeconfig /nonexistent/kc", capsys
        )
        line = one_error_line(out, "ConfigError")
        assert "pass an existing --kubeconfig PATH" in line and "config_file" not in line


def test_stopped_cluster_says_start_it(no_kubeconfig, tmp_path, capsys) -> None:
    kubeconfig = tmp_path / "stopped-kubeconfig"
    with LocalCluster(kubeconfig_path=kubeconfig):
        pass  # started, kubeconfig written, stopped
    with magics_shell(kubeconfig, widgets="off") as sh:
        t0 = time.monotonic()
        ok, out = shown(sh, "%trainjob_connect mpi-interactive", capsys)
        line = one_error_line(out, "ApiServerError")
        assert not ok and time.monotonic() - t0 < 15
        assert "(connection refused): start the cluster" in line, line
        assert "KUBECONFIG or --kubeconfig" in line and "MaxRetryError" not in line


def test_every_magic_takes_the_session_the_same_way(shell, cluster, capsys) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive --session first")
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as second")
    shell.run_cell_magic("trainjob", "--session first --out a", "hostname")
    shell.run_cell_magic("trainjob", "first --out b", "hostname")
    assert shell.user_ns["a"] == shell.user_ns["b"] != ""
    shell.run_cell_magic("trainjob_writefile", "f.txt --session first", "hi\n")
    shell.run_cell_magic("trainjob", "--session first --out c", "cat f.txt")
    assert shell.user_ns["c"] == "hi\n"
    ok, out = shown(shell, "%trainjob_status --session first", capsys)
    assert ok and shell.user_ns["a"].strip() in out
    ok, out = shown(shell, "%%trainjob first --session second\necho x", capsys)
    line = one_error_line(out, "TrainJobUsageError")
    assert not ok and "two sessions given" in line
    ok, out = shown(shell, "%trainjob_close --session first", capsys)
    assert ok and "Closed session 'first'" in out
    shell.run_line_magic("trainjob_close", "--all")


def test_status_of_a_trainjob_of_another_kernel(shell, cluster, capsys) -> None:
    from trainjob_magics import connect

    other = connect("mpi-interactive", config_file=str(cluster.kubeconfig_path), timeout=30)
    try:
        ok, out = shown(shell, f"%trainjob_status {other.name} --namespace default", capsys)
        assert ok and other.name in out and "Running" in out, out
        assert "%trainjob_connect --attach NAME" in out
        ok, out = shown(shell, "%trainjob_status zzznosuchjob --namespace default", capsys)
        line = one_error_line(out, "TrainJobUsageError")
        assert not ok and "%trainjob_sessions --all" in line
    finally:
        other.close(timeout=20)
