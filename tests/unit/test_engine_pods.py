"""Trainer-pod resolution, pod rows and job status from pod/runtime objects (pure data)."""

from __future__ import annotations

import time

from trainjob_magics.engine.kube.names import (
    ANCESTOR_LABEL,
    COMPLETION_INDEX,
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    RJOB_LABEL,
)
from trainjob_magics.engine.kube.objects import pod_name
from trainjob_magics.engine.trainjob.runtime import target_from_runtime
from trainjob_magics.engine.trainjob.status import job_status, pod_infos, trainjob_failure
from trainjob_magics.engine.trainjob.trainer_pod import (
    TrainerTarget,
    select_trainer_pod,
    termination,
)

ANC = {ANCESTOR_LABEL: "trainer"}


def runtime(rjobs: list[tuple[str, dict]], mpi: bool) -> dict:
    policy = {"mpi": {"runLauncherAsNode": True}} if mpi else {"torch": {}}
    return {
        "spec": {
            "mlPolicy": {"numNodes": 1, **policy},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": n, "template": {"metadata": {"labels": labels}}}
                        for n, labels in rjobs
                    ]
                }
            },
        }
    }


MPI = runtime([("node", {}), ("launcher", ANC)], mpi=True)
TORCH = runtime([("node", ANC)], mpi=False)
NO_LABEL_MPI = runtime([("node", {}), ("launcher", {})], mpi=True)


