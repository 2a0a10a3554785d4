"""API groups, resource paths, labels and annotations: the names the engine shares with
Trainer, JobSet and Kubernetes."""

from __future__ import annotations

GROUP = "trainer.kubeflow.org"


VERSION = "v1alpha1"


API_VERSION = f"{GROUP}/{VERSION}"


TRAINJOBS = "trainjobs"


CLUSTER_RUNTIME_KIND = "ClusterTrainingRuntime"


RUNTIME_KIND = "TrainingRuntime"


MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"


MANAGED_BY_VALUE = "trainjob-magics"


SESSION_LABEL = "trainjob-magics/session"


OWNER_HOST_ANNOTATION = "trainjob-magics/owner-host"


OWNER_PID_ANNOTATION = "trainjob-magics/owner-pid"


CREATED_BY_ANNOTATION = "trainjob-magics/created-by"


OWNER_KERNEL_ANNOTATION = "trainjob-magics/owner-kernel"


IDLE_ANNOTATION = "trainjob-magics/idle-timeout"


GPU_RESOURCE = "nvidia.com/gpu"


TRAINJOB_RESOURCE = f"trainjobs.{GROUP}"  # as RBAC names it


def trainjob_path(namespace: str, name: str | None = None) -> str:
    """REST path of the TrainJob collection, or of one TrainJob."""
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{TRAINJOBS}"
    return f"{base}/{name}" if name else base


ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"


ANCESTOR_TRAINER = "trainer"


JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"


COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def pods_path(namespace: str) -> str:
    """REST path of the pod collection."""
    return f"/api/v1/namespaces/{namespace}/pods"


def jobset_selector(name: str) -> str:
    """Label selector of every pod of a TrainJob."""
    return f"{JOBSET_NAME_LABEL}={name}"


def runtime_path(kind: str, namespace: str, name: str | None = None) -> str:
    """REST path of a (Cluster)TrainingRuntime, or of the collection."""
    if kind == RUNTIME_KIND:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/trainingruntimes"
    else:
        base = f"/apis/{GROUP}/{VERSION}/clustertrainingruntimes"
    return f"{base}/{name}" if name else base


# When the session's last command started or ended (UTC, RFC 3339), written at each: the
# sidebar's and panels' idle time.
LAST_COMMAND_ANNOTATION = "trainjob-magics/last-command"

# The session's idle stop in seconds (``%trainjob_connect --idle-stop``); absent when off.
IDLE_STOP_ANNOTATION = "trainjob-magics/idle-stop"

# What closed the job (``%trainjob_close``, ``kernel exit``, ``idle stop``, ``the sidebar``),
# written just before the deletion so that a panel of a gone job can say who closed it.
CLOSED_BY_ANNOTATION = "trainjob-magics/closed-by"

# The kernel's open port forwards of the session (JSON: a list of {localPort, port, pod, link},
# the link as the kernel shows it); absent when none is open. The sidebar opens them.
FORWARDS_ANNOTATION = "trainjob-magics/forwards"
