"""Read TrainJobs and pods of a (local) cluster through the kubernetes python client."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client, config

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def list_trainjobs(kubeconfig: str | Path, namespace: str = "default") -> list[dict[str, Any]]:
    """Every TrainJob object in ``namespace`` (those being deleted included)."""
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        return client.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainjobs"
        )["items"]
    finally:
        api.close()


def trainjob_names(
    kubeconfig: str | Path, namespace: str = "default", *, include_deleting: bool = True
) -> list[str]:
    """TrainJob names in ``namespace``; without ``include_deleting`` only the live ones."""
    return [
        item["metadata"]["name"]
        for item in list_trainjobs(kubeconfig, namespace)
        if include_deleting or not item["metadata"].get("deletionTimestamp")
    ]


def get_trainjob(
    kubeconfig: str | Path, name: str, namespace: str = "default"
) -> dict[str, Any] | None:
    """The TrainJob ``name``, or None when it does not exist."""
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        return read_trainjob(api, name, namespace)
    finally:
        api.close()


def read_trainjob(
    api: client.ApiClient, name: str, namespace: str = "default"
) -> dict[str, Any] | None:
    """The TrainJob ``name`` read through an open ``api`` client, or None when it does not exist."""
    try:
        return client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainjobs", name
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def jobset_pods(kubeconfig: str | Path, name: str, namespace: str = "default") -> list[Any]:
    """The pods of the TrainJob ``name`` (by the JobSet name label), as V1Pod objects."""
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        return list_jobset_pods(api, name, namespace)
    finally:
        api.close()


def list_jobset_pods(api: client.ApiClient, name: str, namespace: str = "default") -> list[Any]:
    """The pods of the TrainJob ``name`` read through an open ``api`` client."""
    return (
        client.CoreV1Api(api)
        .list_namespaced_pod(namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}")
        .items
    )


def wait_trainjob_gone(
    kubeconfig: str | Path, name: str, timeout: float, interval: float = 0.2
) -> bool:
    """Wait until no live (not deleting) TrainJob ``name`` is left; False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name not in trainjob_names(kubeconfig, include_deleting=False):
            return True
        time.sleep(interval)
    return False


def delete_all_trainjobs(
    kubeconfig: str | Path, namespace: str = "default", timeout: float = 30
) -> None:
    """Delete every TrainJob in ``namespace`` and wait until they and their pods are gone.

    Leaves a (local) cluster quiet: no object changes, no pod processes.
    """
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        for item in co.list_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs")[
            "items"
        ]:
            try:
                co.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, "trainjobs", item["metadata"]["name"]
                )
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        deadline = time.monotonic() + timeout
        while True:
            jobs = co.list_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs")
            pods = core.list_namespaced_pod(namespace).items
            if not jobs["items"] and not pods:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"still there after {timeout}s: TrainJobs "
                    f"{[i['metadata']['name'] for i in jobs['items']]}, "
                    f"pods {[p.metadata.name for p in pods]}"
                )
            time.sleep(0.1)
    finally:
        api.close()


def create_namespace(kubeconfig: str | Path, name: str) -> None:
    """Create a namespace with the official client (nothing if it exists)."""
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    finally:
        api.close()
