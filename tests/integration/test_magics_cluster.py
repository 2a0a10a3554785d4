"""Magics in a real InteractiveShell against the local cluster."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.kube import trainjob_names, wait_trainjob_gone
from tests.helpers.shell import magics_shell
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics import (
    TrainJobCellError,
    TrainJobMagicError,
    TrainJobUsageError,
    last_result,
)
from trainjob_magics.magics.extension import loaded_magics
from trainjob_magics.magics.views.text import TextOutputView

pytestmark = pytest.mark.timeout(120)


def trainjobs(cluster: LocalCluster, namespace: str = "default") -> list[str]:
    """Live TrainJob names in ``namespace``, read through the API server."""
    return trainjob_names(cluster.kubeconfig_path, namespace, include_deleting=False)


def wait_gone(cluster: LocalCluster, name: str, timeout: float = 10.0) -> bool:
    return wait_trainjob_gone(cluster.kubeconfig_path, name, timeout, interval=0.1)


@pytest.fixture
def shell(cluster: LocalCluster) -> Iterator[InteractiveShell]:
    with magics_shell(cluster.kubeconfig_path, widgets="off", close_timeout=20.0) as sh:
        yield sh


def magics(sh: InteractiveShell) -> Any:
    return sh.find_line_magic("trainjob_connect").__self__


def connect(sh: InteractiveShell, line: str = "mpi-interactive --nodes 2") -> Any:
    sh.run_line_magic("trainjob_connect", line)
    return magics(sh).registry.find().session


def test_connect_reuse_status_close(
    shell: InteractiveShell, cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    session = connect(shell)
    out = capsys.readouterr().out
    assert f"Session 'default' ready: TrainJob {session.name}" in out
    assert f"] {session.name}: Running, 2/2 pods running" in out
    progress = [line for line in out.splitlines() if line.startswith("[")]
    assert all(line.count("pods running") == 1 for line in progress), progress  # said once
    assert session.name in trainjobs(cluster)
    connect(shell)  # Run All again: same settings -> same session
    assert "Reusing the live session 'default'" in capsys.readouterr().out
    assert trainjobs(cluster).count(session.name) == 1
    with pytest.raises(TrainJobUsageError, match="live with other settings"):
        shell.run_line_magic("trainjob_connect", "mpi-interactive --nodes 3")
    # an unknown runtime is named, with the runtimes there are, before the live session's
    # settings; --replace does not close the live session for it
    for extra in ("", " --replace"):
        capsys.readouterr()
        result = shell.run_cell(f"%trainjob_connect no-such-runtime{extra}")
        error = "".join(result.error_in_exec._render_traceback_())  # what the user sees
        assert "unknown runtime 'no-such-runtime' in namespace default" in error, error
        assert "torch-distributed" in error and "mpi-interactive" in error, error
        assert "other settings" not in error and "\n" not in error.strip(), error
        assert not session.closed and session.name in trainjobs(cluster)
    shell.run_line_magic("trainjob_status", "")
    out = capsys.readouterr().out
    assert f"TrainJob {session.name}" in out and out.count(" Running ") >= 2
    shell.run_line_magic("trainjob_close", "")
    assert "deleted" in capsys.readouterr().out
    assert session.closed and wait_gone(cluster, session.name)


class Recorder(TextOutputView):
    """Text view that records when each chunk reached the cell's thread."""

    events: list[tuple[float, str, str]] = []

    def write(self, stream: str, text: str) -> None:
        Recorder.events.append((time.monotonic(), stream, text))
        super().write(stream, text)


