"""The local cluster as each Kubeflow Trainer release behaves
(``LocalCluster(trainer_version=...)``), over HTTPS with the stock client, and the engine on top.

- v2.3: the ``<job>-runtime-snapshot`` ConfigMap and reconciling from it; resourcesPerNode
  merged into the runtime's resources (before v2.3: replaced);
- v2.0/v2.1: ``podSpecOverrides`` / ``podTemplateOverrides`` reach the pods (Kueue 0.14 style
  with ``kueue.x-k8s.io/trainjob-override-idx``), and Trainer's webhook checks them;
- v2.2+: ``runtimePatches`` reach the pods;
- the served TrainJob schema, the TrainJobs, JobSets and snapshots the cluster serves, each
  against the real CRDs of its release (``../shared/k8s``);
- A6: the engine finds the trainer pod from the JobSet or the snapshot after the runtime
  changed, and attaches to a v2.0 job.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.crd_schema import problems
from tests.helpers.k8s_data import require_k8s_data
from tests.helpers.polling import wait_until
from trainjob_magics import attach, connect
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.controller.runtime_snapshot import typed_runtime
from trainjob_magics.localcluster.core.resources import SERVICE_ACCOUNTS

pytestmark = pytest.mark.timeout(120)

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
RELEASE = {
    "2.0": "trainer-v2.0.1",
    "2.1": "trainer-v2.1.0",
    "2.2": "trainer-v2.2.1",
    "2.3": "trainer-v2.3.0",
}


class Kube:
    def __init__(self, cluster: LocalCluster, kubeconfig: str | None = None) -> None:
        self.cluster = cluster
        self.api = config.new_client_from_config(kubeconfig or str(cluster.kubeconfig_path))
        self.core = client.CoreV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)

    def create_tj(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", body)

    def get_tj(self, name: str) -> dict[str, Any]:
        return self.co.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", name)

    def patch_tj(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.co.patch_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", name, patch
        )

    def delete_tj(self, name: str) -> None:
        self.co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", name)

    def jobset(self, name: str) -> dict[str, Any]:
        return self.co.get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", name
        )

    def runtime(self, name: str) -> dict[str, Any]:
        return self.co.get_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", name)

    def pods(self, job: str) -> list[Any]:
        items = self.core.list_namespaced_pod("default", label_selector=f"{JOBSET_LABEL}={job}")
        return [p for p in items.items if not p.metadata.deletion_timestamp]

    def running(self, job: str, count: int) -> list[Any]:
        def check() -> list[Any] | None:
            pods = self.pods(job)
            if len(pods) == count and all(p.status.phase == "Running" for p in pods):
                return sorted(pods, key=lambda p: p.metadata.name)
            return None

        return wait_until(check, timeout=30)

    def snapshot(self, job: str) -> Any:
        return self.core.read_namespaced_config_map(f"{job}-runtime-snapshot", "default")

    def events(self, job: str) -> list[Any]:
        return self.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={job}"
        ).items


@pytest.fixture(scope="module")
def clusters() -> Iterator[Callable[[str], LocalCluster]]:
    """One local cluster per Trainer version, started when a test first asks for it."""
    started: dict[str, LocalCluster] = {}

    def get(version: str) -> LocalCluster:
        if version not in started:
            # the node is in the pool the overrides select, and their service account exists
            started[version] = LocalCluster(
                trainer_version=version,
                bookmark_interval=0.5,
                node_labels={"cloud.example.com/pool": "gpu"},
            ).start()
            started[version].store.create(
                SERVICE_ACCOUNTS, {"metadata": {"name": "trainer"}}, "default"
            )
        return started[version]

    yield get
    for c in started.values():
        c.stop()


@pytest.fixture
def kube(clusters: Callable[[str], LocalCluster]) -> Callable[[str], Kube]:
    made: list[Kube] = []

    def get(version: str) -> Kube:
        made.append(Kube(clusters(version)))
        return made[-1]

    yield get
    for k in made:
        k.api.close()


def trainjob(name: str, runtime: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": runtime}, **spec},
    }


def runtime_yaml(
    name: str,
    *,
    env: str = "v1",
    resources: dict[str, Any] | None = None,
    ancestor: str = "node",
    extra_rjob: bool = False,
) -> str:
    """A torch-like ClusterTrainingRuntime: ``node`` (and a ``sidecar`` replicated job), the
    ancestor label on ``ancestor``, env WHICH=``env`` in every container."""

    def rjob(rname: str) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "node",
            "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
            "command": ["sleep", "infinity"],
            "env": [{"name": "WHICH", "value": env}],
        }
        if resources is not None:
            container["resources"] = resources
        template: dict[str, Any] = {"spec": {"template": {"spec": {"containers": [container]}}}}
        if rname == ancestor:
            template["metadata"] = {"labels": {ANCESTOR: "trainer"}}
        return {"name": rname, "template": template}

    rjobs = [rjob("node")] + ([rjob("sidecar")] if extra_rjob else [])
    return json.dumps(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
            "spec": {
                "mlPolicy": {"numNodes": 1, "torch": {}},
                "template": {"spec": {"replicatedJobs": rjobs}},
            },
        }
    )


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


# --- v2.3 runtime snapshot ------------------------------------------------------------------


def test_v23_snapshot_configmap(
    kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """pkg/runtime/core/snapshot.go createRuntimeSnapshot: name, key, owner, YAML of the
    typed runtime; deleted with its TrainJob."""
    k = kube("2.3")
    rt, name = unique_name("rt"), unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt))
    created = k.create_tj(trainjob(name, rt))
    k.running(name, 1)
    cm = k.snapshot(name)
    assert cm.metadata.name == f"{name}-runtime-snapshot"
    [owner] = cm.metadata.owner_references
    assert (owner.api_version, owner.kind, owner.name, owner.uid) == (
        f"{GROUP}/{VERSION}",
        "TrainJob",
        name,
        created["metadata"]["uid"],
    )
    assert owner.controller is True and owner.block_owner_deletion is True
    assert [m.manager for m in cm.metadata.managed_fields or []] == ["trainer"]
    assert list(cm.data) == ["runtime"]
    text = cm.data["runtime"]
    live = k.runtime(rt)
    assert yaml.safe_load(text) == typed_runtime(live)
    top = [line.split(":")[0] for line in text.splitlines() if line and line[0] != " "]
    assert top == ["apiVersion", "kind", "metadata", "spec"]  # sorted, as sigs.k8s.io/yaml
    assert "  template:\n    metadata: {}\n    spec:\n" in text  # a Go struct is never omitted
    k.delete_tj(name)
    wait_until(
        lambda: all(
            c.metadata.name != f"{name}-runtime-snapshot"
            for c in k.core.list_namespaced_config_map("default").items
        )
    )


@pytest.mark.parametrize(("version", "seen"), [("2.3", "v1"), ("2.2", "v2"), ("2.0", "v2")])
def test_runtime_change_while_queued(
    version: str, seen: str, kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """A runtime changed while the job is suspended: v2.3 builds from its snapshot (the
    runtime as at the first reconcile); earlier versions rebuild from the live runtime."""
    k = kube(version)
    rt, name = unique_name("rt"), unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt, env="v1"))
    k.create_tj(trainjob(name, rt, suspend=True))
    wait_until(lambda: k.jobset(name))
    k.cluster.load_runtime_yaml(runtime_yaml(rt, env="v2"))
    k.patch_tj(name, {"spec": {"suspend": False}})
    [pod] = k.running(name, 1)
    assert env_of(pod)["WHICH"] == seen
    if version == "2.3":
        assert yaml.safe_load(k.snapshot(name).data["runtime"])["metadata"]["name"] == rt
    else:
        with pytest.raises(ApiException) as info:
            k.snapshot(name)
        assert info.value.status == 404


def test_v23_deleted_runtime_and_broken_snapshot(
    kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """With its snapshot a v2.3 job resumes although the runtime is gone; a snapshot that is
    not the job's fails the reconcile with Trainer's Event."""
    k = kube("2.3")
    rt, name = unique_name("rt"), unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt))
    k.create_tj(trainjob(name, rt, suspend=True))
    wait_until(lambda: k.snapshot(name))
    k.co.delete_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", rt)
    k.patch_tj(name, {"spec": {"suspend": False}})
    k.running(name, 1)
    # A snapshot ConfigMap owned by something else: getRuntimeSnapshot refuses it.
    other = unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt))
    k.core.create_namespaced_config_map(
        "default",
        {"metadata": {"name": f"{other}-runtime-snapshot"}, "data": {"runtime": "{}"}},
    )
    k.create_tj(trainjob(other, rt))
    event = wait_until(
        lambda: [e for e in k.events(other) if e.reason == "TrainJobResourcesCreationFailed"]
    )[0]
    assert event.type == "Warning"
    assert event.message == (
        "TrainJob resources reconciliation failed: getting runtime snapshot: invalid runtime "
        "snapshot: a snapshot configmap exists but is owned by another object"
    )
    assert k.pods(other) == []


def test_v22_deleted_runtime_keeps_the_job_suspended(
    kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """Before v2.3 a suspended job rebuilds from the live runtime: without it, no resume."""
    k = kube("2.2")
    rt, name = unique_name("rt"), unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt))
    k.create_tj(trainjob(name, rt, suspend=True))
    wait_until(lambda: k.jobset(name))
    k.co.delete_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", rt)
    k.patch_tj(name, {"spec": {"suspend": False}})
    event = wait_until(
        lambda: [e for e in k.events(name) if e.reason == "TrainJobResourcesCreationFailed"]
    )[0]
    assert event.message == (
        "TrainJob resources reconciliation failed: not found ClusterTrainingRuntime specified "
        f'in TrainJob: clustertrainingruntimes.trainer.kubeflow.org "{rt}" not found'
    )
    assert k.jobset(name)["spec"]["suspend"] is True
    assert k.pods(name) == []


# --- resourcesPerNode ----------------------------------------------------------------------

RUNTIME_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2"}}
JOB_RESOURCES = {"requests": {"cpu": "3"}, "limits": {"nvidia.com/gpu": 1}}


@pytest.mark.parametrize(
    ("version", "want"),
    [
        (
            "2.3",
            {
                "requests": {"cpu": "3", "memory": "1Gi"},
                "limits": {"cpu": "2", "nvidia.com/gpu": "1"},
            },
        ),
        ("2.2", {"requests": {"cpu": "3"}, "limits": {"nvidia.com/gpu": "1"}}),
        ("2.0", {"requests": {"cpu": "3"}, "limits": {"nvidia.com/gpu": "1"}}),
    ],
)
def test_resources_per_node(
    version: str,
    want: dict[str, Any],
    kube: Callable[[str], Kube],
    unique_name: Callable[[str], str],
) -> None:
    """v2.3 merges resourcesPerNode into the runtime's resources (PR 3602), earlier versions
    replace them (builder.go)."""
    k = kube(version)
    rt, name = unique_name("rt"), unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt, resources=RUNTIME_RESOURCES))
    k.create_tj(trainjob(name, rt, trainer={"resourcesPerNode": JOB_RESOURCES}))
    [pod] = k.running(name, 1)
    res = pod.spec.containers[0].resources
    got = {"requests": res.requests, "limits": res.limits}
    assert {key: {r: str(q) for r, q in v.items()} for key, v in got.items()} == want
    js = k.jobset(name)
    container = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert {
        key: {r: str(q) for r, q in v.items()} for key, v in container["resources"].items()
    } == want


# --- v2.0/v2.1 overrides, v2.2+ runtime patches ----------------------------------------------

OVERRIDE_SPEC = {
    "nodeSelector": {"cloud.example.com/pool": "gpu"},
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "serviceAccountName": "trainer",
    "volumes": [{"name": "data", "emptyDir": {}}],
    "containers": [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
}


def _check_override_applied(pod: Any) -> None:
    assert pod.spec.node_selector == {"cloud.example.com/pool": "gpu"}
    assert [(t.key, t.operator, t.effect) for t in pod.spec.tolerations] == [
        ("gpu", "Exists", "NoSchedule")
    ]
    assert pod.spec.service_account_name == "trainer"
    # and the service account token the ServiceAccount admission plugin adds
    assert [v.name[:16] for v in pod.spec.volumes] == ["data", "kube-api-access-"]
    mounts = [(m.name[:16], m.mount_path) for m in pod.spec.containers[0].volume_mounts]
    assert mounts == [
        ("data", "/data"),
        ("kube-api-access-", "/var/run/secrets/kubernetes.io/serviceaccount"),
    ]
    assert env_of(pod)["WHICH"] == "v1"  # the runtime's container is merged, not replaced


def test_v20_pod_spec_overrides(
    kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """mergePodSpecOverrides (v2.0.1): the override is strategic-merged into each targeted pod
    spec; runtimePatches do not exist (pruned)."""
    k = kube("2.0")
    rt, name = unique_name("rt"), unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt, extra_rjob=True))
    override = {"targetJobs": [{"name": "node"}], **OVERRIDE_SPEC}
    created = k.create_tj(
        trainjob(name, rt, podSpecOverrides=[override], runtimePatches=[{"manager": "x/y"}])
    )
    assert "runtimePatches" not in created["spec"]
    pods = {p.metadata.labels[RJOB_LABEL]: p for p in k.running(name, 2)}
    _check_override_applied(pods["node"])
    assert pods["sidecar"].spec.node_selector is None


def test_v20_kueue_014_style_overrides(
    kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """Kueue 0.14 admits a TrainJob by appending podSpecOverrides and the override-idx
    annotation while it is suspended, then unsuspends (kueue v0.14.0
    pkg/controller/jobs/trainjob/trainjob_controller.go RunWithPodSetsInfo)."""
    k = kube("2.0")
    rt, name = unique_name("rt"), unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt))
    k.create_tj(trainjob(name, rt, suspend=True))
    wait_until(lambda: k.jobset(name))
    k.patch_tj(
        name,
        {
            "metadata": {"annotations": {"kueue.x-k8s.io/trainjob-override-idx": "0"}},
            "spec": {
                "podSpecOverrides": [
                    {
                        "targetJobs": [{"name": "node"}],
                        "nodeSelector": {"cloud.example.com/pool": "gpu"},
                        "tolerations": OVERRIDE_SPEC["tolerations"],
                    }
                ]
            },
        },
    )
    k.patch_tj(name, {"spec": {"suspend": False}})
    [pod] = k.running(name, 1)
    assert pod.spec.node_selector == {"cloud.example.com/pool": "gpu"}
    assert [t.key for t in pod.spec.tolerations] == ["gpu"]
    # Trainer's webhook: overrides change only while the TrainJob is suspended.
    with pytest.raises(ApiException) as info:
        k.patch_tj(name, {"spec": {"podSpecOverrides": []}})
    assert info.value.status == 403
    assert json.loads(info.value.body)["message"] == (
        'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
        "spec.podSpecOverrides: Forbidden: PodSpecOverrides can only be modified when the "
        "TrainJob is suspended"
    )


def test_v20_webhook_rejects_unknown_target_job(
    kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    k = kube("2.0")
    rt = unique_name("rt")
    k.cluster.load_runtime_yaml(runtime_yaml(rt))
    body = trainjob(unique_name("t"), rt, podSpecOverrides=[{"targetJobs": [{"name": "nope"}]}])
    with pytest.raises(ApiException) as info:
        k.create_tj(body)
    assert info.value.status == 403
    assert json.loads(info.value.body)["message"].endswith(
        "must not have targetJob that doesn't exist in the runtime job template"
    )


def test_v21_pod_template_overrides(
    kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """mergePodTemplateOverrides (v2.1.0): metadata and spec merged into the pod template;
    v2.1 has no podSpecOverrides (pruned, not applied); spec.labels go to the JobSet."""
    k = kube("2.1")
    rt, name = unique_name("rt"), unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt))
    created = k.create_tj(
        trainjob(
            name,
            rt,
            labels={"team": "a"},
            podTemplateOverrides=[
                {
                    "targetJobs": [{"name": "node"}],
                    "metadata": {"labels": {"kueue.x-k8s.io/podset": "node"}},
                    "spec": OVERRIDE_SPEC,
                }
            ],
            podSpecOverrides=[{"targetJobs": [{"name": "node"}], "nodeSelector": {"x": "y"}}],
        )
    )
    assert "podSpecOverrides" not in created["spec"]
    [pod] = k.running(name, 1)
    _check_override_applied(pod)
    assert pod.metadata.labels["kueue.x-k8s.io/podset"] == "node"
    assert k.jobset(name)["metadata"]["labels"]["team"] == "a"


@pytest.mark.parametrize("version", ["2.2", "2.3"])
def test_runtime_patches_reach_the_pods(
    version: str, kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """mergeRuntimePatches (v2.2+): each patch's template.spec merged into the JobSet spec, its
    template.metadata labels on the JobSet."""
    k = kube(version)
    rt, name = unique_name("rt"), unique_name("t")
    k.cluster.load_runtime_yaml(runtime_yaml(rt))
    pod_template = {
        "metadata": {"labels": {"kueue.x-k8s.io/podset": "node"}},
        "spec": OVERRIDE_SPEC,
    }
    patch = {
        "manager": "example.com/tests",
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "replicatedJobs": [
                        {"name": "node", "template": {"spec": {"template": pod_template}}}
                    ]
                },
            }
        },
    }
    k.create_tj(trainjob(name, rt, runtimePatches=[patch]))
    [pod] = k.running(name, 1)
    _check_override_applied(pod)
    assert pod.metadata.labels["kueue.x-k8s.io/podset"] == "node"
    assert k.jobset(name)["metadata"]["labels"]["team"] == "a"


# --- the served schema and the served objects against the real CRDs --------------------------


@pytest.mark.parametrize("version", list(RELEASE))
def test_served_schema_follows_the_version(
    version: str, kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    k = kube(version)
    body = trainjob(
        unique_name("t"),
        "torch-distributed",
        suspend=True,
        activeDeadlineSeconds=60,
        labels={"a": "b"},
        podSpecOverrides=[{"targetJobs": [{"name": "node"}]}],
        podTemplateOverrides=[{"targetJobs": [{"name": "node"}]}],
        runtimePatches=[{"manager": "example.com/x"}],
    )
    spec = k.create_tj(body)["spec"]
    kept = {
        "2.0": {"labels", "podSpecOverrides"},
        "2.1": {"labels", "podTemplateOverrides"},
        "2.2": {"activeDeadlineSeconds", "runtimePatches"},
        "2.3": {"activeDeadlineSeconds", "runtimePatches"},
    }[version]
    optional = {"labels", "podSpecOverrides", "podTemplateOverrides"}
    optional |= {"activeDeadlineSeconds", "runtimePatches"}
    assert {f for f in spec if f in optional} == kept


def _jobset_as_runtime(jobset: dict[str, Any]) -> dict[str, Any]:
    """The JobSet's spec inside a ClusterTrainingRuntime, to validate it against the JobSet
    schema the Trainer release embeds (its CRDs carry no JobSet CRD of their own)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": jobset["metadata"]["name"]},
        "spec": {
            "template": {
                "metadata": {"labels": jobset["metadata"].get("labels") or {}},
                "spec": jobset["spec"],
            }
        },
    }


