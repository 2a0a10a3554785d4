"""Deleting a TrainJob with each ``propagationPolicy`` on the local cluster, as the API server
and its garbage collector do; and the engine's own delete, which must stay Background
(engine/trainjob/lifecycle.py DELETE_BODY says why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch

from tests.helpers.polling import wait_until
from trainjob_magics import connect
from trainjob_magics.engine.trainjob.orphans import abandon_trainjob
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)
RUNTIME = "torch-distributed"
SELECTOR = "jobset.sigs.k8s.io/jobset-name={}"
TRAINJOBS = ("trainer.kubeflow.org", "v1alpha1", "default", "trainjobs")


def _api(cluster: LocalCluster) -> Any:
    return k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig_path))


def _trainjob(api: Any, name: str) -> dict[str, Any] | None:
    try:
        return k8s.CustomObjectsApi(api).get_namespaced_custom_object(*TRAINJOBS, name)
    except k8s.ApiException as exc:
        assert exc.status == 404, exc
        return None


def _pods(api: Any, name: str) -> list[Any]:
    core = k8s.CoreV1Api(api)
    return core.list_namespaced_pod("default", label_selector=SELECTOR.format(name)).items


def test_engine_delete_frees_the_name_at_once(
    cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    """Background deletion (what the engine promises): the TrainJob is gone when the delete
    returns, its pods follow; so a connect given up (abandon_trainjob) leaves its name free
    for the next connect at once, without "already exists"."""
    kc, name = str(cluster.kubeconfig_path), unique_name("bg")
    api = _api(cluster)
    try:
        connect(RUNTIME, name=name, config_file=kc, timeout=30)  # left open: abandoned
        rv = _trainjob(api, name)["metadata"]["resourceVersion"]  # type: ignore[index]
        assert abandon_trainjob(name, config_file=kc)
        # what the TrainJob went through since: removed in one step, never held for its pods
        seen = []
        for ev in watch.Watch().stream(
            k8s.CustomObjectsApi(api).list_namespaced_custom_object,
            *TRAINJOBS,
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            timeout_seconds=10,
        ):
            meta = ev["object"]["metadata"]
            seen.append((ev["type"], meta.get("deletionTimestamp"), meta.get("finalizers")))
            if ev["type"] == "DELETED":
                break
        assert seen and all(held is None for _, held, _ in seen), seen
        assert _trainjob(api, name) is None
        again = connect(RUNTIME, name=name, config_file=kc, timeout=30)
        again.close()
    finally:
        api.close()


@pytest.mark.parametrize("policy", ["Foreground", "Orphan"])
def test_local_cluster_honours_the_propagation_policy(
    cluster: LocalCluster, unique_name: Callable[[str], str], policy: str
) -> None:
    kc, name = str(cluster.kubeconfig_path), unique_name(policy[0].lower())
    api = _api(cluster)
    session = connect(RUNTIME, name=name, config_file=kc, timeout=30)
    try:
        custom = k8s.CustomObjectsApi(api)
        custom.delete_namespaced_custom_object(
            "trainer.kubeflow.org",
            "v1alpha1",
            "default",
            "trainjobs",
            name,
            body=k8s.V1DeleteOptions(propagation_policy=policy),
        )
        if policy == "Foreground":
            # the owner stays, marked, until its blocking dependents are gone; then it goes
            held = _trainjob(api, name)
            assert held is not None and held["metadata"].get("deletionTimestamp"), held
            assert "foregroundDeletion" in held["metadata"]["finalizers"]
            wait_until(lambda: _trainjob(api, name) is None, timeout=30)
            assert _pods(api, name) == [], "the owner went before its dependents"
        else:
            # the owner goes; its JobSet loses the ownerReference and stays, with its pods
            wait_until(lambda: _trainjob(api, name) is None, timeout=30)
            jobset = custom.get_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", name
            )
            assert not jobset["metadata"].get("ownerReferences"), jobset["metadata"]
            pod = k8s.CoreV1Api(api).read_namespaced_pod(session.pod, "default")
            assert pod.metadata.deletion_timestamp is None
            custom.delete_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", name
            )
            k8s.CoreV1Api(api).delete_collection_namespaced_pod(
                "default", label_selector=SELECTOR.format(name)
            )
        wait_until(lambda: not _pods(api, name), timeout=30)
    finally:
        session.close(timeout=10)
        api.close()
