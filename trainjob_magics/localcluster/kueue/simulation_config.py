"""KueueConfig: how the local cluster's Kueue simulation starts and which reasons it uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ReasonStyle = Literal["granular", "legacy"]


@dataclass
class KueueConfig:
    """Options of the Kueue simulation.

    ``reason_style``: "granular" gives Kueue's newer QuotaReserved=False reasons
    (WaitingForQuota, ExceedsMaxQuota, NoMatchingFlavor, Misconfigured, Suspended); "legacy" gives
    ``Pending`` / ``Inadmissible`` like Kueue 0.19 and older.

    Unless ``local_queue`` is None, a ResourceFlavor, a ClusterQueue with ``quota`` and a
    LocalQueue in ``namespace`` are created when the cluster starts.
    """

    reason_style: ReasonStyle = "granular"
    namespace: str = "default"
    local_queue: str | None = "user-queue"
    cluster_queue: str = "cluster-queue"
    flavor: str = "default-flavor"
    quota: dict[str, str | int] = field(
        default_factory=lambda: {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "0"}
    )
    queueing_strategy: str = "BestEffortFIFO"
    priority_classes: dict[str, int] = field(default_factory=dict)
    requeue_backoff: float = 0.0  # seconds an evicted workload waits before it is requeued
    # seconds between QuotaReserved and Admitted (as if admission checks ran); 0 = at once
    admission_check_delay: float = 0.0
