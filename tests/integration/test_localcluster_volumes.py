"""The local cluster serves PersistentVolumeClaims, ConfigMaps, Secrets and ServiceAccounts, and
its kubelet mounts what a pod asks for in the pod's own mount namespace (issue 22).

Real processes and the real kubectl: each pod is a TrainJob's, its volumes and mounts given
through ``runtimePatches`` (Trainer 2.3, the default), and every check runs in the pod with
``kubectl exec``. The errors are the real components' Events, word for word.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.helpers.polling import wait_until
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.core.resources import SERVICE_ACCOUNTS
from trainjob_magics.localcluster.kubelet import mount_namespace

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
NS = "default"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def _mount_namespaces() -> bool:
    """Root, or a user allowed unprivileged user namespaces (what the kubelet needs)."""
    if os.geteuid() == 0:
        return True
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True, check=False)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(
    not _mount_namespaces(),
    reason="missing component: mount namespaces (not root, unprivileged user namespaces off)",
)


@pytest.fixture(scope="module")
def vcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("volumes-cluster")
    with LocalCluster(
        root_dir=root,
        bookmark_interval=0.5,
        node_labels={"pool": "gpu"},
        node_taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
    ) as c:
        yield c


class Kube:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
        self.core = client.CoreV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)

    def runtime_with(self, name: str, container: dict[str, Any]) -> str:
        """A ClusterTrainingRuntime like torch-distributed whose ``node`` container also has
        ``container``'s fields (a runtime carries any pod field; a runtime patch does not)."""
        base = self.co.get_cluster_custom_object(
            GROUP, VERSION, "clustertrainingruntimes", "torch-distributed"
        )
        rt = json.loads(json.dumps(base))
        rt["metadata"] = {"name": name}
        pod = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        pod["spec"]["containers"][0].update(container)
        self.cluster.load_runtime_yaml(json.dumps(rt) + "\n")
        return name

    def create_tj(
        self,
        name: str,
        pod_spec: dict[str, Any],
        command: list[str],
        runtime: str = "torch-distributed",
    ) -> list[str]:
        """A one-node TrainJob whose ``node`` pods get ``pod_spec`` merged in; returns the API
        server's warnings. It tolerates the node's taint unless the pod spec says which
        tolerations it has."""
        pod_spec = {
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            **pod_spec,
        }
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {
                "runtimeRef": {"name": runtime},
                "trainer": {"numNodes": 1, "command": command},
                "runtimePatches": [
                    {
                        "manager": "tests.trainjob-magics/volumes",
                        "trainingRuntimeSpec": {
                            "template": {
                                "spec": {
                                    "replicatedJobs": [
                                        {
                                            "name": "node",
                                            "template": {"spec": {"template": {"spec": pod_spec}}},
                                        }
                                    ]
                                }
                            }
                        },
                    }
                ],
            },
        }
        _, _, headers = self.co.create_namespaced_custom_object_with_http_info(
            GROUP, VERSION, NS, "trainjobs", body
        )
        return [v for k, v in headers.items() if k.lower() == "warning"]

    def delete_tj(self, name: str) -> None:
        self.co.delete_namespaced_custom_object(GROUP, VERSION, NS, "trainjobs", name)
        wait_until(lambda: not self.pods(name), timeout=90)

    def pods(self, job: str) -> list[Any]:
        sel = f"jobset.sigs.k8s.io/jobset-name={job}"
        return self.core.list_namespaced_pod(NS, label_selector=sel).items

    def running_pod(self, job: str) -> Any:
        def check() -> Any:
            pods = [p for p in self.pods(job) if p.status.phase == "Running"]
            return pods[0] if pods else None

        return wait_until(check, timeout=90)

    def events(self, name_prefix: str, reason: str) -> list[Any]:
        return [
            e
            for e in self.core.list_namespaced_event(NS).items
            if e.involved_object.name.startswith(name_prefix) and reason in ("", e.reason)
        ]

    def wait_event(self, name_prefix: str, reason: str) -> Any:
        return wait_until(lambda: (self.events(name_prefix, reason) or [None])[0], timeout=60)


@pytest.fixture
def kube(vcluster: LocalCluster) -> Iterator[Kube]:
    k = Kube(vcluster)
    yield k
    k.api.close()


