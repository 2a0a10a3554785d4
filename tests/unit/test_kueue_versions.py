"""What each Kueue version does to a TrainJob (issue 21, items 1-5, 8, 9), read from upstream:
kubernetes-sigs/kueue pkg/controller/jobs/trainjob/trainjob_webhook.go and
trainjob_controller.go, pkg/controller/jobframework/defaults.go, at the tags named below."""

from __future__ import annotations

from typing import Any

import pytest

from trainjob_magics.cli import _parser
from trainjob_magics.localcluster.controller import Controller
from trainjob_magics.localcluster.core.faults import Faults
from trainjob_magics.localcluster.core.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    NAMESPACES,
    TRAINJOBS,
    default_registry,
)
from trainjob_magics.localcluster.core.store import Store
from trainjob_magics.localcluster.kueue import KueueConfig, KueueSimulation
from trainjob_magics.localcluster.kueue.kinds import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
)
from trainjob_magics.localcluster.kueue.simulation_config import (
    KUEUE_VERSION_CHOICES,
    served_versions,
)
from trainjob_magics.localcluster.runtimes import load_builtin_runtimes

pytestmark = pytest.mark.timeout(30)
PC = "kueue.x-k8s.io/priority-class"
SKELETON = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}


def make_sim(tmp_path, version: str, trainer: str = "2.3") -> KueueSimulation:
    store = Store()
    for ns in ("default", "kube-system", "kueue-system"):
        store.create(NAMESPACES, {"metadata": {"name": ns}})
    for rt in load_builtin_runtimes():
        store.create(CLUSTER_TRAINING_RUNTIMES, rt)
    ctrl = Controller(
        store,
        tmp_path,
        Faults(),
        pending_delay=0,
        start_delay=0,
        delete_grace=0,
        ancestor_label_on_pods=False,
        trainer_version=trainer,
    )
    cfg = KueueConfig(quota={"cpu": "8", "memory": "8Gi"}, version=version, trainer_version=trainer)
    return KueueSimulation(store, default_registry(), cfg, ctrl.resolve_runtime)


def created(sim: KueueSimulation, ns: str = "default", **labels: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "j", "namespace": ns, "labels": dict(labels)},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 1, "resourcesPerNode": {"requests": {"cpu": "1"}}},
        },
    }
    sim.webhook(TRAINJOBS, "CREATE", body, None)
    return body


def test_the_runtime_patch_is_appended_without_a_queue(tmp_path) -> None:
    """Item 1: the entry goes to every TrainJob the webhook covers; only the suspend needs the
    queue label (trainjob_webhook.go Default, v0.19.2)."""
    sim = make_sim(tmp_path, "0.19", "2.2")
    plain = created(sim)
    assert plain["spec"]["runtimePatches"] == [SKELETON]
    assert "suspend" not in plain["spec"]
    queued = created(sim, **{"kueue.x-k8s.io/queue-name": "user-queue"})
    assert queued["spec"]["runtimePatches"] == [SKELETON] and queued["spec"]["suspend"] is True
    # kube-system and Kueue's namespace are outside the webhook's namespaceSelector
    for ns in ("kube-system", "kueue-system"):
        assert "runtimePatches" not in created(sim, ns)["spec"]


