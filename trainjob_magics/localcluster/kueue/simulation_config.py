"""KueueConfig: how the local cluster's Kueue simulation starts and which reasons it uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ReasonStyle = Literal["granular", "legacy"]
KUEUE_VERSIONS = ("0.14", "0.17", "0.19", "main")


def served_versions(version: str) -> tuple[str, ...]:
    """kueue.x-k8s.io (and visibility) versions a Kueue release serves, storage version first:
    v1beta1 only in 0.14; v1beta2 (storage) and v1beta1 from 0.15 (apis/kueue at each tag)."""
    return ("v1beta1",) if version == "0.14" else ("v1beta2", "v1beta1")


@dataclass
class KueueConfig:
    """Options of the Kueue simulation.

    ``version`` is the Kueue release imitated (``KUEUE_VERSIONS``): the API versions served,
    the reason set, and how admission patches the TrainJob (0.14: ``podSpecOverrides``; 0.17
    and later: ``runtimePatches``).

    ``reason_style``: "granular" gives Kueue's newer QuotaReserved=False reasons
    (WaitingForQuota, ExceedsMaxQuota, NoMatchingFlavor, Misconfigured, Suspended); "legacy" gives
    ``Pending`` / ``Inadmissible``. None (the default) follows ``version``: granular on main,
    where the UnadmittedWorkloadsObservability gate is on by default, legacy before.

    ``visibility_delay``: seconds after a LocalQueue is created during which the visibility API
    answers 404 for it (Kueue's queue manager has not seen it yet).

    Unless ``local_queue`` is None, a ResourceFlavor, a ClusterQueue with ``quota`` and a
    LocalQueue in ``namespace`` are created when the cluster starts.
    """

    version: str = "main"
    reason_style: ReasonStyle | None = None
    visibility_delay: float = 0.0
    # waitForPodsReady timeout in seconds; None follows the version (30 min from 0.19, off before)
    pods_ready: float | None = None
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

    def __post_init__(self) -> None:
        if self.version not in KUEUE_VERSIONS:
            raise ValueError(
                f"unknown Kueue version {self.version!r}; choose one of {', '.join(KUEUE_VERSIONS)}"
            )

    @property
    def reasons(self) -> ReasonStyle:
        """The reason set in use."""
        if self.reason_style is not None:
            return self.reason_style
        return "granular" if self.version == "main" else "legacy"

    @property
    def pods_ready_timeout(self) -> float | None:
        """waitForPodsReady's timeout (None: off): on by default from Kueue 0.19 (30 min)."""
        if self.pods_ready is not None:
            return self.pods_ready or None
        return 1800.0 if self.version in ("0.19", "main") else None

    @property
    def patches_runtime(self) -> bool:
        """Whether admission writes ``runtimePatches`` (0.17+) rather than ``podSpecOverrides``."""
        return self.version != "0.14"
