"""Sessions shaped for real clusters (issue 22) against a real cluster: volumes, /dev/shm, the
service account, placement, pull secrets, labels and env from a Secret reach the pods; each
user error is one line within 20 s and leaves no TrainJob; ``--dry-run`` output applies with
``kubectl apply -f`` and creates the same TrainJob; a queued session with volumes and
tolerations works or fails at once naming the Kueue upgrade.

Runs when ``TRAINJOB_MAGICS_E2E_KUBECONFIG`` names a kubeconfig. The test's own objects (a PVC
of the default StorageClass, a Secret, a ConfigMap, a ServiceAccount, a pull secret) are made
with ``TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG`` when set, else the user's kubeconfig, and deleted
at the end. ``tests/integration/test_realcluster_suite.py`` runs it on the local cluster and
``test_realstack_suite.py`` on the real stack.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from tests.helpers.kernels import Kernel
from tests.realcluster.settings import (
    ADMIN,
    KUBECONFIG,
    NAMESPACE,
    NEEDS_CLUSTER,
    QUEUE,
    QUEUE_NAMESPACE,
    RUNTIME,
    WAIT,
)
from trainjob_magics import connect
from trainjob_magics.engine import errors as E
from trainjob_magics.engine.trainjob.served import trainer_api

ERROR_WITHIN = 20.0  # seconds: the bound for each user error
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.timeout(1200),
    NEEDS_CLUSTER,
]


def _namespace() -> str:
    if NAMESPACE:
        return NAMESPACE
    _contexts, current = config.list_kube_config_contexts(config_file=KUBECONFIG)
    return (current.get("context") or {}).get("namespace") or "default"


class Objects:
    """The test's PVC, Secret, ConfigMap, ServiceAccount and pull secret in one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.core = client.CoreV1Api(config.new_client_from_config(ADMIN))
        tag = secrets.token_hex(3)
        self.pvc, self.secret, self.cm = f"tjm-pvc-{tag}", f"tjm-sec-{tag}", f"tjm-cm-{tag}"
        self.sa, self.pull = f"tjm-sa-{tag}", f"tjm-pull-{tag}"
        self.secret_value = f"s3cret-{tag}"

    def create(self) -> None:
        ns, core = self.namespace, self.core
        raw = {"_preload_content": False}  # the answer is not needed (nor parsed)
        core.create_namespaced_persistent_volume_claim(
            ns,
            {
                "metadata": {"name": self.pvc},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "64Mi"}},
                },
            },
            **raw,
        )
        core.create_namespaced_secret(
            ns,
            {"metadata": {"name": self.secret}, "stringData": {"TJM_SECRET": self.secret_value}},
            **raw,
        )
        core.create_namespaced_config_map(
            ns, {"metadata": {"name": self.cm}, "data": {"TJM_FROM_CM": "cm-value"}}, **raw
        )
        core.create_namespaced_service_account(ns, {"metadata": {"name": self.sa}}, **raw)
        docker = base64.b64encode(json.dumps({"auths": {}}).encode()).decode()
        core.create_namespaced_secret(
            ns,
            {
                "metadata": {"name": self.pull},
                "type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": docker},
            },
            **raw,
        )

    def delete(self) -> None:
        ns, core = self.namespace, self.core
        for call, name in (
            (core.delete_namespaced_persistent_volume_claim, self.pvc),
            (core.delete_namespaced_secret, self.secret),
            (core.delete_namespaced_config_map, self.cm),
            (core.delete_namespaced_service_account, self.sa),
            (core.delete_namespaced_secret, self.pull),
        ):
            with contextlib.suppress(client.ApiException):
                call(name, ns, _preload_content=False)


@pytest.fixture(scope="module")
def objects() -> Iterator[Objects]:
    made = Objects(_namespace())
    made.create()
    yield made
    made.delete()


def _user_api() -> Any:
    return config.new_client_from_config(KUBECONFIG)


def _trainjob_left(namespace: str, name: str) -> bool:
    """True when TrainJob ``name`` exists and is not being deleted."""
    co = client.CustomObjectsApi(_user_api())
    try:
        obj = co.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)
    except client.ApiException as exc:
        assert exc.status == 404, exc
        return False
    return not obj["metadata"].get("deletionTimestamp")


def _trainer_pod_spec(namespace: str, job: str) -> Any:
    core = client.CoreV1Api(_user_api())
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={job}"
    ).items
    return next(p for p in pods if any(c.name == "node" for c in p.spec.containers))


def _validates_pod_patches() -> bool:
    """Whether the API server's published TrainJob schema types the pod-spec patches (a real
    API server serving Trainer's CRD does; '2.2+' means runtimePatches without their schema)."""
    return trainer_api(_user_api()).release != "2.2+"


