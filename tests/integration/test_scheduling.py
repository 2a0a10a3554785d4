"""The local cluster's node capacity and scheduler, checked through the engine and the API.

Messages are kube-scheduler 1.32's (controller/scheduler.py cites the upstream files).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from tests.helpers.kube import delete_all_trainjobs
from tests.helpers.polling import wait_until
from trainjob_magics import connect
from trainjob_magics.cli import main as cli_main
from trainjob_magics.engine import ConnectTimeoutError, PodStartError, TrainJobSession
from trainjob_magics.engine.trainjob.body import build_trainjob, generate_name
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.controller.scheduler import fit_error, fit_reasons
from trainjob_magics.localcluster.kubelet.node import (
    GPU,
    node_resources,
    pod_requests,
)

pytestmark = pytest.mark.timeout(120)
RUNTIME = "torch-distributed"
NO_VICTIMS = "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
GPU_MESSAGE = f"0/1 nodes are available: 1 Insufficient nvidia.com/gpu. {NO_VICTIMS}"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster whose node has 4 CPUs, 8Gi and 2 GPUs."""
    root = tmp_path_factory.mktemp("small-node")
    with LocalCluster(root_dir=root, cpus=4, memory="8Gi", gpus=2, bookmark_interval=0.5) as c:
        yield c
        delete_all_trainjobs(c.kubeconfig_path)


@pytest.fixture
def kc(small: LocalCluster) -> Iterator[str]:
    yield str(small.kubeconfig_path)
    delete_all_trainjobs(small.kubeconfig_path)


@pytest.fixture
def core(small: LocalCluster) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(config_file=str(small.kubeconfig_path))
    yield client.CoreV1Api(api)
    api.close()


def trainer_pod(core: client.CoreV1Api, job: str) -> Any:
    pods = core.list_namespaced_pod(
        "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={job}"
    ).items
    return pods[0] if pods else None


def scheduled_condition(pod: Any) -> Any:
    return next(c for c in pod.status.conditions or [] if c.type == "PodScheduled")


def pod_events(core: client.CoreV1Api, pod: str) -> list[Any]:
    return core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={pod},involvedObject.kind=Pod"
    ).items


def stuck_job(kc: str, core: client.CoreV1Api, **resources: str) -> Any:
    """A TrainJob created through the API (connect would fail at once: its request is above
    the node) and its trainer pod once the scheduler marked it; the job is left in place."""
    name = generate_name()
    body = build_trainjob(name, "default", RUNTIME, **resources)
    api = config.new_client_from_config(config_file=kc)
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", body
        )
    finally:
        api.close()

    def marked() -> Any:
        pod = trainer_pod(core, name)
        conds = (pod.status.conditions or []) if pod is not None else []
        return pod if any(c.type == "PodScheduled" for c in conds) else None

    return wait_until(marked)


def connect_in_thread(kc: str, **kw: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["session"] = connect(RUNTIME, config_file=kc, **kw)
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


# -- the messages (pure functions) ---------------------------------------------------------


def test_fit_messages_follow_kube_scheduler() -> None:
    alloc = {"cpu": 4000, "memory": 8 * 2**30, "ephemeral-storage": 0, GPU: 2, "pods": 110}
    assert fit_reasons({GPU: 4}, {}, alloc, 0) == ["Insufficient nvidia.com/gpu"]
    assert fit_error(["Insufficient nvidia.com/gpu"], 1, NO_VICTIMS) == GPU_MESSAGE
    reasons = fit_reasons({"cpu": 5000, "memory": 2**40, GPU: 3}, {}, alloc, 0)
    # one entry per reason, sorted as strings ("1 Insufficient cpu, 1 Insufficient memory, ...")
    assert fit_error(reasons) == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
        "1 Insufficient nvidia.com/gpu."
    )
    assert fit_reasons({"cpu": 1000}, {"cpu": 3500}, alloc, 3) == ["Insufficient cpu"]
    assert fit_reasons({}, {}, alloc, 110) == ["Too many pods"]
    assert fit_reasons({"example.com/fpga": 1}, {}, alloc, 0) == ["Insufficient example.com/fpga"]
    assert fit_reasons({"cpu": 4000, GPU: 2}, {}, alloc, 0) == []