@pytest.fixture
def kubectl(
    vcluster: LocalCluster, tmp_path: Path
) -> Callable[..., subprocess.CompletedProcess[str]]:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(vcluster.kubeconfig_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--cache-dir", str(home / "cache"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    return run


def sh(kubectl: Callable[..., Any], pod: Any, script: str) -> str:
    r = kubectl("exec", pod.metadata.name, "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    return r.stdout


def pvc(name: str, size: str = "1Gi") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }


# -- objects ---------------------------------------------------------------------------------


def test_objects_served(kube: Kube, unique_name: Callable[[str], str]) -> None:
    """Each namespace has the ServiceAccount ``default``; a claim is Bound to a volume of the
    local provisioner; a Secret's stringData becomes base64 data."""
    assert "default" in {
        s.metadata.name for s in kube.core.list_namespaced_service_account(NS).items
    }
    ns = unique_name("ns")
    kube.core.create_namespace({"metadata": {"name": ns}})
    wait_until(lambda: kube.core.list_namespaced_service_account(ns).items, timeout=60)
    name = unique_name("claim")
    kube.core.create_namespaced_persistent_volume_claim(NS, pvc(name, "2Gi"))
    claim = wait_until(
        lambda: (
            (c := kube.core.read_namespaced_persistent_volume_claim(name, NS)).status.phase
            == "Bound"
            and c
        ),
        timeout=60,
    )
    assert claim.spec.volume_name.startswith("pvc-")
    assert claim.spec.storage_class_name == "standard"
    assert claim.status.capacity == {"storage": "2Gi"}
    pv = kube.core.read_persistent_volume(claim.spec.volume_name)
    assert pv.status.phase == "Bound"
    assert pv.spec.claim_ref.name == name
    assert Path(pv.spec.host_path.path).is_dir()
    # deleting the claim deletes its volume and data (reclaim policy Delete)
    kube.core.delete_namespaced_persistent_volume_claim(name, NS)
    wait_until(lambda: not Path(pv.spec.host_path.path).exists(), timeout=60)
    with pytest.raises(ApiException) as info:
        kube.core.create_namespaced_persistent_volume_claim(
            NS, {"metadata": {"name": "x"}, "spec": {}}
        )
    assert info.value.status == 422
    assert "spec.accessModes: Required value: at least 1 access mode is required" in info.value.body
    secret = unique_name("secret")
    kube.core.create_namespaced_secret(NS, {"metadata": {"name": secret}, "stringData": {"k": "v"}})
    got = kube.core.read_namespaced_secret(secret, NS)
    assert got.data == {"k": base64.b64encode(b"v").decode()} and got.type == "Opaque"


# -- mounts ----------------------------------------------------------------------------------


def test_pvc_outlives_the_pod(
    kube: Kube, kubectl: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    """A file written on a claim in one session is read in the next; readOnly is honoured;
    nothing appears on this machine at the mount path."""
    claim = unique_name("data")
    kube.core.create_namespaced_persistent_volume_claim(NS, pvc(claim))
    spec = {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        "containers": [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
    }
    first = unique_name("pvc1")
    kube.create_tj(first, spec, ["sleep", "3600"])
    pod = kube.running_pod(first)
    assert sh(kubectl, pod, "echo written in session 1 > /data/note && cat /data/note") == (
        "written in session 1\n"
    )
    assert not Path("/data/note").exists()
    kube.delete_tj(first)
    ro = json.loads(json.dumps(spec))
    ro["containers"][0]["volumeMounts"][0]["readOnly"] = True
    second = unique_name("pvc2")
    kube.create_tj(second, ro, ["sleep", "3600"])
    pod = kube.running_pod(second)
    assert sh(kubectl, pod, "cat /data/note") == "written in session 1\n"
    r = kubectl("exec", pod.metadata.name, "--", "sh", "-c", "touch /data/other")
    assert r.returncode != 0 and "Read-only file system" in r.stderr
    # PVC protection: deleted while a pod uses it, the claim stays Terminating, data intact
    kube.core.delete_namespaced_persistent_volume_claim(claim, NS)
    got = kube.core.read_namespaced_persistent_volume_claim(claim, NS)
    assert got.metadata.deletion_timestamp and "kubernetes.io/pvc-protection" in (
        got.metadata.finalizers
    )
    assert sh(kubectl, pod, "cat /data/note") == "written in session 1\n"
    kube.delete_tj(second)

    def gone() -> bool:
        try:
            kube.core.read_namespaced_persistent_volume_claim(claim, NS)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_until(gone, timeout=90)


def test_shm_size_and_empty_dir(
    kube: Kube, kubectl: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    """``emptyDir`` of medium Memory at /dev/shm: ``df`` shows the size asked for; a plain
    emptyDir is a directory of the pod's."""
    name = unique_name("shm")
    spec = {
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "300Mi"}},
            {"name": "scratch", "emptyDir": {}},
        ],
        "containers": [
            {
                "name": "node",
                "volumeMounts": [
                    {"name": "dshm", "mountPath": "/dev/shm"},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            }
        ],
    }
    kube.create_tj(name, spec, ["sleep", "3600"])
    pod = kube.running_pod(name)
    out = sh(kubectl, pod, "df -k /dev/shm | tail -1; touch /scratch/x && echo ok")
    fields = out.split()
    assert fields[0] == "tmpfs" and int(fields[1]) == 300 * 1024, out
    assert out.endswith("ok\n")
    kube.delete_tj(name)


def test_configmap_and_secret_files(
    kube: Kube, kubectl: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    """Keys as files (Secret data decoded), ``items`` and modes as the kubelet writes them."""
    cm, secret = unique_name("cm"), unique_name("sec")
    kube.core.create_namespaced_config_map(
        NS, {"metadata": {"name": cm}, "data": {"app.yaml": "lr: 0.1\n", "other": "x"}}
    )
    kube.core.create_namespaced_secret(
        NS,
        {
            "metadata": {"name": secret},
            "data": {"token": base64.b64encode(b"s3cr3t").decode()},
        },
    )
    name = unique_name("files")
    spec = {
        "volumes": [
            {
                "name": "conf",
                "configMap": {"name": cm, "items": [{"key": "app.yaml", "path": "cfg/app.yaml"}]},
            },
            {"name": "creds", "secret": {"secretName": secret, "defaultMode": 0o400}},
        ],
        "containers": [
            {
                "name": "node",
                "volumeMounts": [
                    {"name": "conf", "mountPath": "/etc/app"},
                    {"name": "creds", "mountPath": "/etc/creds"},
                ],
            }
        ],
    }
    kube.create_tj(name, spec, ["sleep", "3600"])
    pod = kube.running_pod(name)
    out = sh(
        kubectl,
        pod,
        "cat /etc/app/cfg/app.yaml; ls /etc/app; cat /etc/creds/token; echo; "
        "stat -L -c %a /etc/creds/token /etc/app/cfg/app.yaml; readlink /etc/creds/token",
    )
    assert out.splitlines() == ["lr: 0.1", "cfg", "s3cr3t", "400", "644", "..data/token"]
    r = kubectl("exec", pod.metadata.name, "--", "sh", "-c", "echo > /etc/creds/new")
    assert r.returncode != 0  # mounted read-only, as the kubelet mounts them
    # a changed ConfigMap reaches the running pod's files (the kubelet's sync)
    kube.core.patch_namespaced_config_map(cm, NS, {"data": {"app.yaml": "lr: 0.2\n"}})
    wait_until(lambda: sh(kubectl, pod, "cat /etc/app/cfg/app.yaml") == "lr: 0.2\n", timeout=60)
    kube.delete_tj(name)


def test_service_account_token(
    kube: Kube, kubectl: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    """A pod of a service account has its token, the CA and the namespace at the well-known
    path; the token is accepted by the API server while the pod lives, refused after."""
    sa = unique_name("sa")
    kube.core.create_namespaced_service_account(NS, {"metadata": {"name": sa}})
    name = unique_name("tok")
    kube.create_tj(name, {"serviceAccountName": sa}, ["sleep", "3600"])
    pod = kube.running_pod(name)
    assert pod.spec.service_account_name == sa
    assert any(v.name.startswith("kube-api-access-") for v in pod.spec.volumes)
    out = sh(kubectl, pod, f"ls {TOKEN_DIR}; cat {TOKEN_DIR}/namespace")
    assert out.splitlines() == ["ca.crt", "namespace", "token", NS]
    token = sh(kubectl, pod, f"cat {TOKEN_DIR}/token").strip()
    assert sh(kubectl, pod, f"cat {TOKEN_DIR}/ca.crt").encode() == kube.cluster.ca_pem
    check = (
        "import os, ssl, urllib.request as u; "
        f"d = '{TOKEN_DIR}'; "
        "url = 'https://%s:%s/api/v1/namespaces/default/pods' % ("
        "os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']); "
        "req = u.Request(url, headers={'Authorization': 'Bearer ' + open(d + '/token').read()}); "
        "ctx = ssl.create_default_context(cafile=d + '/ca.crt'); "
        "print(u.urlopen(req, context=ctx).status)"
    )
    r = kubectl("exec", pod.metadata.name, "--", "python3", "-c", check)
    assert r.returncode == 0 and r.stdout.strip() == "200", r.stderr
    # on this machine the token lives in the pod's kubelet directory, for this user only
    state = kube.cluster.pod_dir(NS, pod.metadata.name).parent / f".{pod.metadata.name}.kubelet"
    assert state.stat().st_mode & 0o777 == 0o700
    kube.delete_tj(name)
    refused = client.Configuration()
    refused.host = kube.api.configuration.host
    refused.ssl_ca_cert = kube.api.configuration.ssl_ca_cert
    refused.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(refused) as api, pytest.raises(ApiException) as info:
        client.CoreV1Api(api).list_namespaced_pod(NS)
    assert info.value.status == 401


def test_env_from_secret_and_configmap(
    kube: Kube, kubectl: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    """``envFrom`` (from the runtime: Trainer's ContainerPatch has no envFrom) and
    ``valueFrom`` (from a runtime patch) resolve; explicit env wins over envFrom."""
    secret, cm = unique_name("envsec"), unique_name("envcm")
    kube.core.create_namespaced_secret(
        NS, {"metadata": {"name": secret}, "stringData": {"API_KEY": "k-123", "LR": "from-secret"}}
    )
    kube.core.create_namespaced_config_map(NS, {"metadata": {"name": cm}, "data": {"lr": "0.5"}})
    runtime = kube.runtime_with(
        unique_name("rt-envfrom"), {"envFrom": [{"secretRef": {"name": secret}}]}
    )
    name = unique_name("env")
    spec = {
        "containers": [
            {
                "name": "node",
                "env": [
                    {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": cm, "key": "lr"}}},
                    {
                        "name": "KEY",
                        "valueFrom": {"secretKeyRef": {"name": secret, "key": "API_KEY"}},
                    },
                ],
            }
        ]
    }
    kube.create_tj(name, spec, ["sleep", "3600"], runtime=runtime)
    pod = kube.running_pod(name)
    assert sh(kubectl, pod, "echo $LR $KEY $API_KEY") == "0.5 k-123 k-123\n"
    kube.delete_tj(name)


def test_runtime_patch_keeps_only_what_the_crd_has(
    kube: Kube, unique_name: Callable[[str], str]
) -> None:
    """The API server prunes what Trainer 2.3's ContainerPatch lacks (envFrom, command), with
    its warning, as the real CRD does."""
    name = unique_name("pruned")
    spec = {"containers": [{"name": "node", "envFrom": [{"secretRef": {"name": "s"}}]}]}
    warnings = kube.create_tj(name, spec, ["sleep", "3600"])
    field = (
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template."
        "spec.template.spec.containers[0].envFrom"
    )
    assert any(f'unknown field \\"{field}\\"' in w for w in warnings), warnings
    pod = kube.running_pod(name)
    assert pod.spec.containers[0].env_from is None
    kube.delete_tj(name)


def test_pods_without_volumes_are_unaffected(
    kube: Kube, kubectl: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    """A pod that mounts nothing but its default token runs in this machine's mount namespace,
    exactly as before."""
    name = unique_name("plain")
    kube.create_tj(name, {}, ["sleep", "3600"])
    pod = kube.running_pod(name)
    assert sh(kubectl, pod, "readlink /proc/self/ns/mnt").strip() == os.readlink(
        "/proc/self/ns/mnt"
    )
    sandbox = kube.cluster.controller.sandbox(NS, pod.metadata.name)
    assert sandbox is not None and sandbox.mount_ns is None
    kube.delete_tj(name)


# -- errors: the real components' Events -----------------------------------------------------


def _pending_reason(kube: Kube, job: str) -> tuple[str, str]:
    def check() -> tuple[str, str] | None:
        for p in kube.pods(job):
            for c in p.status.container_statuses or []:
                if c.state.waiting and c.state.waiting.reason not in ("ContainerCreating",):
                    return c.state.waiting.reason, c.state.waiting.message or ""
        return None

    return wait_until(check, timeout=60)


def test_missing_claim_fails_scheduling(kube: Kube, unique_name: Callable[[str], str]) -> None:
    name = unique_name("noclaim")
    spec = {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "nope"}}],
        "containers": [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
    }
    kube.create_tj(name, spec, ["sleep", "3600"])
    event = kube.wait_event(name, "FailedScheduling")
    # kube-scheduler 1.36.3 word for word (checked on the real stack): the second "not found"
    # is the DynamicResources PostFilter's
    assert event.message == (
        '0/1 nodes are available: persistentvolumeclaim "nope" not found. not found'
    )
    assert event.source.component == "default-scheduler" and event.type == "Warning"
    (pod,) = kube.pods(name)
    assert pod.status.phase == "Pending"
    # the claim appears: the pod is scheduled and starts
    kube.core.create_namespaced_persistent_volume_claim(NS, pvc("nope"))
    kube.running_pod(name)
    kube.delete_tj(name)
    kube.core.delete_namespaced_persistent_volume_claim("nope", NS)


def test_missing_service_account_fails_pod_creation(
    kube: Kube, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("nosa")
    kube.create_tj(name, {"serviceAccountName": "ghost"}, ["sleep", "3600"])
    event = kube.wait_event(f"{name}-node-0", "FailedCreate")
    assert event.message == (
        f'Error creating: pods "{name}-node-0-0-" is forbidden: error looking up service '
        f'account {NS}/ghost: serviceaccount "ghost" not found'
    )
    assert event.involved_object.kind == "Job" and event.involved_object.name == f"{name}-node-0"
    assert event.source.component == "job-controller" and event.type == "Warning"
    assert kube.pods(name) == []
    kube.core.create_namespaced_service_account(NS, {"metadata": {"name": "ghost"}})
    kube.running_pod(name)
    kube.delete_tj(name)


@pytest.mark.parametrize("kind", ["secret", "configMap"])
def test_missing_volume_source_fails_mount(
    kube: Kube, unique_name: Callable[[str], str], kind: str
) -> None:
    name = unique_name("nomount")
    source = {"secretName": "absent"} if kind == "secret" else {"name": "absent"}
    spec = {
        "volumes": [{"name": "creds", kind: source}],
        "containers": [{"name": "node", "volumeMounts": [{"name": "creds", "mountPath": "/c"}]}],
    }
    kube.create_tj(name, spec, ["sleep", "3600"])
    event = kube.wait_event(name, "FailedMount")
    what = "secret" if kind == "secret" else "configmap"
    assert event.message == (
        f'MountVolume.SetUp failed for volume "creds" : {what} "absent" not found'
    )
    assert event.source.component == "kubelet" and event.type == "Warning"
    (pod,) = kube.pods(name)
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    kube.delete_tj(name)


def test_missing_env_from_source(kube: Kube, unique_name: Callable[[str], str]) -> None:
    runtime = kube.runtime_with(
        unique_name("rt-absent"), {"envFrom": [{"secretRef": {"name": "absent"}}]}
    )
    name = unique_name("noenv")
    kube.create_tj(name, {}, ["sleep", "3600"], runtime=runtime)
    assert _pending_reason(kube, name) == (
        "CreateContainerConfigError",
        'secret "absent" not found',
    )
    event = kube.wait_event(name, "Failed")
    assert event.message == 'Error: secret "absent" not found'
    assert event.source.component == "kubelet" and event.type == "Warning"
    kube.core.create_namespaced_secret(
        NS, {"metadata": {"name": "absent"}, "stringData": {"A": "1"}}
    )
    kube.running_pod(name)
    kube.delete_tj(name)
    kube.core.delete_namespaced_secret("absent", NS)


def test_missing_secret_key(kube: Kube, unique_name: Callable[[str], str]) -> None:
    secret = unique_name("keyless")
    kube.core.create_namespaced_secret(NS, {"metadata": {"name": secret}, "stringData": {"a": "1"}})
    name = unique_name("nokey")
    spec = {
        "containers": [
            {
                "name": "node",
                "env": [{"name": "B", "valueFrom": {"secretKeyRef": {"name": secret, "key": "b"}}}],
            }
        ]
    }
    kube.create_tj(name, spec, ["sleep", "3600"])
    assert _pending_reason(kube, name) == (
        "CreateContainerConfigError",
        f"couldn't find key b in Secret {NS}/{secret}",
    )
    kube.delete_tj(name)


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        ({"nodeSelector": {"pool": "cpu"}}, "1 node(s) didn't match Pod's node affinity/selector"),
        ({"tolerations": []}, "1 node(s) had untolerated taint(s)"),
    ],
)
def test_placement_that_matches_no_node(
    kube: Kube, unique_name: Callable[[str], str], placement: dict[str, Any], message: str
) -> None:
    name = unique_name("place")
    kube.create_tj(name, placement, ["sleep", "3600"])
    event = kube.wait_event(name, "FailedScheduling")
    assert event.message == (
        f"0/1 nodes are available: {message}. no new claims to deallocate, preemption: 0/1 "
        "nodes are available: 1 Preemption is not helpful for scheduling."
    )
    (pod,) = kube.pods(name)
    assert pod.status.phase == "Pending"
    kube.delete_tj(name)


def test_placement_that_matches(kube: Kube, unique_name: Callable[[str], str]) -> None:
    """The node's labels, a toleration of its taint and image pull secrets on the pod spec."""
    name = unique_name("placed")
    kube.create_tj(
        name,
        {
            "nodeSelector": {"pool": "gpu", "kubernetes.io/os": "linux"},
            "imagePullSecrets": [{"name": "regcred"}],
        },
        ["sleep", "3600"],
    )
    pod = kube.running_pod(name)
    assert pod.spec.node_selector == {"pool": "gpu", "kubernetes.io/os": "linux"}
    assert [s.name for s in pod.spec.image_pull_secrets] == ["regcred"]
    kube.delete_tj(name)


def test_mpi_ranks_see_their_pods_mounts(
    kube: Kube, kubectl: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    """mpirun on the launcher starts a rank in each node pod inside that pod's namespace: each
    rank sees the claim the pods share and its own pod's emptyDir."""
    claim = unique_name("mpidata")
    kube.core.create_namespaced_persistent_volume_claim(NS, pvc(claim))
    pod_spec = {
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
            {"name": "scratch", "emptyDir": {}},
        ],
        "containers": [
            {
                "name": "node",
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            }
        ],
    }
    name = unique_name("mpi")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "mpi-interactive"},
            "trainer": {"numNodes": 2},
            "runtimePatches": [
                {
                    "manager": "tests.trainjob-magics/volumes",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": rjob,
                                        "template": {"spec": {"template": {"spec": pod_spec}}},
                                    }
                                    for rjob in ("launcher", "node")
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }
    kube.co.create_namespaced_custom_object(GROUP, VERSION, NS, "trainjobs", body)
    try:
        wait_until(
            lambda: len([p for p in kube.pods(name) if p.status.phase == "Running"]) == 2,
            timeout=90,
        )
    except AssertionError:
        states = [(p.metadata.name, p.status.phase) for p in kube.pods(name)]
        events = [(e.reason, e.message) for e in kube.events(name, "")]
        raise AssertionError(f"pods {states}, events {events}") from None
    launcher = next(
        p
        for p in kube.pods(name)
        if p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "launcher"
    )
    sh(kubectl, launcher, "echo shared > /data/f")
    out = sh(
        kubectl,
        launcher,
        "mpirun -np 2 sh -c 'echo $HOSTNAME > /scratch/me; echo $(cat /data/f) $(cat /scratch/me)'",
    )
    lines = sorted(out.split("\n")[:-1])
    assert len(lines) == 2 and all(line.startswith("shared ") for line in lines), out
    assert {line.split()[1] for line in lines} == {f"{name}-launcher-0-0", f"{name}-node-0-0"}
    kube.delete_tj(name)


def test_without_mount_namespaces_a_pod_with_volumes_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique_name: Callable[[str], str]
) -> None:
    """Where the kernel refuses both a mount namespace and a user namespace (a user who is not
    root, unprivileged user namespaces off: not producible on a machine where either works),
    the holder's report is stood in for; a pod with volumes then waits with one FailedMount
    that says what to change, and a pod without volumes runs as before."""
    holder = tmp_path / "refusing_holder.py"
    holder.write_text(
        "print('error: unshare: Operation not permitted (mount namespace), "
        "Operation not permitted (user namespace)', flush=True)\n"
    )
    monkeypatch.setattr(mount_namespace, "HOLDER", holder)
    with LocalCluster(root_dir=tmp_path / "root", bookmark_interval=0.5) as c:
        kube = Kube(c)
        name = unique_name("nons")
        spec = {
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [
                {"name": "node", "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}
            ],
        }
        kube.create_tj(name, spec, ["sleep", "3600"])
        event = kube.wait_event(name, "FailedMount")
        assert event.message.startswith(
            'MountVolume.SetUp failed for volume "scratch" : the local cluster needs mount '
            "namespaces to mount a pod's volumes: unshare: Operation not permitted"
        )
        assert "run it as root, or allow unprivileged user namespaces" in event.message
        (pod,) = kube.pods(name)
        assert pod.status.phase == "Pending"
        plain = unique_name("plain")
        kube.create_tj(plain, {}, ["sleep", "3600"])
        kube.running_pod(plain)
        # a named service account alone asks for no volume: the pod runs, without the token
        c.store.create(SERVICE_ACCOUNTS, {"metadata": {"name": "runner"}}, NS)
        named = unique_name("named")
        kube.create_tj(named, {"serviceAccountName": "runner"}, ["sleep", "3600"])
        assert kube.running_pod(named).spec.service_account_name == "runner"
        kube.api.close()


def test_kubectl_creates_and_lists_them(
    kube: Kube, kubectl: Callable[..., Any], unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """``kubectl create secret|configmap|serviceaccount`` (protobuf bodies) and ``kubectl get``
    with the columns of kube-apiserver's printers."""
    secret, cm, sa, claim = (unique_name(p) for p in ("ksec", "kcm", "ksa", "kpvc"))
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)))
    for args in (
        ("create", "secret", "generic", secret, "--from-literal=user=me", f"--from-file=b={blob}"),
        ("create", "configmap", cm, "--from-literal=lr=0.1", f"--from-file=b={blob}"),
        ("create", "serviceaccount", sa),
    ):
        r = kubectl(*args)
        assert r.returncode == 0, r.stderr
    got = kube.core.read_namespaced_secret(secret, NS)
    assert base64.b64decode(got.data["b"]) == bytes(range(256)) and got.type == "Opaque"
    got_cm = kube.core.read_namespaced_config_map(cm, NS)
    assert got_cm.data == {"lr": "0.1"} and base64.b64decode(got_cm.binary_data["b"]) == bytes(
        range(256)
    )
    kube.core.create_namespaced_persistent_volume_claim(NS, pvc(claim, "5Gi"))
    wait_until(
        lambda: (
            kube.core.read_namespaced_persistent_volume_claim(claim, NS).status.phase == "Bound"
        ),
        timeout=60,
    )
    r = kubectl("get", "pvc", claim)
    header, row = r.stdout.splitlines()
    assert header.split() == [
        "NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS",
        "VOLUMEATTRIBUTESCLASS", "AGE",
    ]  # fmt: skip
    assert row.split()[:7] == [claim, "Bound", row.split()[2], "5Gi", "RWO", "standard", "<unset>"]
    r = kubectl("get", "secret", secret)
    assert r.stdout.splitlines()[1].split()[:3] == [secret, "Opaque", "2"]
    kube.core.delete_namespaced_persistent_volume_claim(claim, NS)


def test_working_dir_on_a_volume(
    kube: Kube, kubectl: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    """A container whose workingDir is a mounted volume starts there, and so do its execs."""
    runtime = kube.runtime_with(unique_name("rt-wd"), {"workingDir": "/work"})
    name = unique_name("wd")
    spec = {
        "volumes": [{"name": "w", "emptyDir": {}}],
        "containers": [{"name": "node", "volumeMounts": [{"name": "w", "mountPath": "/work"}]}],
    }
    kube.create_tj(name, spec, ["sh", "-c", "pwd > started-in; sleep 3600"], runtime=runtime)
    pod = kube.running_pod(name)
    script = "while [ ! -s /work/started-in ]; do sleep 0.05; done; pwd; cat /work/started-in"
    assert sh(kubectl, pod, script) == "/work\n/work\n"
    kube.delete_tj(name)
