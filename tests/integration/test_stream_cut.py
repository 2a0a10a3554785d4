"""A command whose stream was cut before it ended never reads as success.

Behind kube-apiserver's stream translator (v5 over WebSocket, 1.30+; the kubelet's own on 1.36)
the exec's stream from the node is SPDY; when it is cut (a kubelet restart), client-go reads its
empty error stream as success and the translator sends ``Success`` on channel 3 and a normal
close: on Kubernetes v1.31.0 the real stack's kubelet restarted 3 s into a 20 s loop gave an OK
result holding ticks 1-3 (tests/realcluster/test_node_real.py). The local cluster's
``Faults.cut_exec`` answers a cut the same way; the engine tells it from the command's end by the
wrapper's end marks, fails the call in one line, keeps what arrived and stops what still runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.integration.proctools import marker_processes, wait_dead
from tests.integration.test_engine_stop import new_marker
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.engine.result import MultiExecResult
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

TICKS = "tick 1\ntick 2\n"
ENDED_FIRST = "ended before the command did"


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[TrainJobSession]:
    s = connect(
        "torch-distributed",
        num_nodes=2,
        config_file=str(local_cluster.kubeconfig_path),
        timeout=60,
    )
    yield s
    s.close(timeout=30)


def clear_once_seen(cluster: LocalCluster, text: str) -> Callable[[str, str, str], None]:
    """An on_output that clears the faults once ``text`` arrived: the cut exec read its fault
    when it started, the engine's stopper that comes after it is not cut."""
    done = threading.Event()

    def on_output(_pod: str, _stream: str, got: str) -> None:
        if text in got and not done.is_set():
            done.set()
            cluster.faults.clear()

    return on_output


def test_a_cut_stream_fails_in_one_line_keeps_the_output_and_stops_the_command(
    cluster: LocalCluster, session: TrainJobSession
) -> None:
    marker = new_marker()
    cluster.faults.cut_exec(session.pod, after_bytes=len(TICKS))
    with pytest.raises(E.ConnectionLostError) as lost:
        session.execute(
            f"echo tick 1; echo tick 2; sleep 1000.{marker}; echo tick 3",
            on_output=clear_once_seen(cluster, "tick 1"),
        )
    line = str(lost.value)
    assert "\n" not in line, line
    assert line.startswith(f"the connection to pod {session.pod} {ENDED_FIRST}"), line
    # the command still ran: the engine stopped it, and says so
    assert f"stopped the remote command in pod {session.pod}" in line, line
    assert lost.value.stopped
    assert lost.value.partial.stdout == TICKS and lost.value.partial.returncode is None
    assert wait_dead(marker_processes(f"sleep 1000.{marker}"), 5) == []


def test_a_command_that_ended_but_whose_output_tail_was_lost_says_so(
    cluster: LocalCluster, session: TrainJobSession
) -> None:
    """The server dropped the end of the output and reported success while the command ended
    normally (kubernetes/kubernetes#124571; 64 MB of mpirun output on the real stack under
    load): the stopper finds nothing to stop, and the line says the command ended and its
    output's end was lost, not that it may still run or was stopped."""
    cluster.faults.cut_exec(session.pod, after_bytes=len(TICKS))
    with pytest.raises(E.ConnectionLostError) as lost:
        session.execute(
            "printf 'tick 1\\ntick 2\\nthe rest\\n'",
            on_output=clear_once_seen(cluster, "tick 1"),
        )
    line = str(lost.value)
    assert "\n" not in line, line
    assert line.startswith(
        f"the command in pod {session.pod} ended, but the end of its output never arrived"
    ), line
    assert "exit code is unknown" in line and "what arrived is in .partial" in line, line
    assert lost.value.stopped
    assert lost.value.partial.stdout == TICKS


def test_a_command_that_ends_reads_exactly_what_it_printed(session: TrainJobSession) -> None:
    """The end marks never show: output without a newline at the end, or with the marks'
    first byte, comes as printed, live and in the result."""
    seen: list[tuple[str, str]] = []
    result = session.execute(
        "printf 'out\\036'; printf 'err\\036\\036x' >&2; exit 4",
        on_output=lambda _pod, stream, text: seen.append((stream, text)),
    )
    assert (result.returncode, result.stdout, result.stderr) == (4, "out\x1e", "err\x1e\x1ex")
    assert "".join(t for s, t in seen if s == "stdout") == "out\x1e"
    assert "".join(t for s, t in seen if s == "stderr") == "err\x1e\x1ex"
    assert session.execute("printf done").stdout == "done"


def test_a_fan_out_names_the_pod_whose_stream_was_cut(
    cluster: LocalCluster, session: TrainJobSession
) -> None:
    """--pod all runs on the reactor (one thread for every pod): the cut pod fails, the others
    end as they did."""
    victim = next(ref.name for ref in session.pods() if ref.name != session.pod)
    marker = new_marker()
    cluster.faults.cut_exec(victim, after_bytes=len(TICKS))
    seen: dict[str, str] = {}

    def on_output(pod: str, stream: str, text: str) -> None:
        seen[pod] = seen.get(pod, "") + text
        if pod == victim and "tick 1" in seen[pod]:
            cluster.faults.clear()

    result = session.execute(
        f"echo tick 1; echo tick 2; [ $POD_NAME = {victim} ] && sleep 1000.{marker}; echo end",
        pods="all",
        on_output=on_output,
    )
    assert isinstance(result, MultiExecResult)
    assert result.failed == [victim], result.summary()
    error = result.errors[victim]
    assert isinstance(error, E.ConnectionLostError) and ENDED_FIRST in str(error)
    assert "\n" not in str(error) and error.stopped
    assert result[victim].stdout == TICKS
    assert result[session.pod].ok and result[session.pod].stdout == TICKS + "end\n"
    assert wait_dead(marker_processes(f"sleep 1000.{marker}"), 5) == []


def test_a_python_cell_whose_stream_was_cut_says_the_interpreter_runs_on(
    cluster: LocalCluster, session: TrainJobSession
) -> None:
    session.python("kept = 'yes'")
    cluster.faults.cut_exec(session.pod, after_bytes=2000)
    with pytest.raises(E.ConnectionLostError) as lost:
        session.python(
            "import time\nfor i in range(100):\n    print('x' * 50)\n    time.sleep(0.01)",
            on_output=clear_once_seen(cluster, "x" * 50),
        )
    assert "\n" not in str(lost.value) and "keeps running there with its state" in str(lost.value)
    assert session.python("kept").value == "'yes'"


def test_the_cell_fails_in_one_line(
    cluster: LocalCluster, shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainjob_magics.magics.extension import loaded_magics

    assert shell.run_cell("%trainjob_connect torch-distributed").success
    pod = loaded_magics(shell).registry.find().session.pod
    try:
        cluster.faults.cut_exec(pod, after_bytes=len(TICKS))
        capsys.readouterr()
        run = shell.run_cell("%%trainjob\necho tick 1; echo tick 2; sleep 3; echo tick 3")
        out = capsys.readouterr().out
        assert type(run.error_in_exec).__name__ == "ConnectionLostError"
        assert out.startswith("tick 1\ntick 2\n") and "tick 3" not in out, out
        error = [line for line in out.splitlines() if ENDED_FIRST in line]
        assert len(error) == 1 and "ConnectionLostError" in error[0], out
        # its stopper was cut too (the fault cuts every exec into the pod): not taken for done
        assert "may still be running" in error[0] and "cut short" in error[0], out
    finally:
        cluster.faults.clear()
        shell.run_cell("%trainjob_close")