def test_pod_requests_as_the_scheduler_counts_them() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"limits": {"cpu": "1", GPU: "1"}}},  # requests default to limits
                {"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "3"}}}],
            "overhead": {"memory": "64Mi"},
        }
    }
    assert pod_requests(pod) == {"cpu": 3000, GPU: 1, "memory": 2**30 + 64 * 2**20}


def test_node_capacity_options() -> None:
    node = node_resources()
    assert (node.milli_cpu, node.memory, node.gpus) == (64_000, 256 * 2**30, 8)  # any machine
    node = node_resources("2500m", "3Gi", 1)
    assert (node.milli_cpu, node.memory, node.gpus) == (2500, 3 * 2**30, 1)
    for bad in ({"cpus": "lots"}, {"memory": "-1Gi"}, {"gpus": "1.5"}):
        with pytest.raises(ValueError):
            node_resources(**bad)  # type: ignore[arg-type]
    with LocalCluster(cpus=2, memory="4Gi", gpus=0) as c:
        assert c.node.describe() == "cpu 2, memory 4Gi, nvidia.com/gpu 0"


def test_cli_rejects_a_bad_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["local-cluster", "--cpus", "lots"]) == 2
    assert "invalid quantity 'lots'" in capsys.readouterr().err


# -- through the engine --------------------------------------------------------------------


def test_too_many_gpus_fail_connect_at_once(kc: str, core: client.CoreV1Api) -> None:
    started = time.monotonic()
    with pytest.raises(PodStartError) as info:
        connect(RUNTIME, gpu=4, cpu="6", timeout=60, config_file=kc)
    assert time.monotonic() - started < 20
    assert "asks for cpu 6, nvidia.com/gpu 4 per pod, but the local cluster's only node " in (
        str(info.value)
    )
    assert "holds cpu 4, nvidia.com/gpu 2" in str(info.value)
    assert "--cpus/--gpus (trainjob-magics local-cluster --cpus 6 --gpus 4)" in str(info.value)


def test_too_many_gpus_stay_pending_with_the_schedulers_message(
    kc: str, core: client.CoreV1Api
) -> None:
    pod = stuck_job(kc, core, gpu="4")
    wait_until(lambda: pod_events(core, pod.metadata.name))
    time.sleep(1.0)  # it stays so: one attempt, one Event
    pod = core.read_namespaced_pod(pod.metadata.name, "default")
    assert pod.status.phase == "Pending" and not pod.spec.node_name
    cond = scheduled_condition(pod)
    assert (cond.status, cond.reason, cond.message) == ("False", "Unschedulable", GPU_MESSAGE)
    failed = [e for e in pod_events(core, pod.metadata.name) if e.reason == "FailedScheduling"]
    assert len(failed) == 1
    assert (failed[0].type, failed[0].source.component, failed[0].message) == (
        "Warning",
        "default-scheduler",
        GPU_MESSAGE,
    )


def test_several_missing_resources_in_one_message(kc: str, core: client.CoreV1Api) -> None:
    pod = stuck_job(kc, core, cpu="6", memory="16Gi")
    assert scheduled_condition(pod).message == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. " + NO_VICTIMS
    )


def test_a_waiting_pod_runs_when_capacity_frees_up(kc: str, core: client.CoreV1Api) -> None:
    first = connect(RUNTIME, gpu=2, timeout=30, config_file=kc)
    try:
        t, out = connect_in_thread(kc, gpu=1, timeout=60)
        pod = wait_until(
            lambda: next(
                (
                    p
                    for p in core.list_namespaced_pod("default").items
                    if p.metadata.labels.get("jobset.sigs.k8s.io/jobset-name") != first.name
                    and any(
                        c.type == "PodScheduled" and c.status == "False"
                        for c in p.status.conditions or []
                    )
                ),
                None,
            )
        )
        assert scheduled_condition(pod).message == GPU_MESSAGE
        assert t.is_alive()
    finally:
        first.close()
    t.join(60)
    second: TrainJobSession = out["session"]
    try:
        assert second.execute("echo ran").stdout == "ran\n"
        reasons = {e.reason for e in pod_events(core, pod.metadata.name)}
        assert {"FailedScheduling", "Scheduled", "Pulled", "Created", "Started"} <= reasons
        bound = core.read_namespaced_pod(pod.metadata.name, "default")
        assert bound.spec.node_name == "local-node"
        cond = scheduled_condition(bound)
        assert cond.status == "True" and cond.reason is None
    finally:
        second.close()