def test_exec_streams_live(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    magics = loaded_magics(shell)
    assert magics is not None
    monkeypatch.setattr(magics.host.views, "text_output", Recorder)
    Recorder.events = []
    connect(shell)
    shell.run_cell_magic("trainjob", "--result r", "echo a; sleep 0.6; echo b >&2; sleep 0.3")
    done = time.monotonic()
    events = Recorder.events
    t_a = next(t for t, s, x in events if s == "stdout" and "a" in x)
    t_b = next(t for t, s, x in events if s == "stderr" and "b" in x)
    assert t_a < t_b and done - t_a >= 0.7, events  # 'a' shown long before the command ended
    r = shell.user_ns["r"]
    assert (r.stdout, r.stderr, r.returncode) == ("a\n", "b\n", 0)
    captured = capsys.readouterr()
    assert "a\n" in captured.out and "b\n" in captured.err and "exit code 0 ·" in captured.out


def test_exit_codes_raise_and_no_raise(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    session = connect(shell)
    with pytest.raises(TrainJobCellError, match=rf"exited with code 3 \(pod {session.pod}\)"):
        shell.run_cell_magic("trainjob", "", "echo kept; exit 3")
    assert last_result().returncode == 3 and last_result().stdout == "kept\n"
    capsys.readouterr()
    res = shell.run_cell("%%trainjob\necho visible\nexit 4\n")
    assert not res.success
    out = capsys.readouterr().out
    assert "visible" in out and "exit code 4" in out and "Traceback" not in out
    shell.run_cell_magic(
        "trainjob", "--no-raise-error --out o --err e --result r", "echo out; echo err >&2; exit 5"
    )
    ns = shell.user_ns
    assert (ns["o"], ns["e"], ns["r"].returncode) == ("out\n", "err\n", 5)
    assert ns["_trainjob"] is ns["r"]


def test_body_reaches_pod_byte_exact(shell: InteractiveShell) -> None:
    connect(shell)
    body = "cat <<'EOF'\nq='\"' b=\\\\ d=$(x) `y`\nEOF\nprintf '%s\\n' \"$((6*7))\""
    shell.run_cell_magic("trainjob", "--out o", body)
    assert shell.user_ns["o"] == "q='\"' b=\\\\ d=$(x) `y`\n42\n"


def test_two_sessions_and_close_all(
    shell: InteractiveShell, cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    a = connect(shell, "mpi-interactive --nodes 2 --as a")
    b = connect(shell, "torch-distributed --nodes 1 --as b")
    assert a.name != b.name
    shell.run_cell_magic("trainjob", "a --out oa", "hostname")
    shell.run_cell_magic("trainjob", "--out ob", "hostname")  # default: b, the last connected
    assert shell.user_ns["oa"].startswith(a.name) and shell.user_ns["ob"].startswith(b.name)
    capsys.readouterr()
    shell.run_line_magic("trainjob_sessions", "")
    out = capsys.readouterr().out
    assert a.name in out and b.name in out and "b *" in out
    shell.run_line_magic("trainjob_close", "--all")
    assert a.closed and b.closed
    assert wait_gone(cluster, a.name) and wait_gone(cluster, b.name)


def test_config_changes_behaviour(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("config", "TrainJobMagics.default_runtime = 'mpi-interactive'")
    session = connect(shell, "--nodes 2")
    assert session.runtime == "mpi-interactive"
    shell.run_line_magic("config", "TrainJobMagics.raise_on_error = False")
    shell.run_cell_magic("trainjob", "", "exit 9")
    assert last_result().returncode == 9
    shell.run_line_magic("config", "TrainJobMagics.display_max_lines = 10")
    capsys.readouterr()
    shell.run_cell_magic("trainjob", "--result big", "seq 1 500")
    out = capsys.readouterr().out
    # text: the first 10 lines live, a note for the hidden middle, then the tail
    assert (
        out.startswith("1\n2\n")
        and "\n10\n[… 489 lines hidden; the full output is in "
        "big.stdout / .stderr]\n500\nexit code 0 ·"
        in out
    )
    assert len(shell.user_ns["big"].stdout.splitlines()) == 500


def test_interrupt_while_waiting_deletes_the_job(
    shell: InteractiveShell,
    cluster: LocalCluster,
    unique_name: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique_name("int")
    cluster.faults.hold_pods(name)
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    with pytest.raises(TrainJobMagicError, match=f"TrainJob {name} in default is deleted"):
        shell.run_line_magic("trainjob_connect", f"mpi-interactive --nodes 2 --name {name}")
    assert "ImagePullBackOff" in capsys.readouterr().out
    assert wait_gone(cluster, name)
    assert len(magics(shell).registry) == 0


def test_reset_closes_sessions(shell: InteractiveShell, cluster: LocalCluster) -> None:
    session = connect(shell)
    shell.run_line_magic("reset", "-f")
    assert session.closed and wait_gone(cluster, session.name)


def test_unload_closes_sessions(shell: InteractiveShell, cluster: LocalCluster) -> None:
    session = connect(shell)
    shell.run_line_magic("unload_ext", "trainjob_magics")
    assert session.closed and wait_gone(cluster, session.name)
    shell.run_line_magic("load_ext", "trainjob_magics")


def test_exec_timeout_keeps_partial_output(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    connect(shell)
    res = shell.run_cell(
        "%%trainjob --timeout 1 --no-raise-error --result r\necho early; sleep 5\n"
    )
    assert not res.success  # a timeout fails the cell even with --no-raise-error
    assert type(res.error_in_exec).__name__ == "ExecTimeoutError"
    out = capsys.readouterr().out
    assert "early" in out and "ExecTimeoutError" in out and "Traceback" not in out
    assert shell.user_ns["r"].stdout == "early\n"


def test_engine_errors_are_one_line(
    shell: InteractiveShell, cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    before = trainjobs(cluster)
    res = shell.run_cell("%trainjob_connect no-such-runtime")
    assert type(res.error_in_exec).__name__ == "InvalidInputError"
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if "InvalidInputError" in x]
    assert len(lines) == 1 and "mpi-interactive" in lines[0] and "Traceback" not in out
    res = shell.run_cell("%trainjob_connect mpi-interactive --name Bad_Name")
    assert type(res.error_in_exec).__name__ == "InvalidInputError"
    assert trainjobs(cluster) == before
