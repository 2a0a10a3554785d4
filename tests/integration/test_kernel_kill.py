"""No TrainJob outlives its kernel: idle release after SIGKILL, cleanup on restart and unload."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from tests.helpers.kernels import Kernel, load_magics_code
from tests.helpers.kube import get_trainjob, jobset_pods, trainjob_names
from trainjob_magics import connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)
IDLE = 4  # seconds; the watchdog checks every second (remote.watchdog_step)
MARGIN = 4  # watchdog step + pod termination + controller status updates


def trainjob(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    return get_trainjob(cluster.kubeconfig_path, name)


def running_pods(cluster: LocalCluster, name: str) -> list[str]:
    pods = jobset_pods(cluster.kubeconfig_path, name)
    return [p.metadata.name for p in pods if p.status.phase in ("Running", "Pending")]


def complete(job: dict[str, Any] | None) -> bool:
    conds = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conds)


def managed_names(cluster: LocalCluster) -> set[str]:
    return set(trainjob_names(cluster.kubeconfig_path, include_deleting=False))


def open_session(k: Kernel, cluster: LocalCluster, name: str, idle: float = 1800) -> None:
    reply, out = k.run_text(
        load_magics_code(cluster.kubeconfig_path, widgets="off", idle_timeout=idle)
        + f"\n%trainjob_connect mpi-interactive --name {name}"
    )
    assert reply["status"] == "ok", out


def test_sigkill_kernel_trainjob_ends_within_idle_timeout(kernel, cluster, unique_name) -> None:
    name = unique_name("k")
    open_session(kernel, cluster, name, idle=IDLE)
    _reply, out = kernel.run_text("%%trainjob\necho alive")
    assert "alive" in out
    time.sleep(IDLE + 1)  # heartbeats keep it alive while the kernel lives
    assert running_pods(cluster, name) and not complete(trainjob(cluster, name))
    os.kill(kernel.pid(), signal.SIGKILL)
    killed = time.monotonic()
    while time.monotonic() - killed < IDLE + MARGIN:
        if complete(trainjob(cluster, name)) and not running_pods(cluster, name):
            break
        time.sleep(0.2)
    took = time.monotonic() - killed
    job = trainjob(cluster, name)
    assert complete(job), job and job.get("status")
    assert running_pods(cluster, name) == []
    assert took <= IDLE + MARGIN
    assert job["metadata"]["annotations"]["trainjob-magics/idle-timeout"] == str(IDLE)


def test_restart_kernel_deletes_its_trainjobs(kernel, cluster, unique_name) -> None:
    name = unique_name("r")
    open_session(kernel, cluster, name)
    assert name in managed_names(cluster)
    kernel.km.restart_kernel(now=False)
    kernel.kc.wait_for_ready(timeout=60)
    deadline = time.monotonic() + 20
    while name in managed_names(cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert name not in managed_names(cluster)
    assert running_pods(cluster, name) == []


def test_unload_ext_deletes_and_reports(kernel, cluster, unique_name) -> None:
    name = unique_name("u")
    open_session(kernel, cluster, name)
    reply, out = kernel.run_text("%unload_ext trainjob_magics")
    assert reply["status"] == "ok"
    assert f"TrainJob {name} deleted" in out
    assert name not in managed_names(cluster)
    assert running_pods(cluster, name) == []


def test_idle_session_says_so_and_how_to_reconnect(cluster) -> None:
    s = connect("mpi-interactive", config_file=str(cluster.kubeconfig_path), idle_timeout=2)
    try:
        assert s.execute("echo hi").stdout == "hi\n"
        s._heartbeat.stop()  # what a dead kernel does: no more heartbeats
        deadline = time.monotonic() + 2 + MARGIN
        while s.status().state != "Complete" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert s.status().state == "Complete"
        with pytest.raises(E.IdleReleasedError) as info:
            s.execute("echo again")
        msg = str(info.value)
        assert "without a heartbeat" in msg and "%trainjob_connect" in msg and s.name in msg
    finally:
        s.close(timeout=20)


def test_idle_timeout_off_uses_sleep_infinity(cluster) -> None:
    s = connect("mpi-interactive", config_file=str(cluster.kubeconfig_path), idle_timeout=None)
    try:
        job = trainjob(cluster, s.name)
        assert job["spec"]["trainer"]["command"] == ["sleep", "infinity"]
        assert s._heartbeat is None
    finally:
        s.close(timeout=20)
