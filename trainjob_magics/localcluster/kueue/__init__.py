"""Kueue simulation for the local cluster (switched on with ``LocalCluster(kueue=...)``)."""

from __future__ import annotations

from .config import KueueConfig
from .kinds import (
    CLUSTER_QUEUES,
    JOB_UID_LABEL,
    LOCAL_QUEUES,
    MAX_EXEC_TIME_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    RESOURCE_FLAVORS,
    WORKLOADS,
)
from .simulation import KueueSimulation

__all__ = [
    "CLUSTER_QUEUES",
    "JOB_UID_LABEL",
    "LOCAL_QUEUES",
    "MAX_EXEC_TIME_LABEL",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "RESOURCE_FLAVORS",
    "WORKLOADS",
    "KueueConfig",
    "KueueSimulation",
]