@pytest.mark.parametrize("version", list(RELEASE))
def test_served_objects_valid_against_their_release(
    version: str, kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """The TrainJobs and JobSets a cluster of each version serves, and the v2.3 snapshot's
    runtime, pass the real CRDs of that release (schema and CEL rules)."""
    require_k8s_data()
    release = RELEASE[version]
    k = kube(version)
    extra: dict[str, Any] = {}
    if version == "2.0":
        extra["podSpecOverrides"] = [{"targetJobs": [{"name": "node"}], **OVERRIDE_SPEC}]
    elif version == "2.1":
        extra["podTemplateOverrides"] = [{"targetJobs": [{"name": "node"}], "spec": OVERRIDE_SPEC}]
    else:
        extra["runtimePatches"] = [{"manager": "example.com/x"}]
    names = []
    for runtime, trainer in (
        ("torch-distributed", {"numNodes": 2, "resourcesPerNode": JOB_RESOURCES}),
        ("mpi-interactive", {"numNodes": 2, "env": [{"name": "A", "value": "1"}]}),
        ("deepspeed-distributed", {"numNodes": 2}),
    ):
        name = unique_name("t")
        names.append(name)
        job_extra = extra if runtime == "torch-distributed" else {}
        k.create_tj(trainjob(name, runtime, trainer=trainer, **job_extra))
    for name in names:
        wait_until(lambda n=name: k.pods(n))
        tj = k.get_tj(name)
        assert problems("trainjobs", tj, release=release) == []
        js = k.jobset(name)
        assert problems("clustertrainingruntimes", _jobset_as_runtime(js), release=release) == []
        if version == "2.3":
            snapshot = yaml.safe_load(k.snapshot(name).data["runtime"])
            assert problems("clustertrainingruntimes", snapshot, release=release) == []
        # An update of the served object is a valid update too (transition rules).
        new = copy.deepcopy(tj)
        new["spec"]["suspend"] = True
        assert problems("trainjobs", new, old=tj, release=release) == []


# --- A6: the engine finds the trainer pod from what actually runs ----------------------------


def test_a6_attach_after_the_runtime_moved_its_trainer(
    kube: Callable[[str], Kube], unique_name: Callable[[str], str], tmp_path: Any
) -> None:
    """v2.3: a job started on a runtime whose trainer is replicated job ``node``; then the
    runtime moves the ancestor label to ``sidecar``. attach still lands on ``node``: from the
    JobSet, and from the runtime snapshot when the JobSet is unreadable. Only with neither
    readable does the engine fall back to the live runtime (and so to ``sidecar``)."""
    k = kube("2.3")
    rt, name = unique_name("rt"), unique_name("a6")
    k.cluster.load_runtime_yaml(runtime_yaml(rt, extra_rjob=True))
    session = connect(rt, name=name, config_file=str(k.cluster.kubeconfig_path), timeout=60)
    try:
        assert session.pod.startswith(f"{name}-node-0-0-")
        k.cluster.load_runtime_yaml(runtime_yaml(rt, extra_rjob=True, ancestor="sidecar"))
        assert k.runtime(rt)["spec"]["template"]["spec"]["replicatedJobs"][1]["template"][
            "metadata"
        ]["labels"] == {ANCESTOR: "trainer"}
        cases = [
            ("jobset", [], "node"),
            ("snapshot", [("get", "jobsets")], "node"),
            ("live runtime", [("get", "jobsets"), ("get", "configmaps")], "sidecar"),
        ]
        for what, deny, rjob in cases:
            token = k.cluster.add_user(f"user-{what.replace(' ', '-')}", deny=deny)
            kubeconfig = k.cluster.write_kubeconfig(tmp_path / f"{what}.yaml", token)
            other = attach(name, config_file=str(kubeconfig), timeout=30)
            assert other.pod.startswith(f"{name}-{rjob}-0-0-"), what
            assert other.execute("echo $WHICH").stdout.strip() == "v1"
    finally:
        session.close(timeout=30)


def test_a6_attach_to_a_v20_job(
    kube: Callable[[str], Kube], unique_name: Callable[[str], str]
) -> None:
    """Trainer v2.0 (no snapshot, podSpecOverrides): connect, then attach from another
    session, and run a command in the trainer pod."""
    k = kube("2.0")
    name = unique_name("a6")
    kubeconfig = str(k.cluster.kubeconfig_path)
    session = connect("torch-distributed", name=name, num_nodes=2, config_file=kubeconfig)
    try:
        started = time.monotonic()
        other = attach(name, config_file=kubeconfig, timeout=30)
        assert time.monotonic() - started < 30
        assert other.pod == session.pod and other.pod.startswith(f"{name}-node-0-0-")
        assert other.execute("hostname").stdout.strip() == f"{name}-node-0-0"
        with pytest.raises(ApiException) as info:
            k.snapshot(name)
        assert info.value.status == 404
    finally:
        session.close(timeout=30)
