"""A detached run of a queued session against the local cluster's Kueue simulation: it keeps
its admission while no heartbeat comes, and a preemption ends it with Kueue's reason in what
the session reads of it (what attach, the end of a follow and the panel show)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.helpers.kube import delete_all_trainjobs
from tests.helpers.polling import wait_until
from trainjob_magics import connect
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.kueue import KueueConfig

pytestmark = pytest.mark.timeout(240)

# the keep-alive's idle timeout: long enough that a loaded machine's late heartbeats do not end
# the job before the detach (3 s did); the test waits this long and more after the last one
IDLE = 20
RUN = "for i in $(seq 600); do echo tick-$i; sleep 1; done"  # far longer than any wait here


def _ticks(logs: str) -> int:
    """The run's last tick in its log (0 before the first)."""
    return max(
        (int(w[5:]) for w in logs.split() if w[:5] == "tick-" and w[5:].isdigit()), default=0
    )


@pytest.fixture(scope="module")
def kcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cfg = KueueConfig(quota={"cpu": "1", "memory": "4Gi"}, version="0.19")
    root = tmp_path_factory.mktemp("kueue-detach")
    with LocalCluster(root_dir=root, kueue=cfg, bookmark_interval=0.5) as c:
        yield c
        delete_all_trainjobs(c.kubeconfig_path)


def test_a_detached_run_keeps_its_admission_and_preemption_says_so(kcluster) -> None:
    session = connect(
        "torch-distributed",
        cpu="1",
        queue="user-queue",
        config_file=str(kcluster.kubeconfig_path),
        idle_timeout=IDLE,
        timeout=60,
    )
    try:
        session.detach(RUN)
        session.leave()  # no heartbeat from here on: only the run holds the job
        # a tick a second: IDLE + 2 more ticks are past the idle timeout since the last heartbeat
        past = _ticks(session.logs()) + IDLE + 2
        wait_until(lambda: _ticks(session.logs()) >= past, timeout=3 * IDLE + 30)
        status = session.status()
        assert status.state == "Running" and status.queue is not None
        assert status.queue.admitted, status.queue
        assert session.detached().live
        kcluster.kueue.set_quota({"cpu": "0"})  # nothing is admitted again meanwhile
        kcluster.kueue.preempt(session.name)
        t0 = time.monotonic()
        wait_until(lambda: not session.detached().live, timeout=30)
        ended = session.detached()
        assert ended.ended_by.startswith(f"Kueue preempted TrainJob {session.name} (Preempted")
        assert ended.summary().startswith(f"Detached run 1 in TrainJob {session.name}: ended: ")
        assert time.monotonic() - t0 < 30
    finally:
        kcluster.kueue.set_quota({"cpu": "1"})
        session.close(force=True)


def test_max_runtime_still_caps_a_job_with_a_detached_run(kcluster) -> None:
    session = connect(
        "torch-distributed",
        cpu="1",
        queue="user-queue",
        config_file=str(kcluster.kubeconfig_path),
        max_runtime="20s",  # from admission: room for a slow connect and detach
        timeout=60,
    )
    try:
        session.detach(RUN)
        wait_until(lambda: not session.detached().live, timeout=120)  # the 600 s run was cut
        ended = session.detached()
        assert "Kueue evicted" in ended.ended_by and "MaximumExecutionTime" in ended.ended_by
    finally:
        session.close(force=True)
