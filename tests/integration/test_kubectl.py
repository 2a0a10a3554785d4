"""The real `kubectl` on PATH against the local cluster, with a fresh cache dir."""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from trainjob_magics.localcluster import LocalCluster

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


@pytest.fixture
def job(cluster: LocalCluster) -> Iterator[tuple[str, list[str]]]:
    """A running 2-node torch TrainJob: (name, pod names by completion index)."""
    api = config.new_client_from_config(str(cluster.kubeconfig_path))
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    name = f"k{secrets.token_hex(5)}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "command": ["sleep", "120"]},
        },
    }
    co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", body)
    deadline = time.monotonic() + 15
    while True:
        pods = core.list_namespaced_pod(
            "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
        ).items
        if len(pods) == 2 and all(p.status.phase == "Running" for p in pods):
            break
        assert time.monotonic() < deadline, "pods did not start"
        time.sleep(0.05)
    pods.sort(key=lambda p: p.metadata.labels["batch.kubernetes.io/job-completion-index"])
    yield name, [p.metadata.name for p in pods]
    co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", name)


def test_kubectl_get_pods(kubectl, job: tuple[str, list[str]]) -> None:
    _, pods = job
    r = kubectl("get", "pods")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    for pod in pods:
        assert rows[pod][1:4] == ["1/1", "Running", "0"]
    r = kubectl("get", "pods", "-l", "batch.kubernetes.io/job-completion-index=1", "-o", "name")
    assert r.returncode == 0, r.stderr
    assert f"pod/{pods[1]}" in r.stdout.split() and f"pod/{pods[0]}" not in r.stdout


def test_kubectl_get_trainjobs(kubectl, job: tuple[str, list[str]]) -> None:
    name, _ = job
    r = kubectl("get", "trainjobs")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "AGE"]
    assert name in [line.split()[0] for line in lines[1:]]
    r = kubectl("get", "trainjob", name, "-o", "jsonpath={.spec.runtimeRef.name}")
    assert (r.returncode, r.stdout) == (0, "torch-distributed"), r.stderr
    r = kubectl("get", "trainjob", "does-not-exist")
    assert r.returncode == 1
    assert 'trainjobs.trainer.kubeflow.org "does-not-exist" not found' in r.stderr


def test_kubectl_exec_streams_and_exit_code(kubectl, job: tuple[str, list[str]]) -> None:
    _, pods = job
    r = kubectl("exec", pods[0], "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert r.returncode == 3
    assert r.stdout == "out\n"
    assert r.stderr.startswith("err\n")
    r = kubectl("exec", pods[1], "--", "sh", "-c", "hostname; echo $HOSTNAME")
    assert r.returncode == 0, r.stderr
    host = pods[1].rsplit("-", 1)[0]
    assert r.stdout == f"{host}\n{host}\n"


def test_kubectl_exec_missing_pod(kubectl) -> None:
    r = kubectl("exec", "no-such-pod", "--", "true")
    assert r.returncode == 1
    assert 'pods "no-such-pod" not found' in r.stderr
