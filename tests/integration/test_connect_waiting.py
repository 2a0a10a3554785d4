"""What connect says while the trainer pod waits (issue 11, A.4), against the local cluster's
scheduler and kubelet: ``JobStatus.problem``, the timeout message, fail-fast image states and
requests above the node (issue 24), and ``%trainjob_connect`` in a real InteractiveShell.

The node has one GPU: a pod asking for two can never run and fails at once; a pod asking for
one while a session holds it waits (the node is only full for now)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell
from kubernetes import config

from tests.helpers.kube import delete_all_trainjobs, trainjob_names, wait_trainjob_gone
from tests.helpers.shell import magics_shell
from trainjob_magics import attach, connect
from trainjob_magics.engine import ConnectTimeoutError, JobStatus, PodStartError, TrainJobSession
from trainjob_magics.engine.kube.requests import request
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)
RUNTIME = "torch-distributed"
GPU_MESSAGE = (
    "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
    "available: 1 No preemption victims found for incoming pod."
)


@pytest.fixture(scope="module")
def one_gpu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One GPU, and a scheduler that takes a second to look at a new pod."""
    root = tmp_path_factory.mktemp("one-gpu")
    with LocalCluster(root_dir=root, gpus=1, pending_delay=1.0, bookmark_interval=0.5) as c:
        yield c
        delete_all_trainjobs(c.kubeconfig_path)


@pytest.fixture
def kc(one_gpu: LocalCluster) -> Iterator[str]:
    yield str(one_gpu.kubeconfig_path)
    delete_all_trainjobs(one_gpu.kubeconfig_path)


@pytest.fixture
def holder(kc: str) -> Iterator[TrainJobSession]:
    """A session holding the node's only GPU: the node is full, for now."""
    session = connect(RUNTIME, gpu=1, timeout=60, config_file=kc)
    yield session
    session.close()


def job_of(exc: BaseException | str) -> str:
    return str(exc).split("TrainJob ", 1)[1].split(" ", 1)[0]


NEVER_FITS = (
    "asks for nvidia.com/gpu 2 per pod, but the local cluster's only node (local-node) holds "
    "nvidia.com/gpu 1, and no other node can join: ask for less with {gpu}, or start the "
    "local cluster with a larger --gpus (trainjob-magics local-cluster --gpus 2); the "
    f"scheduler says: {GPU_MESSAGE}"
)


def test_a_request_above_the_node_fails_at_once_and_leaves_nothing(kc: str) -> None:
    seen: list[JobStatus] = []
    started = time.monotonic()
    with pytest.raises(PodStartError) as info:
        connect(RUNTIME, gpu=2, timeout=120, config_file=kc, on_status=seen.append)
    assert time.monotonic() - started < 20  # not the connect timeout
    text = str(info.value)
    assert "\n" not in text and text.endswith(NEVER_FITS.format(gpu="gpu=..."))
    assert any(GPU_MESSAGE in s.problem for s in seen)  # the panel had the scheduler's words
    assert wait_trainjob_gone(kc, job_of(text), 10, interval=0.1)


def test_a_full_node_is_waited_for(kc: str, holder: TrainJobSession) -> None:
    started = time.monotonic()
    with pytest.raises(ConnectTimeoutError):
        connect(RUNTIME, gpu=1, timeout=4, config_file=kc)
    assert time.monotonic() - started >= 4  # other pods hold the GPU: it frees up again


def test_the_timeout_says_why_the_pod_waits(kc: str, holder: TrainJobSession) -> None:
    with pytest.raises(ConnectTimeoutError) as info:
        connect(RUNTIME, gpu=1, timeout=4, config_file=kc)
    pod_line = f"waiting because pod {job_of(info.value)}-node-0-0-"
    assert pod_line in str(info.value)
    assert f": Unschedulable: {GPU_MESSAGE}" in str(info.value)
    assert job_of(info.value) in trainjob_names(kc)  # a timeout leaves the job


def test_attach_reports_the_schedulers_message_in_the_status(
    kc: str, holder: TrainJobSession
) -> None:
    with pytest.raises(ConnectTimeoutError) as info:
        connect(RUNTIME, gpu=1, timeout=3, config_file=kc)
    seen: list[JobStatus] = []
    with pytest.raises(ConnectTimeoutError):
        attach(job_of(info.value), timeout=2, config_file=kc, on_status=seen.append)
    problems = [s.problem for s in seen if s.problem]
    assert problems and problems[0].endswith(f": Unschedulable: {GPU_MESSAGE}")


