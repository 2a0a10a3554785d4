"""What the local cluster's Kueue serves and writes passes the real CRDs of every release.

Queued sessions run through the engine over HTTPS (admitted, queued, preempted, requeued,
priority class, max runtime, deleted). Then every Workload, LocalQueue, ClusterQueue,
ResourceFlavor and TrainJob the API serves, and every create and update the cluster's store
recorded (with the object it replaced, so that the transition rules run), is checked against
the CRDs of Kueue v0.14.0 ... main and Trainer v2.2.1 / v2.3.0: schema, CEL rules, and no
field the server would drop.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config

from tests.crd_schema import load_crd_schema, matrix_problems, releases_with
from tests.helpers.k8s_data import require_k8s_data
from tests.helpers.kube import delete_all_trainjobs
from tests.helpers.polling import wait_until
from tests.helpers.store_writes import store_writes
from trainjob_magics import connect
from trainjob_magics.engine import QueuedTimeoutError
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.kueue import KueueConfig

pytestmark = pytest.mark.timeout(180)
KUEUE = "kueue.x-k8s.io"


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A Kueue-enabled local cluster after a few queued sessions went through it."""
    require_k8s_data()
    cfg = KueueConfig(quota={"cpu": "1", "memory": "4Gi"}, priority_classes={"high": 100})
    root = tmp_path_factory.mktemp("kueue-crd-matrix")
    with LocalCluster(root_dir=root, kueue=cfg, bookmark_interval=0.5) as cluster:
        kc = str(cluster.kubeconfig_path)
        common = {"cpu": "1", "queue": "user-queue", "config_file": kc}
        first = connect("torch-distributed", max_runtime="10m", timeout=30, **common)
        try:
            assert first.execute("true").ok
            with pytest.raises(QueuedTimeoutError):
                connect("torch-distributed", name="waiting", timeout=2, **common)
            assert cluster.kueue is not None
            cluster.kueue.preempt(first.name)
            wait_until(lambda: cluster.kueue.workload_for("waiting") is not None, 10)
        finally:
            first.close()
        admitted = lambda: (cluster.kueue.workload_for("waiting") or {}).get("status", {})  # noqa: E731
        wait_until(lambda: "admission" in admitted(), 20)
        delete_all_trainjobs(cluster.kubeconfig_path)
        # Served while the tests run: one admitted (with a priority class), one pending.
        second = connect("torch-distributed", priority_class="high", timeout=30, **common)
        try:
            with pytest.raises(QueuedTimeoutError):
                connect("torch-distributed", name="pending", timeout=2, **common)
            yield cluster
        finally:
            second.close()
            delete_all_trainjobs(cluster.kubeconfig_path)


def _trainjob_releases() -> list[str]:
    """Trainer releases with spec.runtimePatches: the simulation patches like Kueue v0.17+."""
    return [
        release
        for release in releases_with("trainjobs")
        if "runtimePatches"
        in load_crd_schema("trainjobs", release=release)["properties"]["spec"]["properties"]
    ]


def _releases(plural: str) -> list[str] | None:
    return _trainjob_releases() if plural == "trainjobs" else None


@pytest.mark.parametrize(
    ("group", "version", "plural"),
    [
        (KUEUE, "v1beta2", "workloads"),
        (KUEUE, "v1beta2", "localqueues"),
        (KUEUE, "v1beta2", "clusterqueues"),
        (KUEUE, "v1beta2", "resourceflavors"),
        ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    ],
)
def test_served_objects_pass_every_release(
    ran: LocalCluster, group: str, version: str, plural: str
) -> None:
    api = config.new_client_from_config(config_file=str(ran.kubeconfig_path))
    try:
        items = client.CustomObjectsApi(api).list_cluster_custom_object(group, version, plural)[
            "items"
        ]
    finally:
        api.close()
    assert items
    if plural == "workloads":
        assert len(items) == 2
    found = [
        f"{obj['metadata']['name']}: {p}"
        for obj in items
        for p in matrix_problems(plural, obj, releases=_releases(plural))
    ]
    assert found == [], "\n".join(found)


def test_every_write_passes_every_release(ran: LocalCluster) -> None:
    # store_writes raises ExpiredError if the history was compacted: nothing goes unchecked.
    writes = [w for w in store_writes(ran.store) if w.group == KUEUE or w.plural == "trainjobs"]
    assert {w.plural for w in writes if w.old is not None} >= {"workloads", "trainjobs"}
    found: dict[str, None] = {}
    for w in writes:
        what = f"{w.plural}/{w.obj['metadata']['name']} {'update' if w.old else 'create'}"
        for p in matrix_problems(w.plural, w.obj, w.old, _releases(w.plural)):
            found[f"{what}: {p}"] = None
    assert list(found) == [], "\n".join(found)
