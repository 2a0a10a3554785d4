"""A session's TrainJob tied to the notebook's pod: deleted with it.

When the kernel runs in a pod (JupyterHub with KubeSpawner, Kubeflow Notebooks) and talks to its
own cluster with the pod's ServiceAccount, the TrainJob it creates in the pod's namespace carries
an ``ownerReference`` to that pod. When the hub stops the server ("Stop My Server", the idle
culler), the pod is deleted and Kubernetes' garbage collector deletes the TrainJob, however
short the pod's grace period (KubeSpawner's ``delete_grace_period`` is 1 s: too short for a
kernel to be told to shut down and to delete its jobs itself) and even when the kernel was
killed. The keep-alive's ``idle_timeout`` remains the net for a pod that is not deleted.

Only within one namespace: an owner in another namespace counts as absent, and the collector
would delete the TrainJob at once (the Kubernetes docs, "Owners and Dependents"). Not
``blockOwnerDeletion``: that needs ``update`` on the pod's finalizers, which a user's Role does
not grant; nothing waits on it either.

A detached run must outlive the pod: :func:`release` removes the reference first (``patch`` on
trainjobs, optional in docs/rbac.md; without it the run is refused in one line).
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient

from ..errors import TrainJobError
from ..kube import credentials
from ..kube.kubeconfig import service_account_dir
from ..kube.names import TRAINJOB_RESOURCE, trainjob_path
from ..kube.requests import request

MERGE_PATCH = "application/merge-patch+json"


def in_cluster(api: ApiClient) -> bool:
    """True when ``api`` uses the pod's own ServiceAccount (the in-cluster configuration)."""
    credential = getattr(api.configuration, credentials.ATTRIBUTE, None)
    return bool(getattr(credential, "in_cluster", False))


def owner_reference(api: ApiClient, namespace: str) -> dict[str, Any] | None:
    """The ownerReference to the pod this process runs in, when it runs in a pod of
    ``namespace`` with that pod's ServiceAccount; None otherwise (also when the pod cannot be
    read: nothing is tied then, and the keep-alive stays the only net)."""
    if not in_cluster(api):
        return None
    try:
        own_namespace = (service_account_dir() / "namespace").read_text().strip()
    except OSError:
        return None
    if own_namespace != namespace:
        return None
    pod = socket.gethostname()
    try:
        found = request(
            api,
            "GET",
            f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}",
            verb="get",
            resource="pods",
            namespace=namespace,
            name=pod,
            timeout=10.0,
        )
    except TrainJobError:
        return None
    uid = ((found or {}).get("metadata") or {}).get("uid")
    if not uid:
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}


def pod_owners(trainjob: dict[str, Any]) -> list[dict[str, Any]]:
    """The TrainJob's ownerReferences to pods (a notebook's)."""
    refs = (trainjob.get("metadata") or {}).get("ownerReferences") or []
    return [r for r in refs if r.get("kind") == "Pod" and r.get("apiVersion") == "v1"]


def release(api: ApiClient, trainjob: dict[str, Any]) -> bool:
    """Remove the TrainJob's ownerReferences to pods, so it outlives the notebook's pod; True
    when there was one. Raises the engine's error (403: no ``patch`` on trainjobs)."""
    if not pod_owners(trainjob):
        return False
    meta = trainjob.get("metadata") or {}
    namespace, name = meta["namespace"], meta["name"]
    others = [r for r in meta.get("ownerReferences") or [] if r not in pod_owners(trainjob)]
    request(
        api,
        "PATCH",
        trainjob_path(namespace, name),
        verb="patch",
        resource=TRAINJOB_RESOURCE,
        namespace=namespace,
        name=name,
        body={"metadata": {"ownerReferences": others or None}},
        content_type=MERGE_PATCH,
        timeout=10.0,
    )
    return True
