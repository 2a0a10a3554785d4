"""The Kueue simulation's objects against the real Kueue and Trainer CRDs, and its queue logic.

Runs the simulation on a store directly (no server): create TrainJobs as the API server would
(webhook, then store), run passes, inspect Workloads / queues / TrainJobs.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.crd_schema import load_crd_schema, matrix_problems, releases_with
from tests.helpers.store_writes import store_writes
from trainjob_magics.localcluster.controller import Controller
from trainjob_magics.localcluster.core.faults import Faults
from trainjob_magics.localcluster.core.quantity import format_quantity, parse_quantity
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
    WORKLOADS,
)
from trainjob_magics.localcluster.runtimes import load_builtin_runtimes

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def sim(tmp_path) -> KueueSimulation:
    store = Store()
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
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
    )
    cfg = KueueConfig(quota={"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "4"})
    return KueueSimulation(store, default_registry(), cfg, ctrl.resolve_runtime)


def make_trainjob(
    sim: KueueSimulation, name: str, *, cpu: str = "1", gpu: str | None = None, **labels: str
) -> dict[str, Any]:
    req = {"cpu": cpu}
    if gpu:
        req["nvidia.com/gpu"] = gpu
    body = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue", **labels},
        },
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": req, "limits": req}},
        },
    }
    sim.webhook(TRAINJOBS, "CREATE", body, None)
    return sim.store.create(TRAINJOBS, body, "default")


def conds(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c["reason"], c["message"])
        for c in (obj.get("status") or {}).get("conditions") or []
    }


def validate(plural: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """``obj`` passes the CRD of every release in the k8s data (schema and CEL rules)."""
    releases = trainjob_releases() if plural == "trainjobs" else None
    problems = matrix_problems(plural, obj, old, releases)
    assert problems == [], problems


def trainjob_releases() -> list[str]:
    """The Trainer releases whose TrainJob has spec.runtimePatches: the simulation patches the
    way Kueue v0.17+ does, which needs Trainer v2.2 or later."""
    return [
        release
        for release in releases_with("trainjobs")
        if "runtimePatches"
        in load_crd_schema("trainjobs", release=release)["properties"]["spec"]["properties"]
    ]


def assert_writes_valid(sim: KueueSimulation) -> None:
    """Every Kueue object and TrainJob the store holds or held, created or updated (with the
    old object, so that the CRDs' transition rules run), passes every release's CRD."""
    found = []
    for write in store_writes(sim.store):
        if write.group == "kueue.x-k8s.io" or write.plural == "trainjobs":
            name = write.obj["metadata"]["name"]
            for problem in matrix_problems(
                write.plural,
                write.obj,
                write.old,
                trainjob_releases() if write.plural == "trainjobs" else None,
            ):
                found.append(
                    f"{write.plural}/{name} {'update' if write.old else 'create'}: {problem}"
                )
    assert found == [], "\n".join(dict.fromkeys(found))


def test_quantities() -> None:
    assert parse_quantity("500m") * 2 == 1
    assert parse_quantity("2Gi") == 2 * 2**30
    assert format_quantity(parse_quantity("1536Mi"), "memory") == "1536Mi"
    assert format_quantity(parse_quantity("0.5"), "cpu") == "500m"


def test_webhook_suspends_and_adds_patch(sim: KueueSimulation) -> None:
    tj = make_trainjob(sim, "a")
    assert tj["spec"]["suspend"] is True
    # the skeleton the webhook appends (kueue pkg/controller/jobs/trainjob/trainjob_webhook.go)
    assert tj["spec"]["runtimePatches"] == [
        {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
    ]
    validate("trainjobs", tj)
    assert_writes_valid(sim)


def test_fifo_admission_messages_and_crds(sim: KueueSimulation) -> None:
    make_trainjob(sim, "first", cpu="1")  # 2 nodes x 1 cpu: the whole quota
    make_trainjob(sim, "second", cpu="1")
    sim.sync()
    sim.sync()  # admission is two updates: the patch (still suspended), then the unsuspend
    first, second = sim.workload_for("first"), sim.workload_for("second")
    assert first and second
    assert first["metadata"]["name"].startswith("trainjob-first-")
    assert len(first["metadata"]["name"]) == len("trainjob-first-") + 5
    assert first["spec"]["podSets"][0]["count"] == 2
    assert conds(first)["Admitted"] == ("True", "Admitted", "The workload is admitted")
    assert conds(first)["QuotaReserved"][2] == "Quota reserved in ClusterQueue cluster-queue"
    assert first["status"]["admission"]["clusterQueue"] == "cluster-queue"
    assert conds(second)["QuotaReserved"] == (
        "False",
        "WaitingForQuota",
        "couldn't assign flavors to pod set node: insufficient unused quota for cpu in flavor "
        "default-flavor, 2 more needed",
    )
    tj = sim.store.get(TRAINJOBS, "default", "first")
    assert tj["spec"]["suspend"] is False
    patch = tj["spec"]["runtimePatches"][0]
    assert patch["manager"] == "kueue.x-k8s.io/manager" and "trainingRuntimeSpec" in patch
    assert sim.store.get(TRAINJOBS, "default", "second")["spec"]["suspend"] is True
    for obj in (first, second):
        validate("workloads", obj)
    validate("trainjobs", tj)
    sim.sync()  # queue statuses written at the end of the pass
    lq = sim.store.get(LOCAL_QUEUES, "default", "user-queue")
    assert lq["status"]["pendingWorkloads"] == 1 and lq["status"]["admittedWorkloads"] == 1
    validate("localqueues", lq)
    validate("clusterqueues", sim.store.get(CLUSTER_QUEUES, None, "cluster-queue"))
    validate("resourceflavors", sim.store.get(RESOURCE_FLAVORS, None, "default-flavor"))
    summary = sim.pending_workloads("v1beta2", "localqueues", "default", "user-queue")
    assert [i["positionInLocalQueue"] for i in summary["items"]] == [0]
    assert summary["items"][0]["metadata"]["name"] == second["metadata"]["name"]
    # the first one finishes: its quota goes to the second
    sim.store.mutate(
        TRAINJOBS,
        "default",
        "first",
        lambda o: o.setdefault("status", {}).update(
            conditions=[
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "JobsCompleted",
                    "message": "done",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        ),
    )
    sim.sync()
    assert conds(sim.workload_for("first"))["Finished"][0] == "True"
    assert conds(sim.workload_for("second"))["Admitted"][0] == "True"
    assert_writes_valid(sim)


def test_legacy_reasons_and_exceeds(sim: KueueSimulation) -> None:
    sim.config.reason_style = "legacy"
    make_trainjob(sim, "huge", cpu="1", gpu="4")  # 8 GPUs > 4
    sim.sync()
    status, reason, message = conds(sim.workload_for("huge"))["QuotaReserved"]
    assert (status, reason) == ("False", "Pending")
    assert "insufficient quota for nvidia.com/gpu in flavor default-flavor" in message
    assert "(8 > 4)" in message
    assert_writes_valid(sim)


def test_missing_and_stopped_queue(sim: KueueSimulation) -> None:
    make_trainjob(sim, "lost", **{"kueue.x-k8s.io/queue-name": "nope"})
    sim.sync()
    assert conds(sim.workload_for("lost"))["QuotaReserved"] == (
        "False",
        "Misconfigured",
        "LocalQueue nope doesn't exist",
    )
    sim.set_stop_policy("user-queue", "Hold")
    make_trainjob(sim, "held")
    sim.sync()
    assert conds(sim.workload_for("held"))["QuotaReserved"][1:] == (
        "Suspended",
        "LocalQueue user-queue is stopped",
    )
    lq = sim.store.get(LOCAL_QUEUES, "default", "user-queue")
    assert conds(lq)["Active"][0] == "False"
    validate("workloads", sim.workload_for("held"))
    assert_writes_valid(sim)


def test_preempt_requeue_and_priority(sim: KueueSimulation) -> None:
    sim.config.priority_classes = {"high": 1000}
    make_trainjob(sim, "low")
    sim.sync()
    make_trainjob(sim, "vip", **{"kueue.x-k8s.io/priority-class": "high"})
    sim.sync()
    vip = sim.workload_for("vip")
    assert vip["spec"]["priority"] == 1000
    validate("workloads", vip)
    sim.preempt("low")
    low = sim.workload_for("low")
    assert conds(low)["Evicted"][:2] == ("True", "Preempted")
    assert conds(low)["Preempted"][:2] == ("True", "InClusterQueue")
    assert sim.store.get(TRAINJOBS, "default", "low")["spec"]["suspend"] is True
    sim.sync()  # no pods exist here: the eviction completes, the higher priority job wins
    assert conds(sim.workload_for("vip"))["Admitted"][0] == "True"
    low = sim.workload_for("low")
    assert conds(low)["QuotaReserved"][0] == "False"
    assert conds(low)["Requeued"][0] == "True"
    assert low["status"]["schedulingStats"]["evictions"][0]["count"] == 1
    validate("workloads", low)
    assert_writes_valid(sim)


def test_a_simulation_that_breaks_a_cel_rule_is_caught(
    sim: KueueSimulation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks above are real: a Workload breaking a CEL rule, on create or as an update
    (a transition rule), fails them with the rule's message."""
    from trainjob_magics.localcluster.kueue import simulation

    real = simulation.build_workload

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        body = real(*args, **kwargs)
        body["spec"]["podSets"][0]["minCount"] = body["spec"]["podSets"][0]["count"] + 1
        return body

    monkeypatch.setattr(simulation, "build_workload", broken)
    make_trainjob(sim, "bad")
    sim.sync()
    with pytest.raises(AssertionError, match="minCount should be positive and less or equal"):
        assert_writes_valid(sim)


def test_an_update_breaking_a_transition_rule_is_caught(sim: KueueSimulation) -> None:
    make_trainjob(sim, "moved")
    sim.sync()
    name = sim.workload_for("moved")["metadata"]["name"]
    assert conds(sim.workload_for("moved"))["QuotaReserved"][0] == "True"
    sim.store.mutate(WORKLOADS, "default", name, lambda o: o["spec"].update(queueName="other"))
    with pytest.raises(AssertionError, match="queueName is immutable while workload quota"):
        assert_writes_valid(sim)


def test_workload_name_is_kueues() -> None:
    """pkg/controller/jobframework/workload_names.go: lowercase kind, name, and the first five
    hex digits of sha1("Kind\\nGroup\\nname\\nuid")."""
    import hashlib

    from trainjob_magics.localcluster.kueue.workloads import workload_name

    tj = {"metadata": {"name": "my-job", "uid": "0b5c8f6a-uid"}}
    digest = hashlib.sha1(b"TrainJob\ntrainer.kubeflow.org\nmy-job\n0b5c8f6a-uid").hexdigest()
    assert workload_name(tj) == f"trainjob-my-job-{digest[:5]}"
    long = {"metadata": {"name": "x" * 260, "uid": "u"}}
    assert len(workload_name(long)) == 253