def _node_label() -> tuple[str, str] | None:
    """A label every node carries (for a node selector that matches), read as admin."""
    try:
        nodes = client.CoreV1Api(config.new_client_from_config(ADMIN)).list_node().items
    except client.ApiException:
        return None
    if not nodes:
        return None
    shared = set((nodes[0].metadata.labels or {}).items())
    for node in nodes[1:]:
        shared &= set((node.metadata.labels or {}).items())
    for key, value in sorted(shared):
        if key in ("kubernetes.io/os", "kubernetes.io/arch", "type"):
            return key, value
    return sorted(shared)[0] if shared else None


def test_a_pvc_file_written_in_one_session_is_read_in_the_next(objects: Objects) -> None:
    """In a real kernel: session 1 mounts the PVC, a Secret as env, 256Mi of /dev/shm, runs
    under the service account with labels, tolerations, a node selector and a pull secret;
    session 2 reads the file session 1 wrote."""
    ns = objects.namespace
    stamp = secrets.token_hex(8)
    selector = _node_label()
    place = f" --node-selector {selector[0]}={selector[1]}" if selector else ""
    first = f"tjm-shape1-{secrets.token_hex(3)}"
    with Kernel() as kernel:
        setup = (
            "import os\n"
            f"os.environ['KUBECONFIG'] = {KUBECONFIG!r}\n"
            "%load_ext trainjob_magics\n"
            "%config TrainJobMagics.widgets = 'off'\n"
            f"%trainjob_connect {RUNTIME} --name {first} --namespace {ns} --timeout {WAIT:g} "
            f"--volume pvc:{objects.pvc}:/data --shm-size 256Mi --env-from secret:{objects.secret} "
            f"--service-account {objects.sa} --label team=vision --annotation example.com/o=ann "
            f"--toleration tjm-test=x:NoSchedule --image-pull-secret {objects.pull}{place}"
        )
        reply, out = kernel.run_text(setup, timeout=WAIT + 60)
        assert reply["status"] == "ok", out
        cell = (
            "%%trainjob\n"
            f"echo {stamp} > /data/stamp.txt && echo written\n"
            "df -k /dev/shm | tail -1\n"
            'echo "secret=$TJM_SECRET"\n'
            "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo\n"
        )
        reply, out = kernel.run_text(cell, timeout=120)
        assert reply["status"] == "ok" and "written" in out, out
        shm_kib = next(line.split()[1] for line in out.splitlines() if "/dev/shm" in line)
        assert int(shm_kib) == 256 * 1024, out
        assert f"secret={objects.secret_value}" in out, out
        assert f"\n{ns}\n" in f"\n{out}", out
        pod = _trainer_pod_spec(ns, first)
        assert pod.spec.service_account_name == objects.sa
        assert pod.metadata.labels["team"] == "vision"
        assert pod.metadata.annotations["example.com/o"] == "ann"
        assert ("tjm-test", "x", "NoSchedule") in {
            (t.key, t.value, t.effect) for t in pod.spec.tolerations or []
        }
        assert [s.name for s in pod.spec.image_pull_secrets or []] == [objects.pull]
        if selector:
            assert (pod.spec.node_selector or {}).get(selector[0]) == selector[1]
        reply, out = kernel.run_text("%trainjob_status", timeout=60)
        assert reply["status"] == "ok", out
        assert f"pvc {objects.pvc} -> /data" in out and "shm 256Mi -> /dev/shm" in out, out
        assert f"Service account: {objects.sa}" in out, out
        reply, out = kernel.run_text("%trainjob_close", timeout=360)
        assert reply["status"] == "ok", out
        reply, out = kernel.run_text(
            f"%trainjob_connect {RUNTIME} --namespace {ns} --timeout {WAIT:g} "
            f"--volume pvc:{objects.pvc}:/data:ro --as second",
            timeout=WAIT + 60,
        )
        assert reply["status"] == "ok", out
        reply, out = kernel.run_text("%%trainjob\ncat /data/stamp.txt\n", timeout=120)
        assert reply["status"] == "ok" and stamp in out, out
        reply, out = kernel.run_text(
            "%%trainjob --no-raise-error\ntouch /data/x 2>&1 || echo read-only\n", timeout=120
        )
        assert "read-only" in out, out
        reply, out = kernel.run_text("%trainjob_close second", timeout=360)
        assert reply["status"] == "ok", out


def _patch_file(tmp_path: Path) -> str:
    path = tmp_path / "bad-patch.yaml"
    path.write_text("spec:\n  containers:\n  - name: node\n    env:\n    - value: no-name\n")
    return str(path)


