"""The sidebar's "N/M pods ready" counts the pods the job's JobSet runs, not only those that
exist: a ResourceQuota of one pod lets the Job controller create one of a 2-node torch job's
pods; the record says 1/2 (it said 1/1: a panel claiming every pod ready while one was never
made). Needs a cluster that enforces ResourceQuota (the local cluster does not: it skips there).
The namespace and its quota are made with ``TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG``."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import kubernetes
import pytest

from tests.helpers.polling import wait_until
from tests.realcluster.settings import ADMIN, NEEDS_CLUSTER, RUNTIMES, WAIT
from trainjob_magics.engine.inventory.service import SessionInventory
from trainjob_magics.engine.trainjob.body import build_trainjob

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600), NEEDS_CLUSTER]

TORCH = next((r for r in RUNTIMES if r.startswith("torch")), "torch-distributed")


@pytest.fixture
def quota_namespace() -> Iterator[str]:
    """A namespace of its own whose ResourceQuota allows one pod."""
    api = kubernetes.config.new_client_from_config(config_file=ADMIN)
    core = kubernetes.client.CoreV1Api(api)
    name = "tjm-quota-" + secrets.token_hex(3)
    core.create_namespace({"metadata": {"name": name}})
    try:
        try:
            core.create_namespaced_resource_quota(
                name, {"metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}}
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                pytest.skip("this cluster serves no ResourceQuota (the local cluster)")
            raise
        yield name
    finally:
        core.delete_namespace(name)
        api.close()


def test_pods_not_yet_made_count_as_not_ready(quota_namespace: str) -> None:
    api = kubernetes.config.new_client_from_config(config_file=ADMIN)
    custom = kubernetes.client.CustomObjectsApi(api)
    name = "q" + secrets.token_hex(5)
    body = build_trainjob(name, quota_namespace, TORCH, num_nodes=2, idle_timeout=None)
    custom.create_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", quota_namespace, "trainjobs", body
    )
    inventory = SessionInventory(config_file=ADMIN, namespaces=[quota_namespace], all_users=True)
    try:
        # one pod made and running; the JobSet asks for two, and the quota refuses the second
        record = wait_until(
            lambda: (
                (r := inventory.job(quota_namespace, name)).get("pods")
                and all(p["ready"] for p in r["pods"])
                and r
            ),
            timeout=WAIT,
        )
        assert len(record["pods"]) == 1, record["pods"]
        assert record["podsReady"] == "1/2"
        listed = {s["name"]: s for s in inventory.snapshot()["sessions"]}
        assert listed[name]["podsReady"] == "1/2"
    finally:
        inventory.stop()
        custom.delete_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", quota_namespace, "trainjobs", name
        )
        api.close()