def test_local_queue_defaulting_follows_the_managed_namespaces(tmp_path) -> None:
    """Item 2: ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector (defaults.go)."""
    sim = make_sim(tmp_path, "0.19", "2.2")
    for ns in ("default", "kube-system"):
        sim.store.create(
            LOCAL_QUEUES,
            {"metadata": {"name": "default", "namespace": ns}, "spec": {"clusterQueue": "cq"}},
            ns,
        )
    labels = created(sim)["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "default"
    assert "kueue.x-k8s.io/queue-name" not in created(sim, "kube-system")["metadata"]["labels"]


@pytest.mark.parametrize(("version", "defaulted"), [("0.19", False), ("0.20", True)])
def test_the_default_priority_class_from_0_20(tmp_path, version: str, defaulted: bool) -> None:
    """Item 3: WorkloadPriorityClassDefaulting is beta and on from 0.20 (kueue#13719)."""
    sim = make_sim(tmp_path, version)
    sim.store.create(WORKLOAD_PRIORITY_CLASSES, {"metadata": {"name": "default"}, "value": 1})
    labels = created(sim)["metadata"]["labels"]
    assert (labels.get("kueue.x-k8s.io/priority-class") == "default") is defaulted


def test_served_versions_and_choices() -> None:
    """Item 4: 0.20 serves v1beta2 only (kueue#14558); the CLI offers every version imitated."""
    assert served_versions("0.14") == ("v1beta1",)
    assert served_versions("0.19") == ("v1beta2", "v1beta1")
    assert served_versions("main") == ("v1beta2", "v1beta1")
    assert served_versions("0.20") == ("v1beta2",)
    parser = _parser()
    action = next(
        a
        for a in parser._subparsers._group_actions[0].choices["local-cluster"]._actions
        if "--kueue-version" in a.option_strings
    )
    assert tuple(action.choices) == KUEUE_VERSION_CHOICES
    with pytest.raises(ValueError, match="unknown Kueue version"):
        KueueConfig(version="0.13")


def admit(sim: KueueSimulation, tj: dict[str, Any]) -> dict[str, Any]:
    stored = sim.store.create(TRAINJOBS, tj, tj["metadata"]["namespace"])
    for _ in range(6):
        sim.sync()
    return sim.store.get(TRAINJOBS, "default", stored["metadata"]["name"])


@pytest.mark.parametrize(
    ("version", "trainer", "field", "annotated"),
    [
        ("0.14.4", "2.0", "podSpecOverrides", True),
        ("0.14", "2.1", "podTemplateOverrides", True),
        ("0.16", "2.1", "podTemplateOverrides", False),
    ],
)
def test_which_field_each_kueue_patches(
    tmp_path, version: str, trainer: str, field: str, annotated: bool
) -> None:
    """Item 5: RunWithPodSetsInfo at v0.14.0 (podSpecOverrides + annotation), v0.14.8
    (podTemplateOverrides + annotation, #7755), v0.16.5 (podTemplateOverrides, podset label)."""
    sim = make_sim(tmp_path, version, trainer)
    tj = admit(sim, created(sim, **{"kueue.x-k8s.io/queue-name": "user-queue"}))
    assert tj["spec"]["suspend"] is False, tj["spec"]
    [override] = tj["spec"][field]
    assert override["targetJobs"] == [{"name": "node"}]
    if field == "podTemplateOverrides":
        assert override["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "node"}
        [wl] = sim.store.list(WORKLOADS, "default")[0]
        assert override["metadata"]["annotations"] == {
            "kueue.x-k8s.io/workload": wl["metadata"]["name"]
        }
    notes = tj["metadata"].get("annotations") or {}
    assert ("kueue.x-k8s.io/trainjob-override-idx" in notes) is annotated


@pytest.mark.parametrize(("version", "kept"), [("0.19", False), ("0.20", True)])
def test_flavor_tolerations_and_the_runtimes(tmp_path, version: str, kept: bool) -> None:
    """Item 8: before 0.20 Kueue's patch holds only the flavor's tolerations, which replace the
    runtime's under Trainer 2.3 (kueue#15161); 0.20 keeps the runtime's first (#15162)."""
    sim = make_sim(tmp_path, version)
    runtime_tol = {"key": "runtime", "operator": "Exists", "effect": "NoSchedule"}
    flavor_tol = {"key": "flavor", "operator": "Exists", "effect": "NoSchedule"}
    rt = sim.store.get(CLUSTER_TRAINING_RUNTIMES, None, "torch-distributed")

    def add_tol(o: dict[str, Any]) -> None:
        for rj in o["spec"]["template"]["spec"]["replicatedJobs"]:
            rj["template"]["spec"]["template"]["spec"]["tolerations"] = [runtime_tol]

    sim.store.mutate(CLUSTER_TRAINING_RUNTIMES, None, rt["metadata"]["name"], add_tol)
    sim.store.mutate(
        RESOURCE_FLAVORS,
        None,
        sim.config.flavor,
        lambda o: o.setdefault("spec", {}).update(tolerations=[flavor_tol]),
    )
    tj = admit(sim, created(sim, **{"kueue.x-k8s.io/queue-name": "user-queue"}))
    [patch] = [p for p in tj["spec"]["runtimePatches"] if p["manager"] == SKELETON["manager"]]
    [rj] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    tols = rj["template"]["spec"]["template"]["spec"]["tolerations"]
    assert tols == ([runtime_tol, flavor_tol] if kept else [flavor_tol])


@pytest.mark.parametrize(("version", "starts"), [("0.19", False), ("0.20", True)])
def test_unsuspend_with_volumes_under_trainer_2_3(tmp_path, version: str, starts: bool) -> None:
    """Item 9: Kueue <= 0.19's full Update on admission fails on Trainer 2.3 for a TrainJob
    whose runtime patch carries CEL-immutable fields (trainer#3888); 0.20 merge-patches
    (kueue#14836). The Workload is admitted either way."""
    sim = make_sim(tmp_path, version)
    sim.config.unsuspend_update_fails = True  # the failure mode of trainer#3888
    body = created(sim, **{"kueue.x-k8s.io/queue-name": "user-queue"})
    body["spec"]["runtimePatches"].insert(
        0,
        {
            "manager": "trainer.kubeflow.org/kubeflow-sdk",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {
                                        "template": {
                                            "spec": {"volumes": [{"name": "d", "emptyDir": {}}]}
                                        }
                                    }
                                },
                            }
                        ]
                    }
                }
            },
        },
    )
    tj = admit(sim, body)
    [wl] = sim.store.list(WORKLOADS, "default")[0]
    assert any(
        c["type"] == "Admitted" and c["status"] == "True" for c in wl["status"]["conditions"]
    )
    assert (tj["spec"]["suspend"] is False) is starts