def test_a_finished_pod_frees_its_gpus(kc: str, core: client.CoreV1Api) -> None:
    first = connect(RUNTIME, gpu=2, command="sleep 3", timeout=30, config_file=kc)
    try:
        started = time.monotonic()
        second = connect(RUNTIME, gpu=2, timeout=60, config_file=kc)
        try:
            # the first job's pod Succeeded: the scheduler's cache no longer counts it
            assert time.monotonic() - started >= 1.0
            assert trainer_pod(core, first.name).status.phase == "Succeeded"
        finally:
            second.close()
    finally:
        first.close()


def _runtime_with(small: LocalCluster, name: str, **pod_spec: Any) -> None:
    text = (
        Path(__file__).resolve().parents[2]
        / "trainjob_magics/localcluster/runtimes/torch_distributed.yaml"
    ).read_text()
    rt = yaml.safe_load(text)
    rt["metadata"]["name"] = name
    spec = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]
    spec.update(pod_spec)
    small.load_runtime_yaml(json.dumps(rt) + "\n")


def test_a_higher_priority_pod_preempts(
    small: LocalCluster, kc: str, core: client.CoreV1Api, unique_name: Callable[[str], str]
) -> None:
    _runtime_with(small, "torch-high", priority=1000)
    low = connect(RUNTIME, gpu=2, timeout=30, config_file=kc)
    low_pod = low.status().trainer_pod
    try:
        high = connect("torch-high", gpu=2, timeout=60, config_file=kc)
        try:
            assert high.execute("echo high").stdout == "high\n"
            events = pod_events(core, low_pod)
            preempted = [e for e in events if e.reason == "Preempted"]
            assert preempted and preempted[0].source.component == "default-scheduler"
            high_uid = core.read_namespaced_pod(high.status().trainer_pod, "default").metadata.uid
            assert preempted[0].message == f"Preempted by pod {high_uid} on node local-node"
            # Job recreates the low-priority pod; with nothing of lower priority to preempt
            # it waits.
            replacement = wait_until(
                lambda: next(
                    (
                        p
                        for p in core.list_namespaced_pod(
                            "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={low.name}"
                        ).items
                        if p.metadata.name != low_pod
                        and any(
                            c.type == "PodScheduled" and c.status == "False"
                            for c in p.status.conditions or []
                        )
                    ),
                    None,
                )
            )
            assert scheduled_condition(replacement).message == GPU_MESSAGE
        finally:
            high.close()
    finally:
        low.close()


def test_preemption_policy_never_is_in_the_message(small: LocalCluster, kc: str) -> None:
    _runtime_with(small, "torch-never", priority=1000, preemptionPolicy="Never")
    low = connect(RUNTIME, gpu=2, timeout=30, config_file=kc)
    try:
        with pytest.raises(ConnectTimeoutError) as info:
            connect("torch-never", gpu=1, timeout=2, config_file=kc)
        assert (
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
            "preemption: not eligible due to preemptionPolicy=Never." in str(info.value)
        )
    finally:
        low.close()


def test_kubectl_shows_the_scheduling_events(
    small: LocalCluster, kc: str, core: client.CoreV1Api, tmp_path: Path
) -> None:
    pod = stuck_job(kc, core, gpu="3").metadata.name
    wait_until(lambda: any(e.reason == "FailedScheduling" for e in pod_events(core, pod)))
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": kc}
    got = subprocess.run(
        [
            "kubectl",
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={pod}",
            "-o",
            "custom-columns=TYPE:.type,REASON:.reason,FROM:.source.component,MESSAGE:.message",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    line = next(x for x in got.stdout.splitlines() if "FailedScheduling" in x)
    assert line.split(None, 3) == ["Warning", "FailedScheduling", "default-scheduler", GPU_MESSAGE]
