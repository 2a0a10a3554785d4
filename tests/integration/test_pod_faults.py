"""The trainer pod deleted or evicted while a command runs in it (docs/faults.md).

Each test runs a command that prints, then waits; takes the pod away the way the cluster would
(a delete, the policy/v1 Eviction API, the kubelet's node-pressure eviction); and asserts the
one line naming the pod and why, the bound, the output kept, nothing left running, and what
the next command does. Kueue preemption is in test_kueue_sessions.py.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.helpers.polling import wait_until
from tests.integration.proctools import marker_processes
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics.extension import last_result, loaded_magics

pytestmark = pytest.mark.timeout(90)
RUNTIME = "torch-distributed"
BOUND = 5.0  # seconds from the pod going away to the command's error


@pytest.fixture
def session(cluster: LocalCluster) -> Iterator[TrainJobSession]:
    s = connect(RUNTIME, config_file=str(cluster.kubeconfig_path), timeout=30)
    yield s
    s.close(timeout=20)


class Running:
    """``execute`` of ``echo before; sleep <marker>`` in a thread, until the sleep runs."""

    def __init__(self, session: TrainJobSession) -> None:
        self.marker = str(4000 + secrets.randbelow(5000)) + "." + str(secrets.randbelow(999))
        self.streamed: list[str] = []
        self.error: BaseException | None = None
        self.ended = 0.0
        self.thread = threading.Thread(target=self._run, args=(session,), daemon=True)
        self.thread.start()
        wait_until(lambda: marker_processes(f"sleep {self.marker}"), timeout=20)

    def _run(self, session: TrainJobSession) -> None:
        try:
            session.execute(
                f"echo before; sleep {self.marker}",
                on_output=lambda _pod, _stream, text: self.streamed.append(text),
            )
        except BaseException as exc:
            self.error = exc
        self.ended = time.monotonic()

    def wait(self) -> BaseException:
        self.thread.join(30)
        assert not self.thread.is_alive()
        assert self.error is not None
        return self.error


def _take_away(fn: Callable[[], Any], run: Running) -> tuple[E.PodGoneError, float]:
    started = time.monotonic()
    fn()
    err = run.wait()
    assert isinstance(err, E.PodGoneError), repr(err)
    return err, run.ended - started


def _nothing_lost(err: E.PodGoneError, run: Running) -> None:
    assert err.partial is not None and err.partial.stdout == "before\n"
    assert "".join(run.streamed) == "before\n"
    assert marker_processes(f"sleep {run.marker}") == []  # the command's process is gone


def test_deleted_mid_command_names_it_and_next_runs_on_new_pod(cluster, session) -> None:
    old = session.pod
    run = Running(session)
    core = k8s.CoreV1Api(session.api_client)
    err, took = _take_away(lambda: core.delete_namespaced_pod(old, "default"), run)
    msg = str(err)
    assert msg.startswith(f"pod {old} was deleted while the command ran (it was killed, exit")
    assert "the output so far is kept" in msg and "\n" not in msg
    assert "the next command waits for the trainer pod" in msg
    assert err.pod == old and err.cause == "deleted"
    assert took < BOUND
    _nothing_lost(err, run)
    assert f"pod {old} was deleted" in session.status().disruption
    # the Job recreates the deleted pod (a deleted pod counts as failed and is replaced while
    # backoffLimit allows); the next command waits for it and runs there
    result = session.execute("echo again")
    assert result.stdout == "again\n" and result.pod != old and session.pod == result.pod


def test_eviction_api_mid_command(cluster, session) -> None:
    old = session.pod
    run = Running(session)
    core = k8s.CoreV1Api(session.api_client)
    body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=old, namespace="default"))
    answer: list[Any] = []
    err, took = _take_away(
        lambda: answer.append(
            core.create_namespaced_pod_eviction(old, "default", body, _preload_content=False)
        ),
        run,
    )
    assert answer[0].status == 201 and json.loads(answer[0].data)["status"] == "Success"
    assert str(err).startswith(
        f"pod {old} was evicted through the Eviction API (Eviction API: evicting) while the "
        "command ran"
    )
    assert err.cause == "evicted" and took < BOUND
    _nothing_lost(err, run)
    assert "Eviction API" in session.status().disruption
    assert session.execute("echo again").pod != old


def test_kubelet_eviction_mid_command_ends_the_job(cluster, session) -> None:
    old = session.pod
    run = Running(session)
    pressure = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 12Mi."
    err, took = _take_away(lambda: cluster.faults.evict_pod("default", old, pressure), run)
    assert str(err).startswith(f"pod {old} was evicted by the kubelet ({pressure}) while")
    assert err.cause == "evicted" and took < BOUND
    _nothing_lost(err, run)
    pod = k8s.CoreV1Api(session.api_client).read_namespaced_pod(old, "default")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "Evicted")
    assert pod.status.message == pressure
    wait_until(lambda: session.status().state == "Failed", timeout=10)
    # the local cluster's trainer Job has backoffLimit 0: the eviction fails the TrainJob
    with pytest.raises(E.PodNotRunningError) as info:
        session.execute("echo again")
    assert f"({old}) is Failed" in str(info.value) and "connect again" in str(info.value)
    assert "evicted by the kubelet" in session.status().disruption


def test_a_fan_out_names_the_deleted_pod_and_status_remembers_it(cluster) -> None:
    session = connect(RUNTIME, num_nodes=2, config_file=str(cluster.kubeconfig_path), timeout=30)
    try:
        victim = session.pods("node-1")[0].name
        marker = str(4000 + secrets.randbelow(5000)) + "." + str(secrets.randbelow(999))
        box: dict[str, Any] = {}
        run = threading.Thread(
            target=lambda: box.update(
                r=session.execute(f"echo before; sleep {marker}", pods="all", timeout=60)
            ),
            daemon=True,
        )
        run.start()
        sleeps = lambda: len(marker_processes(f"sleep {marker}", prefix=True))  # noqa: E731
        wait_until(lambda: sleeps() == 2, timeout=20)
        k8s.CoreV1Api(session.api_client).delete_namespaced_pod(victim, "default")
        wait_until(lambda: sleeps() < 2, timeout=20)
        session.interrupt()  # the other pod's command
        run.join(30)
        result = box["r"]
        assert isinstance(result.errors[victim], E.PodGoneError), repr(result.errors)
        assert str(result.errors[victim]).startswith(f"pod {victim} was deleted while")
        assert result[victim].stdout == "before\n"  # its output so far is kept
        assert f"pod {victim} was deleted" in session.status().disruption
    finally:
        session.close(timeout=20)


def test_cell_keeps_partial_output_and_status_shows_it(cluster, shell, capsys) -> None:
    shell.run_line_magic("trainjob_connect", f"{RUNTIME} --as podgone")
    entry_session = _session(shell, "podgone")
    old = entry_session.pod
    marker = f"{4000 + secrets.randbelow(5000)}.5"

    def delete_when_running() -> None:
        wait_until(lambda: marker_processes(f"sleep {marker}"), timeout=20)
        k8s.CoreV1Api(entry_session.api_client).delete_namespaced_pod(old, "default")

    deleter = threading.Thread(target=delete_when_running, daemon=True)
    deleter.start()
    try:
        capsys.readouterr()
        with pytest.raises(E.PodGoneError) as info:
            shell.run_cell_magic("trainjob", "podgone", f"echo kept-output; sleep {marker}")
        deleter.join(10)
        line = str(info.value)
        assert f"pod {old} was deleted while the command ran" in line and "\n" not in line
        assert "137" not in line.split("(", 1)[0]  # not "exited with code 137"
        shown = capsys.readouterr().out
        assert "kept-output" in shown and "pod deleted" in shown
        assert shell.user_ns["_trainjob"].stdout == "kept-output\n"
        assert last_result().stdout == "kept-output\n"
        shell.run_line_magic("trainjob_status", "podgone")
        assert "Last disruption: " in capsys.readouterr().out
        shell.run_cell_magic("trainjob", "podgone", "echo next-cell")
        assert "next-cell" in capsys.readouterr().out
    finally:
        shell.run_line_magic("trainjob_close", "podgone")


def _session(shell: Any, alias: str) -> TrainJobSession:
    magics = loaded_magics(shell)
    assert magics is not None
    return magics.host.registry.get(alias).session
