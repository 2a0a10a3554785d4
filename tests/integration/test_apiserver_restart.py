"""API server restarts (docs/faults.md): the local cluster drops every connection and refuses new
ones for a while (``faults.restart_apiserver``), keeping its state and the pods' processes.

Each test asserts what the user sees (the message, the notice lines), a bound derived from the
retry window, and that nothing is lost or leaked (partial output, threads, processes, TrainJobs).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client as k8s

from tests.helpers.kube import trainjob_names
from tests.helpers.polling import wait_until
from tests.integration.proctools import marker_processes, wait_dead
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.engine.kube.retry import DEFAULT_RETRY_SECONDS as RETRY
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)
RUNTIME = "mpi-interactive"
DOWNTIME = 2.0
# Generous bound for anything that waits out an outage: the retry window plus slack for a
# loaded machine. It proves "bounded", not "fast".
BOUND = RETRY + 30


def new_marker() -> str:
    """Digits that make a `sleep 300.MARKER` findable in /proc (a valid sleep duration)."""
    return f"{os.getpid()}{time.monotonic_ns() % 10**9}"


def sleepers(marker: str) -> list[int]:
    return marker_processes(f"sleep 300.{marker}", prefix=True)


def kc(cluster: LocalCluster) -> str:
    return str(cluster.kubeconfig_path)


def engine_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("trainjob-")}


@pytest.fixture
def restarts(cluster: LocalCluster) -> Iterator[list[threading.Event]]:
    """The restarts a test made; teardown waits until the server is back from each."""
    made: list[threading.Event] = []
    yield made
    for up in made:
        assert up.wait(60), "the API server did not come back"


@pytest.fixture
def sessions(cluster: LocalCluster) -> Iterator[list[TrainJobSession]]:
    """Sessions a test opened; teardown closes them and checks nothing is left behind."""
    before = engine_threads()
    opened: list[TrainJobSession] = []
    yield opened
    for s in opened:
        with contextlib.suppress(E.TrainJobError):
            s.close(timeout=30)
    names = trainjob_names(kc(cluster))
    assert not [s.name for s in opened if s.name in names], "a TrainJob was left behind"
    wait_until(lambda: not (engine_threads() - before), timeout=30)


def open_session(cluster: LocalCluster, sessions: list[TrainJobSession], **kw) -> TrainJobSession:
    s = connect(RUNTIME, config_file=kc(cluster), timeout=60, **kw)
    sessions.append(s)
    return s


def pod_requests(cluster: LocalCluster, since: int, name: str) -> list[tuple[str, dict]]:
    """The pod list/watch requests of TrainJob ``name``'s watcher after journal index ``since``:
    ("watch"|"list", query)."""
    out = []
    for method, path in cluster.faults.requests_seen()[since:]:
        parts = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if method != "GET" or not parts.path.endswith("/pods") or name not in str(query):
            continue
        out.append(("watch" if query.get("watch") == "true" else "list", query))
    return out


# ------------------------------------------------------------------ the local cluster itself


def test_restart_keeps_state_and_processes_and_clients_recover(
    cluster, restarts, sessions, kubectl, tmp_path
) -> None:
    """kubectl and the official client fail while it is down and work after, with the same
    objects and resourceVersions; the pod processes keep running."""
    s = open_session(cluster, sessions)
    marker = new_marker()
    s.execute(f"nohup sleep 300.{marker} >/dev/null 2>&1 &")
    pids = wait_until(lambda: sleepers(marker))
    core = k8s.CoreV1Api(s.api_client)
    pod_rv = core.read_namespaced_pod(s.pod, "default").metadata.resource_version

    # long enough for kubectl to start on a loaded machine while the server is still down
    restarts.append(cluster.faults.restart_apiserver(downtime=8.0))
    down = kubectl("get", "pods", "--request-timeout=5s")
    assert not restarts[0].is_set(), "kubectl started too late to see the server down"
    assert down.returncode != 0 and "refused" in down.stderr
    assert restarts[0].wait(30)
    up = kubectl("get", "pod", s.pod, "-o", "jsonpath={.metadata.resourceVersion}")
    assert up.returncode == 0, up.stderr
    assert up.stdout == pod_rv
    assert core.read_namespaced_pod(s.pod, "default").metadata.resource_version == pod_rv
    assert s.name in trainjob_names(kc(cluster))
    assert sleepers(marker) == pids  # the pod's processes never noticed
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    assert not wait_dead(pids, 10)


def test_cli_sigusr1_restarts_the_apiserver(tmp_path: Path) -> None:
    """`trainjob-magics local-cluster --restart-downtime S`: SIGUSR1 takes the API server down
    for S seconds, the process keeps running, kubectl works again after."""
    kubeconfig = tmp_path / "kubeconfig"
    argv = ["local-cluster", "--kubeconfig", str(kubeconfig), "--restart-downtime", "5"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainjob_magics.cli", *argv, "--root-dir", str(tmp_path / "root")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}

    def get() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "get", "ns", "--request-timeout=5s", "-o", "name"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    try:
        wait_until(lambda: any("press Ctrl-C" in line for line in lines), timeout=60)
        assert any(f"kill -USR1 {proc.pid}" in line for line in lines)
        assert get().returncode == 0
        proc.send_signal(signal.SIGUSR1)
        wait_until(lambda: get().returncode != 0, timeout=10)
        wait_until(lambda: get().returncode == 0, timeout=30)
        assert "namespace/default" in get().stdout
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert proc.returncode == 0


# ------------------------------------------------------------------ the engine


def test_cell_started_during_outage_waits_then_runs(cluster, restarts, sessions) -> None:
    s = open_session(cluster, sessions)
    notes: list[str] = []
    restarts.append(cluster.faults.restart_apiserver(downtime=DOWNTIME))
    t0 = time.monotonic()
    result = s.execute("echo after the restart", on_notice=notes.append)
    assert restarts[0].is_set()  # it ran on the server that came back
    assert time.monotonic() - t0 < BOUND
    assert result.stdout == "after the restart\n" and result.returncode == 0
    assert notes[0] == (
        f"API server unreachable (connection refused), retrying for up to {RETRY:g}s"
    )
    assert notes[-1].startswith("API server reachable again after ")
    assert len(notes) == 2


def test_exec_cut_mid_command_raises_connection_lost_and_stops_it(
    cluster, restarts, sessions
) -> None:
    s = open_session(cluster, sessions)
    marker = new_marker()
    script = f"echo first; echo second; sleep 300.{marker}"
    seen: list[str] = []

    def on_output(pod: str, stream: str, text: str) -> None:
        seen.append(text)
        if "second" in "".join(seen) and not restarts:
            wait_until(lambda: sleepers(marker))
            restarts.append(cluster.faults.restart_apiserver(downtime=DOWNTIME))

    t0 = time.monotonic()
    with pytest.raises(E.ConnectionLostError) as info:
        s.execute(["sh", "-c", script], on_output=on_output)
    assert time.monotonic() - t0 < BOUND
    err = info.value
    assert err.partial is not None and err.partial.returncode is None
    assert err.partial.stdout == "first\nsecond\n" == "".join(seen)  # nothing received lost
    assert err.stopped and err.reports and all(r.stopped for r in err.reports)
    assert str(err).startswith(f"the connection to pod {s.pod} was lost before the command")
    assert f"stopped the remote command in pod {s.pod}" in str(err)
    assert not sleepers(marker)  # stopped once the server was back, not left running
    assert s.execute("echo still works").stdout == "still works\n"


def test_connect_whose_watch_is_cut_resumes_from_its_resource_version(
    cluster, restarts, sessions, unique_name
) -> None:
    name = unique_name("rw")
    cluster.faults.hold_pods(name, reason="ContainerCreating", message="held by the test")
    since = len(cluster.faults.requests_seen())
    box: dict = {}
    statuses: list = []

    def run() -> None:
        try:
            box["s"] = connect(
                RUNTIME, name=name, config_file=kc(cluster), timeout=60, on_status=statuses.append
            )
        except BaseException as exc:  # reported below
            box["e"] = exc

    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: any(k == "watch" for k, _ in pod_requests(cluster, since, name)))
    cut = len(cluster.faults.requests_seen())
    restarts.append(cluster.faults.restart_apiserver(downtime=DOWNTIME))
    assert restarts[0].wait(30)
    after = wait_until(lambda: pod_requests(cluster, cut, name))
    cluster.faults.release_pods()
    t.join(BOUND)
    assert "e" not in box, box.get("e")
    sessions.append(box["s"])
    kind, query = after[0]
    assert kind == "watch" and query.get("resourceVersion")  # resumed, no relist
    assert statuses and not statuses[-1].problem.startswith("API server unreachable")
    assert box["s"].execute("echo resumed").stdout == "resumed\n"


def test_heartbeat_and_idle_watchdog_survive_an_outage(cluster, restarts, sessions) -> None:
    """An outage shorter than idle_timeout minus one heartbeat interval does not end the job:
    the heartbeat thread waits, then beats again; the watchdog in the pod never fires."""
    idle = 12.0  # heartbeats every 3 s (idle_timeout / 4): safe for outages up to 9 s
    s = open_session(cluster, sessions, idle_timeout=idle)
    heartbeat = s._heartbeat
    assert heartbeat is not None
    wait_until(lambda: heartbeat.sent >= 1)
    restarts.append(cluster.faults.restart_apiserver(downtime=4.0))
    assert restarts[0].wait(30)
    beats = heartbeat.sent
    wait_until(lambda: heartbeat.sent >= beats + 3, timeout=40)  # past idle_timeout since down
    assert heartbeat.alive
    assert s.status().state not in ("Complete", "Failed", "Deleted")
    assert s.execute("echo alive").stdout == "alive\n"


def test_outage_longer_than_the_retry_window_gives_one_clear_line(
    cluster, restarts, sessions
) -> None:
    s = open_session(cluster, sessions)
    s.api_retry_seconds = 1.0
    notes: list[str] = []
    restarts.append(cluster.faults.restart_apiserver(downtime=12.0))
    t0 = time.monotonic()
    with pytest.raises(E.ApiServerError) as info:
        s.execute("echo never", on_notice=notes.append)
    assert time.monotonic() - t0 < 1.0 + 15  # the window, not the outage
    assert not restarts[0].is_set()
    assert str(info.value) == (
        f"the Kubernetes API server at {cluster.url} has been unreachable for more than 1s "
        "(connection refused); check the cluster (e.g. `kubectl get --raw /readyz`) and run it "
        "again once the server is back (api_retry_seconds sets how long to wait)"
    )
    assert info.value.partial is not None and info.value.partial.stdout == ""
    assert notes == ["API server unreachable (connection refused), retrying for up to 1s"]
    assert restarts[0].wait(30)
    assert s.execute("echo back").stdout == "back\n"


def test_magics_cell_during_outage_shows_the_retry_line(cluster, restarts, shell, capsys) -> None:
    """%%trainjob started while the server is down: the notice is printed, then the output."""
    shell.run_line_magic("config", "TrainJobMagics.api_retry_seconds = 25.0")
    shell.run_line_magic("trainjob_connect", f"{RUNTIME} --timeout 60")
    try:
        capsys.readouterr()
        restarts.append(cluster.faults.restart_apiserver(downtime=DOWNTIME))
        shell.run_cell_magic("trainjob", "", "echo cell ran")
        out, err = capsys.readouterr()
        assert "cell ran" in out
        assert "API server unreachable (connection refused), retrying for up to 25s" in err
        assert shell.user_ns["_trainjob"].stdout == "cell ran\n"  # the notice is not output
    finally:
        shell.run_line_magic("trainjob_close", "")
