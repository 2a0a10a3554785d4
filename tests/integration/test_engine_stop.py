"""Timeouts and interrupts stop the remote work (one pod and fan-out), dropped connections say how
to stop it, and large outputs spill to a file instead of memory.

The local cluster runs pod processes locally, so "gone" is checked through /proc (unique
``sleep 1000.<digits>`` command lines) and through the pod's pid files, read by another exec.
"""

from __future__ import annotations

import gc
import hashlib
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration.proctools import marker_processes, wait_dead
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.engine.result import MultiExecResult
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[TrainJobSession]:
    s = connect(
        "torch-distributed",
        num_nodes=3,
        config_file=str(local_cluster.kubeconfig_path),
        timeout=60,
    )
    yield s
    s.close(timeout=30)


def new_marker() -> str:
    return f"{os.getpid() % 100000:05d}{int(time.time() * 1000) % 100000:05d}"


def body(marker: str) -> str:
    """A shell with a child shell and two sleeps, all tagged with the marker."""
    return f"echo started; sh -c 'sleep 1000.{marker}1; :' & sleep 1000.{marker}2"


def pid_files(session: TrainJobSession, pod: str | None = None) -> str:
    """The pod's wrapper pid files, listed through another exec (``env`` first: not wrapped, so
    it has no pid file of its own)."""
    res = session.execute(
        ["env", "sh", "-c", 'ls "${TMPDIR:-/tmp}/trainjob-magics" | grep "\\.pid$" || true'],
        pods=pod,
    )
    if isinstance(res, MultiExecResult):
        return "".join(r.stdout for r in res.values())
    return res.stdout


def wait_started(marker: str, count: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while len(marker_processes(f"sleep 1000.{marker}", prefix=True)) < count:
        assert time.monotonic() < deadline, "the remote sleeps did not start"
        time.sleep(0.05)


def test_timeout_stops_the_remote_tree(session) -> None:
    marker = new_marker()
    with pytest.raises(E.ExecTimeoutError) as info:
        session.execute(body(marker), timeout=1.0)
    assert "did not finish within 1s: stopped the remote command" in str(info.value)
    assert info.value.partial is not None and info.value.partial.stdout == "started\n"
    assert wait_dead(marker_processes(marker), 5) == []
    assert pid_files(session) == ""
    assert session._inflight == {}


def test_fanout_timeout_stops_every_pod(session) -> None:
    marker = new_marker()
    res = session.execute(body(marker), pods="all", timeout=1.5)
    assert isinstance(res, MultiExecResult) and len(res) == 3
    assert set(res.errors) == set(res.pods)
    for pod in res.pods:
        assert isinstance(res.errors[pod], E.ExecTimeoutError)
        assert "stopped the remote command" in str(res.errors[pod])
        assert res[pod].stdout == "started\n"
    assert wait_dead(marker_processes(marker), 5) == []
    assert pid_files(session, "all") == ""


def test_fanout_ctrl_c_stops_every_pod(session) -> None:
    marker = new_marker()

    def ctrl_c() -> None:
        wait_started(marker, 6)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(E.CommandInterruptedError) as info:
        session.execute(body(marker), pods="all")
    assert time.monotonic() - started < 20
    assert "interrupted: stopped the remote command" in str(info.value)
    assert len(info.value.reports) == 3 and all(r.stopped for r in info.value.reports)
    partial = info.value.partial
    assert isinstance(partial, MultiExecResult)
    assert all(r.stdout == "started\n" for r in partial.values())
    assert wait_dead(marker_processes(marker), 5) == []
    assert pid_files(session, "all") == ""


def test_session_interrupt_stops_fanout_on_every_pod(session) -> None:
    marker = new_marker()
    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.update(r=session.execute(body(marker), pods="all")))
    t.start()
    wait_started(marker, 6)
    reports = session.interrupt()
    t.join(15)
    assert len(reports) == 3 and all(r.stopped for r in reports)
    assert wait_dead(marker_processes(marker), 5) == []
    res = box["r"]
    assert isinstance(res, MultiExecResult) and len(res.failed) == 3


def test_dropped_connection_says_how_to_stop_and_interrupt_works(cluster, session) -> None:
    marker = new_marker()
    cluster.faults.drop_exec(session.pod, after_bytes=5)
    try:
        with pytest.raises(E.ConnectionLostError) as info:
            session.execute(f"echo started-and-more; sleep 1000.{marker}")
    finally:
        cluster.faults.clear()
    # the engine's own stop attempt was cut too (the fault drops every exec into the pod), so
    # it cannot say the command stopped: it stays registered for session.interrupt()
    assert "may still be running" in str(info.value)
    assert "stopping it failed: ConnectionLostError" in str(info.value)
    assert "session.interrupt()" in str(info.value)
    assert not info.value.stopped
    assert len(session._inflight) == 1
    reports = session.interrupt()
    assert len(reports) == 1 and reports[0].stopped, reports
    assert wait_dead(marker_processes(marker), 5) == []
    assert session._inflight == {}


def test_large_output_spills_to_a_file_removed_with_the_result(local_cluster, session) -> None:
    size = 8 * 1024 * 1024
    prep = session.execute(f"head -c {size} /dev/urandom > spill.bin")
    assert prep.ok
    expected = (local_cluster.pod_dir("default", session.pod) / "spill.bin").read_bytes()
    seen = hashlib.sha256()
    res = session.execute(
        ["cat", "spill.bin"],
        max_memory_output=1024 * 1024,
        on_output=lambda pod, stream, text: seen.update(text.encode("utf-8", "surrogatepass")),
    )
    assert res.ok and res.stdout_size == size
    path = res.stdout_path
    assert path is not None and os.path.getsize(path) == size
    assert session.name in os.path.basename(os.path.dirname(path))
    assert res.stdout_bytes == expected
    assert seen.hexdigest() == hashlib.sha256(res.stdout.encode("utf-8")).hexdigest()
    assert res.stderr_path is None
    small = session.execute("echo small", max_memory_output=1024 * 1024)
    assert small.stdout_path is None and small.stdout == "small\n"
    del res
    gc.collect()
    assert not os.path.exists(path)


def test_session_default_memory_limit(session) -> None:
    old = session.max_memory_output
    assert old == 64 * 1024 * 1024
    try:
        session.max_memory_output = 1000
        res = session.execute("head -c 5000 /dev/zero")
        assert res.stdout_path is not None and res.stdout_bytes == b"\0" * 5000
        with pytest.raises(E.InvalidInputError):
            session.max_memory_output = -5  # type: ignore[assignment]
    finally:
        session.max_memory_output = old
