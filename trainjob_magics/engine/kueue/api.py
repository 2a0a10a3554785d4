"""Kueue look-ups in the cluster: a TrainJob's Workload (by the ``kueue.x-k8s.io/job-uid`` label;
its name hashes the UID, so it is never computed), LocalQueues, and queue positions from the
visibility API (``None`` on 403/404).
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client import ApiClient

from ..errors import ApiServerError, NotFoundError, PermissionDeniedError, TrainJobError
from ..kube.requests import request
from ..result import QueueStatus
from .discovery import KUEUE_GROUP, VISIBILITY_GROUP, kueue_api
from .status import parse_workload

log = logging.getLogger(__name__)


QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"


PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"


JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
DEFAULT_LOCAL_QUEUE = "default"  # LocalQueueDefaulting
# spec.managedBy of a job MultiKueue dispatches, and the controllerName of its AdmissionCheck
# (pkg/controller/admissionchecks/multikueue, pkg/controller/jobs/trainjob/trainjob_webhook.go)
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"


WORKLOAD_RESOURCE = f"workloads.{KUEUE_GROUP}"


LOCALQUEUE_RESOURCE = f"localqueues.{KUEUE_GROUP}"


VISIBILITY_RESOURCE = f"localqueues/pendingworkloads.{VISIBILITY_GROUP}"


def kueue_path(api: ApiClient, namespace: str, plural: str, name: str | None = None) -> str:
    """The path of a namespaced Kueue object in the version the cluster serves."""
    version = kueue_api(api).version or "v1beta2"
    base = f"/apis/{KUEUE_GROUP}/{version}/namespaces/{namespace}/{plural}"
    return f"{base}/{name}" if name else base


def fetch_local_queue(
    api: ApiClient, namespace: str, name: str, timeout: float = 30.0
) -> dict[str, Any]:
    """GET a LocalQueue (NotFoundError when it does not exist)."""
    return request(
        api,
        "GET",
        kueue_path(api, namespace, "localqueues", name),
        verb="get",
        resource=LOCALQUEUE_RESOURCE,
        namespace=namespace,
        name=name,
        timeout=timeout,
    )


def cluster_path(api: ApiClient, plural: str, name: str) -> str:
    """The path of a cluster-scoped Kueue object (ClusterQueue, AdmissionCheck)."""
    return f"/apis/{KUEUE_GROUP}/{kueue_api(api).version or 'v1beta2'}/{plural}/{name}"


def multikueue_check(
    api: ApiClient, namespace: str, local_queue: str
) -> tuple[str | None, str | None]:
    """(ClusterQueue, its MultiKueue AdmissionCheck) behind a LocalQueue; None where unreadable."""
    try:
        lq = fetch_local_queue(api, namespace, local_queue)
    except TrainJobError:
        return None, None
    cq_name = (lq.get("spec") or {}).get("clusterQueue")
    if not cq_name:
        return None, None
    try:
        cq = request(
            api,
            "GET",
            cluster_path(api, "clusterqueues", cq_name),
            verb="get",
            resource=f"clusterqueues.{KUEUE_GROUP}",
            name=cq_name,
        )
    except TrainJobError:
        # a user may read the LocalQueue but not the cluster-scoped ClusterQueue (RBAC)
        return cq_name, None
    spec = cq.get("spec") or {}
    names = list(spec.get("admissionChecks") or [])
    names += [
        str(r.get("name"))
        for r in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        if r.get("name")
    ]
    for check in names:
        try:
            ac = request(
                api,
                "GET",
                cluster_path(api, "admissionchecks", check),
                verb="get",
                resource=f"admissionchecks.{KUEUE_GROUP}",
                name=check,
            )
        except TrainJobError:
            continue
        if (ac.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER:
            return cq_name, check
    return cq_name, names[0] if len(names) == 1 else None


def find_workload(api: ApiClient, namespace: str, job_uid: str) -> dict[str, Any] | None:
    """The Workload whose job-uid label is the TrainJob's UID (newest if several), or None."""
    data = request(
        api,
        "GET",
        kueue_path(api, namespace, "workloads"),
        verb="list",
        resource=WORKLOAD_RESOURCE,
        namespace=namespace,
        query=[("labelSelector", f"{JOB_UID_LABEL}={job_uid}")],
    )
    items = list(data.get("items") or [])
    if not items:
        return None
    return max(items, key=lambda w: str((w.get("metadata") or {}).get("creationTimestamp") or ""))