def test_a_higher_priority_workload_preempts_a_lower_one(tmp_path) -> None:
    """withinClusterQueue: LowerPriority (pkg/scheduler/preemption/preemption.go): the lower
    Workload is evicted with Kueue's message; the higher one waits for its quota."""
    sim = make_sim(tmp_path, "0.19", "2.2")
    for name, value in (("low", 100), ("high", 1000)):
        sim.store.create(WORKLOAD_PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value})
    sim.store.mutate(
        CLUSTER_QUEUES,
        None,
        sim.config.cluster_queue,
        lambda o: o["spec"].update(preemption={"withinClusterQueue": "LowerPriority"}),
    )

    def job(name: str, pc: str) -> dict[str, Any]:
        body = created(sim, **{"kueue.x-k8s.io/queue-name": "user-queue", PC: pc})
        body["metadata"]["name"] = name
        body["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "6"}}
        return sim.store.create(TRAINJOBS, body, "default")

    job("low", "low")
    for _ in range(3):
        sim.sync()
    low = sim.workload_for("low", "default")
    assert any(
        c["type"] == "Admitted" and c["status"] == "True" for c in low["status"]["conditions"]
    )
    job("high", "high")
    sim.sync()  # the pass that preempts (the low one's quota is released on a later pass)
    low = sim.workload_for("low", "default")
    conds = {c["type"]: c for c in low["status"]["conditions"]}
    assert conds["Evicted"]["reason"] == "Preempted" and conds["Preempted"]["status"] == "True"
    assert conds["Evicted"]["message"].startswith("Preempted to accommodate a workload (UID: ")
    high = sim.workload_for("high", "default")
    qr = {c["type"]: c for c in high["status"]["conditions"]}["QuotaReserved"]
    assert qr["status"] == "False" and "Pending the preemption of 1 workload(s)" in qr["message"]
    for _ in range(3):
        sim.sync()
    high = sim.workload_for("high", "default")
    assert {c["type"]: c["status"] for c in high["status"]["conditions"]}["Admitted"] == "True"


@pytest.mark.parametrize(
    ("version", "labelled"), [("0.17.0", True), ("0.17.1", True), ("0.17", False)]
)
def test_kueue_0_17_0_labels_the_jobset_with_the_queue(
    tmp_path, version: str, labelled: bool
) -> None:
    """trainjob_webhook.go at v0.17.0/v0.17.1 (gone in v0.17.2): the patch's template.metadata
    carries the queue label (found by tests/differential on the v0.17.0 stack)."""
    sim = make_sim(tmp_path, version, "2.2")
    tj = created(sim, **{"kueue.x-k8s.io/queue-name": "user-queue"})
    [patch] = tj["spec"]["runtimePatches"]
    meta = patch["trainingRuntimeSpec"]["template"].get("metadata")
    assert (meta == {"labels": {"kueue.x-k8s.io/queue-name": "user-queue"}}) is labelled
    plain = created(sim)
    assert plain["spec"]["runtimePatches"] == [SKELETON]
    # admission adds the pod sets' info beside it and keeps the webhook's metadata
    admitted = admit(sim, created(sim, **{"kueue.x-k8s.io/queue-name": "user-queue"}))
    [patch] = [p for p in admitted["spec"]["runtimePatches"] if p["manager"] == SKELETON["manager"]]
    template = patch["trainingRuntimeSpec"]["template"]
    assert (template.get("metadata") is not None) is labelled
    if labelled:
        assert template["metadata"] == {"labels": {"kueue.x-k8s.io/queue-name": "user-queue"}}
    assert template["spec"]["replicatedJobs"][0]["name"] == "node"


def test_kueue_0_14_to_0_16_label_the_jobset_through_spec_labels(tmp_path) -> None:
    """trainjob_webhook.go at v0.14.8/v0.16.9: a queued TrainJob's spec.labels gets the queue
    (found by tests/differential on the Trainer 2.1 + Kueue 0.14.8 stack)."""
    sim = make_sim(tmp_path, "0.14", "2.1")
    tj = created(sim, **{"kueue.x-k8s.io/queue-name": "user-queue"})
    assert tj["spec"]["labels"] == {"kueue.x-k8s.io/queue-name": "user-queue"}
    assert "labels" not in created(sim)["spec"]
    assert (
        "labels"
        not in created(make_sim(tmp_path, "0.17", "2.2"), **{"kueue.x-k8s.io/queue-name": "q"})[
            "spec"
        ]
    )


@pytest.mark.parametrize("version", ["0.14", "0.19"])
def test_the_workload_names_its_priority_class_in_its_api_version(tmp_path, version: str) -> None:
    """v1beta1 (0.14) names the class by priorityClassName/Source, v1beta2 by
    priorityClassRef (apis/kueue/*/workload_types.go; the v0.14.8 stack's Workload showed it)."""
    sim = make_sim(tmp_path, version, "2.1" if version == "0.14" else "2.2")
    sim.store.create(WORKLOAD_PRIORITY_CLASSES, {"metadata": {"name": "low"}, "value": 100})
    body = created(sim, **{"kueue.x-k8s.io/queue-name": "user-queue", PC: "low"})
    sim.store.create(TRAINJOBS, body, "default")
    sim.sync()
    spec = sim.workload_for("j", "default")["spec"]
    assert spec["priority"] == 100
    if version == "0.14":
        assert spec["priorityClassName"] == "low" and "priorityClassRef" not in spec
        assert spec["priorityClassSource"] == "kueue.x-k8s.io/workloadpriorityclass"
    else:
        assert spec["priorityClassRef"]["name"] == "low" and "priorityClassName" not in spec
