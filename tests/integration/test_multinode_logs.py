"""session.logs(): pods/log through the API server, tail, follow, groups of pods."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from trainjob_magics.engine import connect
from trainjob_magics.engine.files.logs import PodLogs
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(90)

TICKER = 'i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 0.1; done'


def test_sshd_logs_of_mpi_nodes(cluster: LocalCluster) -> None:
    with connect("mpi-interactive", num_nodes=3, config_file=str(cluster.kubeconfig_path)) as s:
        logs = s.logs("node")
        assert isinstance(logs, PodLogs) and len(logs) == 2 and not logs.errors
        assert all("Server listening" in text for text in logs.values()), logs
        everything = s.logs("all")
        assert set(everything) == set(logs) | {s.pod}
        one = s.logs("node-1", tail=1)
        assert isinstance(one, str) and one.count("\n") == 1


def test_follow_streams_until_stopped(cluster: LocalCluster) -> None:
    s = connect(
        "torch-distributed",
        num_nodes=2,
        command=["sh", "-c", TICKER],
        config_file=str(cluster.kubeconfig_path),
    )
    try:
        time.sleep(0.5)
        tail = s.logs(tail=2)
        assert isinstance(tail, str) and len(tail.splitlines()) == 2
        assert all(line.startswith("tick ") for line in tail.splitlines())
        stop = threading.Event()
        arrivals: list[tuple[float, str, str]] = []
        started = time.monotonic()

        def on_output(pod: str, text: str) -> None:
            arrivals.append((time.monotonic() - started, pod, text))

        threading.Timer(1.5, stop.set).start()
        got: Any = s.logs("all", follow=True, tail=0, on_output=on_output, stop=stop)
        elapsed = time.monotonic() - started
        assert 1.4 < elapsed < 5, elapsed
        assert set(got) == {r.name for r in s.pods("all")} and not got.errors
        for text in got.values():
            ticks = [int(line.split()[1]) for line in text.splitlines()]
            assert len(ticks) >= 5 and ticks == list(range(ticks[0], ticks[0] + len(ticks)))
        assert min(t for t, _, _ in arrivals) < 1.0  # streamed, not delivered at the end
    finally:
        s.close(timeout=30)


def test_log_of_unknown_container_is_one_line_error(cluster: LocalCluster) -> None:
    with connect("torch-distributed", num_nodes=1, config_file=str(cluster.kubeconfig_path)) as s:
        with pytest.raises(Exception) as info:
            s.logs(container="nope")
        assert "\n" not in str(info.value) and "nope" in str(info.value)
