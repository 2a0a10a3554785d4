"""%trainjob_connect's pod-shaping options on the local cluster, through a real InteractiveShell:
--dry-run prints a TrainJob that applies with the real kubectl and creates nothing itself; bad
values and missing objects are one line with nothing left behind; the pods carry what was
asked (labels, node selector, tolerations, service account, /dev/shm) and %trainjob_status
shows it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell
from kubernetes import client, config

from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


def shown(
    sh: InteractiveShell, source: str, capsys: pytest.CaptureFixture[str]
) -> tuple[bool, str]:
    capsys.readouterr()
    res = sh.run_cell(source)
    out = capsys.readouterr()
    return res.success, out.out + out.err


def one_error_line(text: str) -> str:
    assert "Traceback" not in text, text
    lines = [x for x in text.splitlines() if "Error" in x]
    assert len(lines) == 1, text
    return lines[0]


def _trainjobs(cluster: LocalCluster) -> list[str]:
    api = config.new_client_from_config(str(cluster.kubeconfig_path))
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs"
    )["items"]
    return [i["metadata"]["name"] for i in items]


def _pod(cluster: LocalCluster, name: str) -> Any:
    api = config.new_client_from_config(str(cluster.kubeconfig_path))
    pods = client.CoreV1Api(api).list_namespaced_pod(
        "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
    )
    return pods.items[0]


def test_dry_run_prints_a_trainjob_kubectl_applies(
    shell: InteractiveShell,
    cluster: LocalCluster,
    capsys: pytest.CaptureFixture[str],
    kubectl: Callable[..., Any],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    name = unique_name("dry")
    ok, out = shown(
        shell,
        f"%trainjob_connect mpi-interactive --name {name} --dry-run --label team=vision "
        "--annotation example.com/owner=ann --node-selector kubernetes.io/os=linux "
        "--toleration gpu=true:NoSchedule --shm-size 256Mi --volume emptydir:/scratch:1Gi",
        capsys,
    )
    assert ok, out
    manifest = yaml.safe_load(out)
    assert manifest["kind"] == "TrainJob" and manifest["metadata"]["name"] == name
    for server_owned in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        assert server_owned not in manifest["metadata"]
    assert "status" not in manifest
    assert manifest["metadata"]["labels"]["team"] == "vision"
    # the keep-alive script reads as a script: a literal block, one line of it per line
    script = max(manifest["spec"]["trainer"]["command"], key=len)
    assert script.count("\n") > 10 and "\\n" not in out and '\\"' not in out, out
    shown_lines = {line.strip() for line in out.splitlines()}
    assert all(line.strip() in shown_lines for line in script.splitlines()), out
    assert name not in _trainjobs(cluster)  # nothing created by the dry run
    path = tmp_path / "tj.yaml"
    path.write_text(out)
    applied = kubectl("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    try:
        got = kubectl("get", "trainjob", name, "-o", "yaml")
        stored = yaml.safe_load(got.stdout)
        assert stored["spec"] == manifest["spec"]
        assert stored["metadata"]["labels"] == manifest["metadata"]["labels"]
    finally:
        kubectl("delete", "trainjob", name, "--wait=false")


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ("--volume nfs:x:/d", "--volume kind 'nfs' is unknown"),
        ("--toleration gpu=true:NoScheduled", "effect 'NoScheduled' is unknown"),
        ("--shm-size lots", "not a Kubernetes quantity"),
        ("--label 'bad key=1'", "label key"),
        ("--volume pvc:data:relative", "must be absolute"),
    ],
)
def test_bad_values_are_one_line_and_send_nothing(
    shell: InteractiveShell,
    cluster: LocalCluster,
    capsys: pytest.CaptureFixture[str],
    options: str,
    fragment: str,
) -> None:
    before = cluster.faults.request_count
    ok, out = shown(shell, f"%trainjob_connect mpi-interactive {options}", capsys)
    line = one_error_line(out)
    assert not ok and fragment in line, line
    assert cluster.faults.request_count == before


def test_a_missing_pvc_is_one_line_at_once(
    shell: InteractiveShell,
    cluster: LocalCluster,
    capsys: pytest.CaptureFixture[str],
    unique_name: Callable[[str], str],
) -> None:
    name = unique_name("nopvc")
    started = time.monotonic()
    ok, out = shown(
        shell, f"%trainjob_connect mpi-interactive --name {name} --volume pvc:{name}:/data", capsys
    )
    line = one_error_line(out)
    assert not ok and f'PersistentVolumeClaim "{name}" not found' in line, line
    assert time.monotonic() - started < 20
    assert name not in _trainjobs(cluster)


def test_the_pods_get_what_was_asked_and_status_shows_it(
    shell: InteractiveShell,
    cluster: LocalCluster,
    capsys: pytest.CaptureFixture[str],
    unique_name: Callable[[str], str],
) -> None:
    name = unique_name("shaped")
    ok, out = shown(
        shell,
        f"%trainjob_connect mpi-interactive --name {name} --label team=vision "
        "--annotation example.com/owner=ann --node-selector kubernetes.io/os=linux "
        "--toleration gpu=true:NoSchedule --toleration spot:NoExecute",
        capsys,
    )
    assert ok, out
    try:
        pod = _pod(cluster, name)
        assert pod.metadata.labels["team"] == "vision"
        assert pod.metadata.annotations["example.com/owner"] == "ann"
        assert pod.spec.node_selector == {"kubernetes.io/os": "linux"}
        tolerations = {(t.key, t.value, t.effect) for t in pod.spec.tolerations or []}
        assert {("gpu", "true", "NoSchedule"), ("spot", None, "NoExecute")} <= tolerations
        ok, out = shown(shell, "%trainjob_status", capsys)
        assert ok, out
        assert "selector kubernetes.io/os=linux" in out, out
        assert "tolerations gpu=true:NoSchedule, spot:NoExecute" in out, out
    finally:
        shell.run_line_magic("trainjob_close", "")
