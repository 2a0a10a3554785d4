"""Queued sessions against the local cluster's Kueue simulation, over HTTPS with the engine."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.kube import delete_all_trainjobs
from trainjob_magics import connect
from trainjob_magics.engine import (
    QueuedTimeoutError,
    QueueUnavailableError,
    SessionPreemptedError,
)
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.kueue import KueueConfig

pytestmark = pytest.mark.timeout(120)
RUNTIME = "torch-distributed"


# The Kueue releases users run (issue "Real clusters", C): 0.14 serves only v1beta1 and patches
# podSpecOverrides, 0.19 uses the legacy reasons, main the granular ones.
@pytest.fixture(scope="module", params=["0.14", "0.19", "main"])
def kcluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """A local cluster whose ClusterQueue has room for one 1-CPU session."""
    cfg = KueueConfig(
        quota={"cpu": "1", "memory": "4Gi"}, admission_check_delay=1.5, version=request.param
    )
    root = tmp_path_factory.mktemp("kueue-cluster")
    trainer = "2.1" if request.param == "0.14" else "2.3"  # Kueue 0.14 drives Trainer 2.0/2.1
    with LocalCluster(
        root_dir=root, kueue=cfg, trainer_version=trainer, bookmark_interval=0.5
    ) as c:
        yield c
        # Stop on a quiet cluster: store events racing the shutdown can leave the Kueue
        # simulation running (LocalCluster.stop then waits 15 s and leaks the pod processes).
        delete_all_trainjobs(c.kubeconfig_path)


@pytest.fixture
def kc(kcluster: LocalCluster) -> Iterator[str]:
    kcluster.faults.clear()
    kcluster.kueue.set_quota({"cpu": "1"})
    yield str(kcluster.kubeconfig_path)
    kcluster.faults.clear()
    # A TrainJob a test left queued is admitted once the quota is back and would hold the
    # quota the next test needs.
    delete_all_trainjobs(kcluster.kubeconfig_path)


def _connect(kc: str, **kw: Any) -> Any:
    return connect(RUNTIME, cpu="1", queue="user-queue", config_file=kc, **kw)


def test_queued_session_moves_to_running(kc: str) -> None:
    first = _connect(kc, timeout=30)
    try:
        assert first.status().queue.state == "Admitted"
        seen: list[Any] = []
        out: dict[str, Any] = {}

        def run() -> None:
            try:
                out["session"] = _connect(kc, timeout=60, on_status=seen.append)
            except Exception as exc:  # surfaced by the asserts below
                out["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 20
        while not any(s.queue and s.queue.position_in_local_queue is not None for s in seen):
            assert time.monotonic() < deadline, [s.message for s in seen]
            time.sleep(0.1)
        queued = next(s for s in seen if s.queue and s.queue.position_in_local_queue is not None)
        assert queued.state == "Queued"
        assert queued.queue.position_in_local_queue == 0
        assert queued.queue.position_in_cluster_queue == 0
        assert "insufficient unused quota for cpu in flavor default-flavor, 1 more needed" in (
            queued.queue.message
        )
        assert "position 1 in LocalQueue user-queue" in queued.message
    finally:
        first.close()
    thread.join(60)
    assert "error" not in out, out.get("error")
    second = out["session"]
    try:
        states = [s.state for s in seen]
        order = ["Queued", "QuotaReserved", "Admitted", "Running"]
        idx = [states.index(x) for x in order]
        assert idx == sorted(idx), states
        assert seen[-1].queue is not None and seen[-1].queue.state == "Admitted"
        assert second.execute("echo ok").stdout == "ok\n"
    finally:
        second.close()


def test_missing_queue_fails_fast(kc: str) -> None:
    start = time.monotonic()
    with pytest.raises(QueueUnavailableError, match="LocalQueue nope doesn't exist"):
        connect(RUNTIME, queue="nope", config_file=kc, timeout=60)
    assert time.monotonic() - start < 10


def test_stopped_queue_fails_fast_and_deletes(kcluster: LocalCluster, kc: str) -> None:
    kcluster.kueue.set_stop_policy("user-queue", "Hold")
    try:
        with pytest.raises(QueueUnavailableError, match="LocalQueue user-queue is stopped"):
            _connect(kc, timeout=60)
    finally:
        kcluster.kueue.set_stop_policy("user-queue", "None")


def test_timeout_while_queued_says_so(kcluster: LocalCluster, kc: str) -> None:
    kcluster.kueue.set_quota({"cpu": "0"})
    with pytest.raises(QueuedTimeoutError) as info:
        _connect(kc, timeout=3, name="queued-timeout")
    msg = str(info.value)
    assert isinstance(info.value, TimeoutError)
    assert "still queued in LocalQueue user-queue" in msg
    assert "position 1 in LocalQueue user-queue" in msg
    assert "kubectl delete trainjob queued-timeout" in msg and "attach(" in msg
    # the job keeps its place: it exists, suspended, and is admitted once quota is back
    kcluster.kueue.set_quota({"cpu": "1"})
    from trainjob_magics import attach

    session = attach("queued-timeout", config_file=kc, timeout=30)
    try:
        assert session.execute("true").ok
    finally:
        session.close()


def test_preemption_mid_session_then_readmission(kcluster: LocalCluster, kc: str) -> None:
    session = _connect(kc, timeout=30)
    try:
        pod = session.pod

        def preempt() -> None:
            kcluster.kueue.set_quota({"cpu": "0"})  # nothing else may be admitted meanwhile
            kcluster.kueue.preempt(session.name)

        err = _run_until(session, preempt)
        assert isinstance(err, SessionPreemptedError), err
        assert "Preempted to accommodate a workload" in str(err)
        assert "wait_ready()" in str(err)
        assert err.partial is not None and "started" in err.partial.stdout
        assert f"its trainer pod {pod} and anything running in it are gone" in str(err)
        assert "Kueue preempted" in session.status().disruption
        with pytest.raises(SessionPreemptedError):
            session.execute("true")
        status = session.status()
        assert status.queue is not None and status.queue.state == "Preempted"
        old_pod = session.pod
        kcluster.kueue.set_quota({"cpu": "1"})
        new_pod = session.wait_ready(timeout=30)
        assert new_pod != old_pod
        assert session.execute("echo back").stdout == "back\n"
    finally:
        kcluster.kueue.set_quota({"cpu": "1"})
        session.close()


def _run_until(session: Any, take_away: Any) -> BaseException:
    """Run ``echo started; sleep 20``, call ``take_away`` once it started; the error it got."""
    chunks: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            session.execute(
                "echo started; sleep 20", on_output=lambda _p, _s, text: chunks.append(text)
            )
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while "started" not in "".join(chunks):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    take_away()
    thread.join(30)
    assert errors, "the command was not stopped"
    return errors[0]


def test_pods_ready_timeout_eviction_reads_kueue_evicted(kcluster: LocalCluster, kc: str) -> None:
    """Kueue 0.19 turned waitForPodsReady on by default (30 min): a job whose pods are not all
    ready in time is evicted without being preempted. Kueue's workload controller
    (pkg/controller/core/workload_controller.go, reconcileNotReadyTimeout) evicts it with
    ``Evicted=True``, reason ``PodsReadyTimeout``, message ``Exceeded the PodsReady timeout
    NS/WORKLOAD`` (pkg/workload/evict/evict.go SetEvictedCondition) and no ``Preempted``
    condition. The session says "Kueue evicted" with that reason, and reads Evicted."""
    session = _connect(kc, timeout=30)
    try:
        evicted: dict[str, Any] = {}

        def evict() -> None:
            kcluster.kueue.set_quota({"cpu": "0"})  # nothing readmits it meanwhile
            evicted.update(kcluster.kueue.evict(session.name, "PodsReadyTimeout"))

        err = _run_until(session, evict)
        assert isinstance(err, SessionPreemptedError), err
        conditions = {c["type"]: c for c in evicted["status"]["conditions"]}
        assert "Preempted" not in conditions or conditions["Preempted"]["status"] != "True"
        why = f"Exceeded the PodsReady timeout default/{evicted['metadata']['name']}"
        assert (conditions["Evicted"]["reason"], conditions["Evicted"]["message"]) == (
            "PodsReadyTimeout",
            why,
        )
        assert str(err).startswith(
            f"session preempted: Kueue evicted TrainJob {session.name} (PodsReadyTimeout: "
            f"{why}); it is evicted, waiting for readmission; "
        ), str(err)
        assert "Kueue evicted" in session.status().disruption
        queue = session.status().queue
        assert queue is not None
        assert (queue.state, queue.reason) == ("Evicted", "PodsReadyTimeout"), queue
        assert queue.summary().startswith("Evicted (PodsReadyTimeout), waiting for readmission")
    finally:
        kcluster.kueue.set_quota({"cpu": "1"})
        session.close()


def test_preemption_is_checked_after_a_failed_command_and_only_then(
    kcluster: LocalCluster, kc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that exits non-zero on a queued session asks Kueue whether the job was
    preempted (and raises SessionPreemptedError with the result when it was); one that exits 0
    does not ask. Kueue's answer is stubbed: the pod keeps running, only the check is tested."""
    from trainjob_magics.engine import session as session_module
    from trainjob_magics.engine.result import QueueStatus

    session = _connect(kc, timeout=30)
    asked: list[int] = []

    def preempted(*args: Any, **kwargs: Any) -> QueueStatus:
        asked.append(1)
        return QueueStatus("Preempted", reason="Preempted", message="stub", evictions=1)

    monkeypatch.setattr(session_module, "detect_preemption", preempted)
    try:
        assert session.execute("echo fine").stdout == "fine\n"
        assert asked == []
        with pytest.raises(SessionPreemptedError) as info:
            session.execute("echo dying; exit 3")
        assert asked == [1]
        assert info.value.partial is not None and info.value.partial.returncode == 3
        assert info.value.partial.stdout == "dying\n"
    finally:
        monkeypatch.undo()
        session.close()


def test_visibility_forbidden_position_unknown(kcluster: LocalCluster, kc: str) -> None:
    kcluster.faults.deny(kcluster.token, "get", "localqueues/pendingworkloads")
    kcluster.kueue.set_quota({"cpu": "0"})
    seen: list[Any] = []
    with pytest.raises(QueuedTimeoutError) as info:
        _connect(kc, timeout=3, on_status=seen.append)
    queued = [s for s in seen if s.queue and s.queue.state == "Queued"]
    assert queued, [s.message for s in seen]
    assert queued[-1].queue.position_in_local_queue is None
    assert "position unknown (no permission for the Kueue visibility API)" in queued[-1].message
    assert "position unknown" in str(info.value)
    kcluster.kueue.set_quota({"cpu": "1"})