def pod(
    name: str,
    rjob: str,
    index: int = 0,
    phase: str = "Running",
    *,
    extra: dict | None = None,
    created: str = "2026-01-01T00:00:00Z",
    deleting: bool = False,
    waiting: str | None = None,
) -> dict:
    labels = {
        JOBSET_NAME_LABEL: "job",
        RJOB_LABEL: rjob,
        JOB_INDEX_LABEL: "0",
        COMPLETION_INDEX: str(index),
        **(extra or {}),
    }
    meta = {"name": name, "labels": labels, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    status: dict = {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
    if waiting:
        status = {
            "phase": phase,
            "containerStatuses": [{"restartCount": 2, "state": {"waiting": {"reason": waiting}}}],
        }
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": status}


def test_targets_from_runtimes() -> None:
    assert target_from_runtime(MPI) == TrainerTarget("launcher", True)
    assert target_from_runtime(TORCH) == TrainerTarget("node", False)
    # No ancestor label anywhere: the launcher is the fallback.
    assert target_from_runtime(NO_LABEL_MPI) == TrainerTarget("launcher", True)
    assert target_from_runtime(runtime([("worker", {})], mpi=False)).replicated_job == "worker"


def test_mpi_never_picks_a_node_pod_before_the_launcher_exists() -> None:
    target = target_from_runtime(MPI)
    nodes = [pod(f"job-node-0-{i}", "node", i) for i in range(3)]
    assert select_trainer_pod(nodes, target) is None
    launcher = pod("job-launcher-0-0", "launcher")
    assert pod_name(select_trainer_pod([*nodes, launcher], target)) == "job-launcher-0-0"


def test_mpi_guard_even_if_node_pods_carry_the_label() -> None:
    target = target_from_runtime(MPI)
    nodes = [pod("job-node-0-0", "node", extra=ANC)]
    assert select_trainer_pod(nodes, target) is None


def test_ancestor_label_on_pods_layout() -> None:
    target = target_from_runtime(MPI)
    pods = [pod("job-node-0-0", "node"), pod("job-launcher-0-0", "launcher", extra=ANC)]
    assert pod_name(select_trainer_pod(pods, target)) == "job-launcher-0-0"


def test_torch_completion_index_zero() -> None:
    target = target_from_runtime(TORCH)
    pods = [pod(f"job-node-0-{i}", "node", i) for i in (3, 1, 2)]
    assert select_trainer_pod(pods, target) is None  # index 0 not created yet
    pods.append(pod("job-node-0-0", "node", 0))
    assert pod_name(select_trainer_pod(pods, target)) == "job-node-0-0"


def test_recreated_pod_wins_over_terminating_one() -> None:
    target = target_from_runtime(TORCH)
    old = pod("job-node-0-0-aaaaa", "node", deleting=True)
    new = pod("job-node-0-0-bbbbb", "node", phase="Pending", created="2026-01-01T00:02:00Z")
    assert pod_name(select_trainer_pod([old, new], target)) == "job-node-0-0-bbbbb"


def test_fallback_without_runtime_information() -> None:
    fallback = TrainerTarget(None, source="fallback")
    pods = [pod("job-node-0-0", "node"), pod("job-launcher-0-0", "launcher")]
    assert pod_name(select_trainer_pod(pods, fallback)) == "job-launcher-0-0"
    labelled = [pod("job-a-0-0", "a"), pod("job-b-0-0", "b", extra=ANC)]
    assert pod_name(select_trainer_pod(labelled, fallback)) == "job-b-0-0"
    assert pod_name(select_trainer_pod([pod("job-node-0-0", "node")], fallback)) == ("job-node-0-0")


def test_pod_infos_rows() -> None:
    pods = [
        pod("job-node-0-1", "node", 1, phase="Pending", waiting="ContainerCreating"),
        pod("job-node-0-0", "node", 0),
        pod("job-launcher-0-0", "launcher", deleting=True),
    ]
    rows = pod_infos(pods, "job-launcher-0-0")
    assert [r.name for r in rows] == ["job-launcher-0-0", "job-node-0-0", "job-node-0-1"]
    assert [r.role for r in rows] == ["launcher", "node", "node"]
    assert rows[0].is_trainer and not rows[1].is_trainer
    assert rows[0].waiting_reason == "Terminating"
    assert rows[2].waiting_reason == "ContainerCreating" and rows[2].restarts == 2
    assert rows[2].ready is False and rows[1].ready is True
    assert rows[1].created is not None and rows[1].created.year == 2026
    assert rows[1].node == "n1"


def test_job_status_states() -> None:
    target = target_from_runtime(MPI)
    start = time.monotonic()
    st = job_status("job", "ns", "mpi", {}, [], target, start)
    assert st.state == "Creating" and st.trainer_pod is None
    nodes = [pod(f"job-node-0-{i}", "node", i) for i in range(2)]
    st = job_status("job", "ns", "mpi", {}, nodes, target, start)
    assert st.state == "Pending" and "launcher" in st.message and "2/2" in st.message
    launcher = pod("job-launcher-0-0", "launcher")
    st = job_status("job", "ns", "mpi", {}, [*nodes, launcher], target, start)
    assert st.state == "Running" and st.trainer_pod == "job-launcher-0-0"
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "message": "boom"}]}}
    st = job_status("job", "ns", "mpi", failed, nodes, target, start)
    assert (st.state, st.message) == ("Failed", "boom")
    assert trainjob_failure(failed) == "boom"
    assert (
        trainjob_failure({"status": {"conditions": [{"type": "Failed", "status": "False"}]}})
        is None
    )
    st = job_status("job", "ns", "mpi", None, [], target, start)
    assert st.state == "Deleted"
    susp = {"status": {"conditions": [{"type": "Suspended", "status": "True", "reason": "Q"}]}}
    assert job_status("job", "ns", "mpi", susp, [], target, start).state == "Suspended"


def test_termination_names_the_trainer_containers_exit() -> None:
    def ended(name: str, **state: object) -> dict:
        return {"name": name, "state": {"terminated": state}}

    sidecar = ended("sidecar", exitCode=0, reason="Completed")
    trainer = ended("node", exitCode=2, reason="Error", message="CUDA out of memory")
    assert (
        termination({"status": {"containerStatuses": [sidecar, trainer]}})
        == "exit code 2 (Error: CUDA out of memory)"
    )
    assert termination({"status": {"containerStatuses": [ended("node", exitCode=137)]}}) == (
        "exit code 137"
    )
    running = {"name": "node", "state": {"running": {}}}
    assert termination({"status": {"containerStatuses": [running]}}) == ""
    assert termination({}) == ""