def test_connect_reports_a_problem_found_later(kc: str, holder: TrainJobSession) -> None:
    seen: list[JobStatus] = []
    with pytest.raises(ConnectTimeoutError):
        connect(RUNTIME, gpu=1, timeout=4, config_file=kc, on_status=seen.append)
    # the pod is Pending for 1 s before the scheduler marks it: the first status has no problem
    assert seen and not seen[0].problem
    assert any(GPU_MESSAGE in s.problem for s in seen)


# -- %trainjob_connect ---------------------------------------------------------------------


@pytest.fixture
def shell(one_gpu: LocalCluster) -> Iterator[InteractiveShell]:
    with magics_shell(one_gpu.kubeconfig_path, widgets="off", close_timeout=20.0) as sh:
        yield sh


def test_magic_timeout_names_the_scheduler(
    shell: InteractiveShell, kc: str, holder: TrainJobSession, capsys: pytest.CaptureFixture[str]
) -> None:
    res = shell.run_cell("%trainjob_connect torch-distributed --gpu 1 --timeout 3")
    assert type(res.error_in_exec).__name__ == "ConnectTimeoutError"
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "ConnectTimeoutError" in x)
    assert "Insufficient nvidia.com/gpu" in line and "Traceback" not in out


def test_magic_request_above_the_node_fails_in_one_line(
    shell: InteractiveShell, kc: str, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    res = shell.run_cell("%trainjob_connect torch-distributed --gpu 2 --timeout 120")
    assert time.monotonic() - started < 20
    assert type(res.error_in_exec).__name__ == "PodStartError"
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if "PodStartError" in x]
    assert line.endswith(NEVER_FITS.format(gpu="--gpu")) and "Traceback" not in out
    assert wait_trainjob_gone(kc, job_of(line), 10, interval=0.1)


def test_magic_bad_image_fails_fast_and_deletes_the_job(
    shell: InteractiveShell, kc: str, capsys: pytest.CaptureFixture[str]
) -> None:
    res = shell.run_cell("%trainjob_connect torch-distributed --image Acme/Trainer:1 --timeout 60")
    assert type(res.error_in_exec).__name__ == "PodStartError"
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "PodStartError" in x)
    assert "InvalidImageName: Failed to apply default image tag" in line
    assert "repository name (Trainer) must be lowercase" in line
    assert wait_trainjob_gone(kc, job_of(line), 10, interval=0.1)


# -- the default node (docs/troubleshooting.md's row) and the marker --------------------------


def test_cpu_above_the_default_node_fails_in_seconds(
    local_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    kc = str(local_cluster.kubeconfig_path)
    with magics_shell(local_cluster.kubeconfig_path, widgets="off", close_timeout=20.0) as sh:
        started = time.monotonic()
        res = sh.run_cell("%trainjob_connect torch-distributed --cpu 100 --timeout 300")
        assert time.monotonic() - started < 20
    assert type(res.error_in_exec).__name__ == "PodStartError"
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "PodStartError" in x]
    assert (
        "asks for cpu 100 per pod, but the local cluster's only node (local-node) holds cpu 64, "
        "and no other node can join: ask for less with --cpu, or start the local cluster with a "
        "larger --cpus (trainjob-magics local-cluster --cpus 100); the scheduler says: 0/1 nodes "
        "are available: 1 Insufficient cpu." in line
    )
    assert wait_trainjob_gone(kc, job_of(line), 10, interval=0.1)


def test_version_carries_the_marker(one_gpu: LocalCluster) -> None:
    api = config.new_client_from_config(config_file=str(one_gpu.kubeconfig_path))
    try:
        body = request(api, "GET", "/version", verb="get", resource="version")
    finally:
        api.close()
    assert body["gitVersion"] == "v1.32.4+trainjob-magics-local"
    node = body["trainjobMagicsLocalNode"]
    assert node["name"] == "local-node"
    assert {k: node["allocatable"][k] for k in ("cpu", "memory", "nvidia.com/gpu", "pods")} == {
        "cpu": "64",
        "memory": str(256 * 2**30),
        "nvidia.com/gpu": "1",
        "pods": "110",
    }