CASES = {
    "missing-pvc": ({"volumes": ["pvc:{missing}:/data"]}, ["PersistentVolumeClaim", "{missing}"]),
    "missing-sa": ({"service_account": "{missing}"}, ["{missing}", "not found"]),
    "missing-secret": ({"volumes": ["secret:{missing}:/etc/s"]}, ["Secret", "{missing}"]),
    "missing-configmap": ({"env_from": ["configmap:{missing}"]}, ["ConfigMap", "{missing}"]),
    "no-node-matches": (
        {
            "node_selector": {"tjm-test/no-such-pool": "{missing}"},
            "tolerations": ["a=b:NoSchedule"],
        },
        ["no node matches"],
    ),
    "rejected-pod-patch": ({"pod_patch": "{patch}"}, ["--pod-patch", "rejected by the API server"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_user_error_is_one_line_within_seconds(case: str, tmp_path: Path) -> None:
    ns = _namespace()
    missing = f"tjm-missing-{secrets.token_hex(3)}"
    fill = {"missing": missing, "patch": _patch_file(tmp_path)}
    options, needles = CASES[case]

    def filled(value: Any) -> Any:
        if isinstance(value, str):
            return value.format(**fill)
        if isinstance(value, list):
            return [filled(v) for v in value]
        if isinstance(value, dict):
            return {k: filled(v) for k, v in value.items()}
        return value

    if case == "rejected-pod-patch" and not _validates_pod_patches():
        pytest.skip(
            "the cluster's TrainJob schema does not validate runtimePatches pod specs (the "
            "local cluster keeps trainingRuntimeSpec as-is, docs/local-cluster.md)"
        )
    name = f"tjm-err-{secrets.token_hex(3)}"
    started = time.monotonic()
    with pytest.raises(E.TrainJobError) as info:
        connect(
            RUNTIME,
            name=name,
            config_file=KUBECONFIG,
            namespace=ns,
            timeout=WAIT,
            **filled(options),
        )
    took = time.monotonic() - started
    message = str(info.value)
    print(f"USER-ERROR {case} {took:.1f}s: {message}")
    assert "\n" not in message
    for needle in needles:
        assert needle.format(**fill) in message, message
    assert took < ERROR_WITHIN, (took, message)
    assert not _trainjob_left(ns, name)


def test_dry_run_output_applies_unchanged_and_creates_the_same_trainjob(
    objects: Objects, tmp_path: Path
) -> None:
    ns = objects.namespace
    name = f"tjm-dry-{secrets.token_hex(3)}"
    manifest = connect(
        RUNTIME,
        name=name,
        config_file=KUBECONFIG,
        namespace=ns,
        dry_run=True,
        volumes=[f"pvc:{objects.pvc}:/data"],
        shm_size="128Mi",
        labels={"team": "vision"},
        tolerations=["tjm-test=x:NoSchedule"],
    )
    assert not _trainjob_left(ns, name)  # the dry run created nothing
    text = yaml.safe_dump(manifest, sort_keys=False)
    for owned in ("uid:", "resourceVersion:", "creationTimestamp:", "managedFields:", "status:"):
        assert owned not in text, text
    path = tmp_path / "trainjob.yaml"
    path.write_text(text)
    kubectl = shutil.which("kubectl")
    assert kubectl, "the real-cluster suite needs kubectl on PATH"
    co = client.CustomObjectsApi(_user_api())
    try:
        done = subprocess.run(
            [kubectl, "--kubeconfig", KUBECONFIG, "apply", "-f", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        stored = co.get_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", name)
        # what webhooks add on every create (Kueue's empty runtimePatches entry) came back
        stored_spec = dict(stored["spec"])
        if "runtimePatches" in stored_spec:  # Trainer >= 2.2 only
            stored_spec["runtimePatches"] = [
                p
                for p in stored_spec["runtimePatches"] or []
                if (p.get("trainingRuntimeSpec") or {}).get("template") not in ({"spec": {}}, {})
            ]
        assert stored_spec == manifest["spec"], (stored["spec"], manifest["spec"])
        assert stored["metadata"]["labels"] == manifest["metadata"]["labels"]
    finally:
        with contextlib.suppress(client.ApiException):
            co.delete_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", name)


@pytest.mark.skipif(not QUEUE, reason="set TRAINJOB_MAGICS_E2E_QUEUE to a Kueue LocalQueue")
def test_a_queued_session_with_volumes_and_tolerations_works_or_says_which_upgrade() -> None:
    """Kueue <= 0.19 with Trainer 2.3: kubeflow/trainer#3888 and kueue#15161. Either the
    session runs, or it fails at once with one line naming the Kueue upgrade: never a hang."""
    started = time.monotonic()
    try:
        session = connect(
            RUNTIME,
            config_file=KUBECONFIG,
            namespace=QUEUE_NAMESPACE,
            queue=QUEUE,
            timeout=WAIT,
            volumes=["emptydir:/scratch:64Mi"],
            shm_size="64Mi",
            tolerations=["tjm-test=x:NoSchedule"],
        )
    except E.TrainJobError as exc:
        message = str(exc)
        print(f"QUEUED-SHAPED {time.monotonic() - started:.1f}s: {message}")
        assert "Kueue to 0.20" in message and "\n" not in message, message
        assert time.monotonic() - started < 120
        return
    try:
        result = session.execute("ls -d /scratch && df -k /dev/shm | tail -1")
        assert result.ok, result.stderr
        pod = _trainer_pod_spec(session.namespace, session.name)
        assert ("tjm-test", "x", "NoSchedule") in {
            (t.key, t.value, t.effect) for t in pod.spec.tolerations or []
        }
    finally:
        session.close(timeout=300)
