"""Kueue kinds served by the local cluster (kueue.x-k8s.io v1beta2) and the visibility group."""

from __future__ import annotations

import dataclasses

from ..core.resources import Kind, Registry

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta1", "v1beta2")
PENDING_WORKLOADS = "pendingworkloads"

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PODSET_LABEL = "kueue.x-k8s.io/podset"
MANAGER = "kueue.x-k8s.io/manager"

WORKLOADS = Kind(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "Workload",
    "workloads",
    singular="workload",
    short_names=("wl",),
    categories=("kueue",),
    subresources=("status",),
    printer_columns=(
        {"jsonPath": ".spec.queueName", "name": "Queue", "type": "string"},
        {"jsonPath": ".status.admission.clusterQueue", "name": "Reserved in", "type": "string"},
        {
            "jsonPath": ".status.conditions[?(@.type=='Admitted')].status",
            "name": "Admitted",
            "type": "string",
        },
        {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
    ),
)
LOCAL_QUEUES = Kind(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "LocalQueue",
    "localqueues",
    singular="localqueue",
    short_names=("queue", "queues", "lq"),
    categories=("kueue",),
    subresources=("status",),
    printer_columns=(
        {"jsonPath": ".spec.clusterQueue", "name": "ClusterQueue", "type": "string"},
        {"jsonPath": ".status.pendingWorkloads", "name": "Pending Workloads", "type": "integer"},
        {"jsonPath": ".status.admittedWorkloads", "name": "Admitted Workloads", "type": "integer"},
    ),
)
CLUSTER_QUEUES = Kind(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "ClusterQueue",
    "clusterqueues",
    namespaced=False,
    singular="clusterqueue",
    short_names=("cq",),
    categories=("kueue",),
    subresources=("status",),
    printer_columns=(
        {"jsonPath": ".spec.cohortName", "name": "Cohort", "type": "string"},
        {"jsonPath": ".status.pendingWorkloads", "name": "Pending Workloads", "type": "integer"},
        {"jsonPath": ".status.admittedWorkloads", "name": "Admitted Workloads", "type": "integer"},
    ),
)
RESOURCE_FLAVORS = Kind(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "ResourceFlavor",
    "resourceflavors",
    namespaced=False,
    singular="resourceflavor",
    short_names=("flavor", "flavors", "rf"),
    categories=("kueue",),
)
# WorkloadPriorityClass and AdmissionCheck: served so that Kueue's own setup YAML applies; the
# simulation reads priority values and MultiKueue checks from them.
# kueue config/components/crd/bases: both cluster-scoped;
# WorkloadPriorityClass has no spec (top-level `value`, `description`), the printer column
# Value and the short name `wpc` (v0.19+); AdmissionCheck has a status subresource.
WORKLOAD_PRIORITY_CLASSES = Kind(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "WorkloadPriorityClass",
    "workloadpriorityclasses",
    namespaced=False,
    singular="workloadpriorityclass",
    short_names=("wpc",),
    printer_columns=(
        {
            "jsonPath": ".value",
            "name": "Value",
            "type": "integer",
            "description": "Value of workloadPriorityClass's Priority",
        },
    ),
)
ADMISSION_CHECKS = Kind(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "AdmissionCheck",
    "admissionchecks",
    namespaced=False,
    singular="admissioncheck",
    subresources=("status",),
)


def visibility_kinds(version: str) -> tuple[Kind, Kind]:
    """The visibility API's localqueues / clusterqueues (only their pendingworkloads is served)."""
    verbs = ("get",)
    lq = Kind(
        VISIBILITY_GROUP,
        version,
        "LocalQueue",
        "localqueues",
        verbs=verbs,
        subresources=(PENDING_WORKLOADS,),
        has_generation=False,
    )
    cq = Kind(
        VISIBILITY_GROUP,
        version,
        "ClusterQueue",
        "clusterqueues",
        namespaced=False,
        verbs=verbs,
        subresources=(PENDING_WORKLOADS,),
        has_generation=False,
    )
    return lq, cq


KUEUE_KINDS = (
    WORKLOADS,
    LOCAL_QUEUES,
    CLUSTER_QUEUES,
    RESOURCE_FLAVORS,
    ADMISSION_CHECKS,
    WORKLOAD_PRIORITY_CLASSES,
)
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"  # AdmissionCheck controllerName, managedBy


def register_kinds(registry: Registry, versions: tuple[str, ...] = ("v1beta2", "v1beta1")) -> None:
    """Serve the Kueue kinds and the visibility group in ``versions`` (discovery included).

    Every served version shares one store bucket (the store keys by plural and group); objects
    keep the apiVersion they were written with (the local cluster does no conversion).
    """
    for version in versions:
        for kind in KUEUE_KINDS:
            registry.register(dataclasses.replace(kind, version=version))
        for kind in visibility_kinds(version):
            registry.register(kind)


# the job reconciler's event source for TrainJobs (jobframework.NewReconciler: the recorder of
# "<framework>-kueue-controller"; seen on the real stack as below)
JOB_CONTROLLER = "trainer.kubeflow.org/trainjob-kueue-controller"
