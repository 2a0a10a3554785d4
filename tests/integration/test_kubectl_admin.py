"""The real `kubectl` on PATH as an admin uses it, against a local cluster with Kueue on.

Each test runs kubectl with an empty HOME and cache dir, as a new user would.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.core.events import record_event
from trainjob_magics.localcluster.kueue import KueueConfig

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"

# Kueue's own setup, as its docs give it (kubernetes-sigs/kueue
# site/static/examples/provisioning/provisioning-setup.yaml and the WorkloadPriorityClass of
# site/content/en/docs/concepts/workload_priority_class.md), in the served version v1beta2.
KUEUE_SETUP = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: "default-flavor"
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: "cluster-queue"
spec:
  namespaceSelector: {} # match all.
  resourceGroups:
  - coveredResources: ["cpu", "memory", "nvidia.com/gpu"]
    flavors:
    - name: "default-flavor"
      resources:
      - name: "cpu"
        nominalQuota: 9
      - name: "memory"
        nominalQuota: 36Gi
      - name: "nvidia.com/gpu"
        nominalQuota: 9
  admissionChecksStrategy:
    admissionChecks:
      - name: "sample-prov"
        onFlavors: [default-flavor] # optional if the admission check targets all flavors.
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  namespace: "default"
  name: "user-queue"
spec:
  clusterQueue: "cluster-queue"
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata:
  name: sample-prov
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters:
    apiGroup: kueue.x-k8s.io
    kind: ProvisioningRequestConfig
    name: prov-test-config
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: sample-priority
value: 10000
description: "Sample priority"
"""

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def kc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Kueue on, no queues made at start (the admin creates them)."""
    root = tmp_path_factory.mktemp("kubectl-admin")
    with LocalCluster(root_dir=root, kueue=KueueConfig(local_queue=None)) as c:
        yield c


@pytest.fixture
def kubectl(kc_cluster: LocalCluster, tmp_path: Path) -> Kubectl:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(kc_cluster.kubeconfig_path)}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--cache-dir", str(home / "cache"), *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    return run


def _ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_create_namespace_sends_protobuf(kubectl: Kubectl) -> None:
    """kubectl 1.32 sends built-in objects as application/vnd.kubernetes.protobuf and does
    not fall back to JSON on a 415 (tried: it prints the 415), so the server decodes them."""
    r = kubectl("create", "namespace", "team-b", "-v=8")
    assert r.returncode == 0, r.stderr
    assert "namespace/team-b created" in r.stdout
    assert "Content-Type: application/vnd.kubernetes.protobuf" in r.stderr
    ns = json.loads(_ok(kubectl("get", "namespace", "team-b", "-o", "json")))
    assert ns["status"] == {"phase": "Active"}
    assert ns["spec"] == {"finalizers": ["kubernetes"]}
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-b"}
    assert "managedFields" not in ns["metadata"]  # kubectl hides them unless asked
    shown = json.loads(
        _ok(kubectl("get", "namespace", "team-b", "-o", "json", "--show-managed-fields"))
    )
    (entry,) = shown["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("kubectl-create", "Update")
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:kubernetes.io/metadata.name": {}}}
    }
    r = kubectl("create", "namespace", "team-b")
    assert r.returncode == 1
    assert 'Error from server (AlreadyExists): namespaces "team-b" already exists' in r.stderr
    lines = _ok(kubectl("get", "namespaces")).splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "AGE"]
    assert next(ln.split()[:2] for ln in lines if ln.startswith("team-b")) == ["team-b", "Active"]
    _ok(kubectl("label", "namespace", "team-b", "tier=gold"))
    _ok(kubectl("annotate", "namespace", "team-b", "owner=admin"))
    # kubectl apply on a built-in kind: a strategic merge patch
    applied = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-b", "labels": {"tier": "silver"}},
    }
    _ok(kubectl("apply", "-f", "-", stdin=json.dumps(applied)))
    got = json.loads(_ok(kubectl("get", "namespace", "team-b", "-o", "json")))
    assert got["metadata"]["labels"]["tier"] == "silver"
    assert got["metadata"]["annotations"]["owner"] == "admin"
    assert 'namespace "team-b" deleted' in _ok(kubectl("delete", "namespace", "team-b"))


def test_apply_kueue_setup(kubectl: Kubectl, tmp_path: Path) -> None:
    """`kubectl apply -f` of Kueue's setup YAML with the default --validate=strict: every kind
    is in /openapi/v3 (no "failed to download openapi"), applies create, then change nothing."""
    setup = tmp_path / "setup.yaml"
    setup.write_text(KUEUE_SETUP)
    out = _ok(kubectl("apply", "-f", str(setup)))
    assert out.splitlines() == [
        "resourceflavor.kueue.x-k8s.io/default-flavor created",
        "clusterqueue.kueue.x-k8s.io/cluster-queue created",
        "localqueue.kueue.x-k8s.io/user-queue created",
        "admissioncheck.kueue.x-k8s.io/sample-prov created",
        "workloadpriorityclass.kueue.x-k8s.io/sample-priority created",
    ]
    again = _ok(kubectl("apply", "-f", str(setup)))
    assert [line.split()[-1] for line in again.splitlines()] == ["unchanged"] * 5
    lines = _ok(kubectl("get", "workloadpriorityclasses")).splitlines()
    assert lines[0].split() == ["NAME", "VALUE"]
    assert lines[1].split() == ["sample-priority", "10000"]
    assert _ok(kubectl("get", "wpc", "sample-priority", "-o", "jsonpath={.value}")) == "10000"
    got = _ok(
        kubectl("get", "admissionchecks", "sample-prov", "-o", "jsonpath={.spec.controllerName}")
    )
    assert got == "kueue.x-k8s.io/provisioning-request"
    cq = json.loads(_ok(kubectl("get", "clusterqueue", "cluster-queue", "-o", "json")))
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["name"] == "sample-prov"
    # a changed quota is a JSON merge patch (custom resources take no strategic merge patch)
    changed = KUEUE_SETUP.replace(
        'nominalQuota: 9\n      - name: "memory"', 'nominalQuota: 12\n      - name: "memory"'
    )
    setup.write_text(changed)
    out = _ok(kubectl("apply", "-f", str(setup), "-v=6"))
    assert "clusterqueue.kueue.x-k8s.io/cluster-queue configured" in out
    cq = json.loads(_ok(kubectl("get", "clusterqueue", "cluster-queue", "-o", "json")))
    quota = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert quota == {"name": "cpu", "nominalQuota": 12}
    # server-side apply: the Apply operation, the manager kubectl names
    setup.write_text(KUEUE_SETUP)
    out = _ok(kubectl("apply", "--server-side", "--force-conflicts", "-f", str(setup)))
    assert "serverside-applied" in out
    cq = json.loads(
        _ok(kubectl("get", "clusterqueue", "cluster-queue", "-o", "json", "--show-managed-fields"))
    )
    managers = {(e["manager"], e["operation"]) for e in cq["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers
    out = _ok(kubectl("delete", "-f", str(setup)))
    assert len(out.splitlines()) == 5


def test_get_events(kubectl: Kubectl, kc_cluster: LocalCluster) -> None:
    """printEvent's columns (pkg/printers/internalversion/printers.go), through core/v1 and
    through events.k8s.io/v1, and `kubectl events`."""
    pod = f"p{secrets.token_hex(4)}"
    ref = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "namespace": "default", "uid": f"uid-{pod}"},
    }
    msg = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    for _ in range(3):
        record_event(
            kc_cluster.store,
            ref,
            reason="FailedScheduling",
            message=msg,
            type="Warning",
            component="default-scheduler",
        )
    lines = _ok(kubectl("get", "events")).splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    row = next(line for line in lines if f"pod/{pod}" in line)
    assert re.match(rf"\d+s\s+Warning\s+FailedScheduling\s+pod/{pod}\s+{re.escape(msg)}$", row)
    wide = _ok(kubectl("get", "events", "-o", "wide")).splitlines()
    assert wide[0].split() == [
        "LAST",
        "SEEN",
        "TYPE",
        "REASON",
        "OBJECT",
        "SUBOBJECT",
        "SOURCE",
        "MESSAGE",
        "FIRST",
        "SEEN",
        "COUNT",
        "NAME",
    ]
    row = next(line for line in wide if f"pod/{pod}" in line)
    assert "default-scheduler" in row and re.search(r"\s3\s+" + re.escape(pod) + r"\.", row)
    for resource in ("events.v1.events.k8s.io", "events.events.k8s.io"):
        lines = _ok(kubectl("get", resource, "--field-selector", f"regarding.name={pod}"))
        assert f"pod/{pod}" in lines and "FailedScheduling" in lines
    got = json.loads(
        _ok(
            kubectl(
                "get",
                "events.v1.events.k8s.io",
                "--field-selector",
                f"regarding.name={pod}",
                "-o",
                "json",
            )
        )
    )
    (item,) = got["items"]
    assert item["apiVersion"] == "events.k8s.io/v1" and item["note"] == msg
    assert item["deprecatedCount"] == 3 and item["regarding"]["name"] == pod
    core = _ok(
        kubectl(
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={pod},type=Warning",
            "-o",
            "name",
        )
    )
    assert core.strip().startswith(f"event/{pod}.")
    listed = _ok(kubectl("events", "--for", f"pod/{pod}"))
    assert "FailedScheduling" in listed and msg in listed
    r = kubectl("get", "events", "--field-selector", "nothing=1")
    assert r.returncode == 1 and "field label not supported: nothing" in r.stderr


def test_explain(kubectl: Kubectl) -> None:
    """kubectl explain reads /openapi/v3 (the v2 protobuf it would need for
    --output plaintext-openapiv2 is not produced: an honest 406)."""
    out = _ok(kubectl("explain", "trainjobs.spec"))
    assert "KIND:       TrainJob" in out and "runtimeRef" in out and "trainer" in out
    out = _ok(kubectl("explain", "clusterqueues.spec"))
    assert "KIND:       ClusterQueue" in out
    for field in ("resourceGroups", "namespaceSelector", "cohortName", "admissionChecksStrategy"):
        assert field in out, field
    out = _ok(kubectl("explain", "workloadpriorityclasses"))
    assert "value\t<integer> -required-" in out
    assert "controllerName" in _ok(kubectl("explain", "admissionchecks.spec"))
    r = kubectl("explain", "--output", "plaintext-openapiv2", "trainjobs.spec")
    assert r.returncode == 1 and "NotAcceptable" in r.stderr
    swagger = json.loads(_ok(kubectl("get", "--raw", "/openapi/v2")))
    assert swagger["swagger"] == "2.0"
    tj = swagger["definitions"][f"org.kubeflow.trainer.{VERSION}.TrainJob"]
    assert tj["x-kubernetes-group-version-kind"] == [
        {"group": GROUP, "version": VERSION, "kind": "TrainJob"}
    ]
    patch = swagger["paths"][f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/trainjobs/{{name}}"]
    assert "application/strategic-merge-patch+json" not in patch["patch"]["consumes"]
    ns_patch = swagger["paths"]["/api/v1/namespaces/{name}"]["patch"]["consumes"]
    assert "application/strategic-merge-patch+json" in ns_patch


def test_patch_types_pods_and_paging(kubectl: Kubectl, kc_cluster: LocalCluster) -> None:
    """`kubectl patch` defaults to a strategic merge patch: a custom resource answers 415
    (apiextensions); `kubectl label pod` works; `--chunk-size` pages with limit/continue."""
    name = f"k{secrets.token_hex(5)}"
    tj = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "command": ["sleep", "60"]},
        },
    }
    _ok(kubectl("apply", "-f", "-", stdin=yaml.safe_dump(tj)))
    try:
        r = kubectl("patch", "trainjob", name, "-p", '{"metadata":{"labels":{"a":"b"}}}')
        assert r.returncode == 1
        # kubectl patch.go words an UnsupportedMediaType Status this way
        assert r.stderr == (
            "error: application/strategic-merge-patch+json is not supported by "
            f"{GROUP}/{VERSION}, Kind=TrainJob: the body of the request was in an unknown "
            "format - accepted media types include: application/json-patch+json, "
            "application/merge-patch+json, application/apply-patch+yaml\n"
        )
        _ok(
            kubectl(
                "patch",
                "trainjob",
                name,
                "--type",
                "merge",
                "-p",
                '{"metadata":{"labels":{"a":"b"}}}',
            )
        )
        _ok(
            kubectl(
                "wait",
                "--for=jsonpath={.status.phase}=Running",
                "pods",
                "-l",
                f"jobset.sigs.k8s.io/jobset-name={name}",
                "--timeout=30s",
            )
        )
        pods = _ok(
            kubectl("get", "pods", "-l", f"jobset.sigs.k8s.io/jobset-name={name}", "-o", "name")
        ).split()
        assert len(pods) == 2
        _ok(kubectl("label", pods[0], "checked=yes"))
        assert _ok(kubectl("get", "pods", "-l", "checked=yes", "-o", "name")).split() == [pods[0]]
        r = kubectl(
            "get", "pods", "--chunk-size=1", "-v=6", "-l", f"jobset.sigs.k8s.io/jobset-name={name}"
        )
        assert r.returncode == 0, r.stderr
        assert len(r.stdout.splitlines()) == 3  # header + 2 pods, read one page at a time
        assert "limit=1" in r.stderr and "continue=" in r.stderr
        wide = _ok(kubectl("api-resources", "-o", "wide", "--api-group="))
        pods_line = next(line for line in wide.splitlines() if line.startswith("pods "))
        assert "create,delete,deletecollection,get,list,patch,update,watch" in pods_line
        r = kubectl("run", "mine", "--image=busybox")
        assert r.returncode == 1 and "Error from server (Forbidden)" in r.stderr
    finally:
        _ok(kubectl("delete", "trainjob", name, "--wait=false"))
    r = kubectl("get", "--raw", "/nothing/here")
    assert r.returncode == 1 and "(NotFound)" in r.stderr