class Visibility:
    """Queue positions from the visibility API, in the versions discovery lists; turns itself
    off after a 403, or when discovery says the API is not served. A 404 for one queue is
    transient (Kueue answers so for a LocalQueue it has not seen yet)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.note = ""  # set once positions became unavailable
        self.failure = ""  # the last call's transient failure (Kueue down), cleared on success
        found = kueue_api(api)
        self._versions = list(found.visibility)
        if found.known and not self._versions:
            self.note = "Kueue visibility API not available"
        self._cluster_queues: dict[tuple[str, str], str | None] = {}

    def cluster_queue(self, namespace: str, local_queue: str) -> str | None:
        """The ClusterQueue behind a LocalQueue (read once; None when it cannot be read)."""
        key = (namespace, local_queue)
        if key not in self._cluster_queues:
            try:
                lq = fetch_local_queue(
                    self.api,
                    namespace,
                    local_queue,
                    timeout=10.0,
                )
                self._cluster_queues[key] = (lq.get("spec") or {}).get("clusterQueue") or None
            except TrainJobError:
                self._cluster_queues[key] = None
        return self._cluster_queues[key]

    def positions(
        self, namespace: str, local_queue: str, workload: str
    ) -> tuple[int | None, int | None]:
        """(position in LocalQueue, in ClusterQueue), 0-based; (None, None) when unknown."""
        self.failure = ""
        while self._versions and not self.note:
            version = self._versions[0]
            path = (
                f"/apis/{VISIBILITY_GROUP}/{version}/namespaces/{namespace}/localqueues/"
                f"{local_queue}/pendingworkloads"
            )
            try:
                data = request(
                    self.api,
                    "GET",
                    path,
                    verb="get",
                    resource=VISIBILITY_RESOURCE,
                    namespace=namespace,
                    name=local_queue,
                    timeout=10.0,
                )
            except PermissionDeniedError:
                self.note = "no permission for the Kueue visibility API"
                return None, None
            except NotFoundError:
                return None, None  # this queue is not known yet: try again next time
            except ApiServerError as exc:
                log.debug("visibility API failed: %s", exc)
                # Kueue serves this API itself (an aggregated API): 503 while it is down
                if exc.status in (502, 503, 504):
                    self.failure = f"Kueue is not answering (its visibility API: {exc.status})"
                return None, None
            self.failure = ""
            for item in data.get("items") or []:
                if (item.get("metadata") or {}).get("name") == workload:
                    return item.get("positionInLocalQueue"), item.get("positionInClusterQueue")
            return None, None
        return None, None


def queue_status(
    api: ApiClient,
    namespace: str,
    job_uid: str,
    local_queue: str | None,
    visibility: Visibility | None = None,
) -> QueueStatus:
    """The current QueueStatus of a TrainJob (positions filled while it waits)."""
    try:
        wl = find_workload(api, namespace, job_uid)
    except PermissionDeniedError as exc:
        return QueueStatus("Unknown", message=str(exc), local_queue=local_queue)
    qs = parse_workload(wl, local_queue)
    if visibility is not None and qs.waiting and qs.workload and qs.local_queue:
        lq_pos, cq_pos = visibility.positions(namespace, qs.local_queue, qs.workload)
        qs.position_in_local_queue, qs.position_in_cluster_queue = lq_pos, cq_pos
        if qs.cluster_queue is None:
            qs.cluster_queue = visibility.cluster_queue(namespace, qs.local_queue)
        qs.position_note = visibility.note or visibility.failure
        if lq_pos is None and not qs.position_note:
            qs.position_note = "not listed as pending"
    return qs
