"""KueueConfig: how the local cluster's Kueue simulation starts and which reasons it uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..controller.versions import kueue_release

ReasonStyle = Literal["granular", "legacy"]
# the Kueue releases imitated; "0.N" is the newest patch of 0.N, and "0.N.M" is accepted too
# (only 0.14.0-0.14.4 behave differently from 0.14: controller/versions.py kueue_patch_field)
KUEUE_VERSIONS = ("0.14", "0.15", "0.16", "0.17", "0.18", "0.19", "0.20", "main")
KUEUE_VERSION_CHOICES = ("0.14.4", *KUEUE_VERSIONS)


def check_kueue_version(version: str) -> str:
    """``version`` when the local cluster imitates it ("0.19", "0.14.4", "v0.19.2", "main");
    ValueError otherwise."""
    try:
        minor, _ = kueue_release(version)
    except ValueError:
        minor = -1
    if version != "main" and f"0.{minor}" not in KUEUE_VERSIONS:
        raise ValueError(
            f"unknown Kueue version {version!r}; choose one of {', '.join(KUEUE_VERSIONS)} "
            "(or a patch release of one, e.g. 0.14.4)"
        )
    return version.lstrip("v")


def served_versions(version: str) -> tuple[str, ...]:
    """kueue.x-k8s.io (and visibility) versions a Kueue release serves, storage version first:
    v1beta1 only in 0.14; v1beta2 (storage) and v1beta1 from 0.15 (apis/kueue at each tag; main
    of 2026-08 still serves v1beta1, deprecated); v1beta2 only from 0.20 (kueue#14558 sets
    v1beta1 ``served: false`` and removes the v1beta1 visibility APIService)."""
    minor = kueue_release(version)[0]
    if minor <= 14:
        return ("v1beta1",)
    if version != "main" and minor >= 20:
        return ("v1beta2",)
    return ("v1beta2", "v1beta1")


@dataclass
class KueueConfig:
    """Options of the Kueue simulation.

    ``version`` is the Kueue release imitated (``KUEUE_VERSIONS``, or a patch release such as
    "0.14.4"): the API versions served, the reason set, the defaulting of the webhook and how
    admission patches the TrainJob (controller/versions.py: 0.14.0-0.14.4
    ``podSpecOverrides``; 0.14.5-0.16 ``podTemplateOverrides``; 0.17 and later
    ``runtimePatches``). "main" is Kueue main of 2026-08 (0.20 development) with the 0.20 fixes
    (kueue#14836, #15162), still serving v1beta1.

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

    # Kueue's namespace: with kube-system, outside the default managedJobsNamespaceSelector
    kueue_namespace: str = "kueue-system"
    # the Trainer version Kueue drives (set by LocalCluster): 2.3's CEL rules and merge matter
    trainer_version: str = ""
    # kubeflow/trainer#3888: Kueue <= 0.19's full Update on unsuspend rejected by Trainer 2.3's
    # CEL rules when another runtime patch has volumes/containers. Off by default: measured on
    # Trainer v2.3.0 + Kueue v0.19.2 (tests/differential), an emptyDir volume and its mount
    # start fine; the rejection needs a patch the round trip changes. True imitates it.
    unsuspend_update_fails: bool = False

    def __post_init__(self) -> None:
        self.version = check_kueue_version(self.version)

    @property
    def minor(self) -> int:
        """The minor release (14 for "0.14.4"; 20 for main)."""
        return kueue_release(self.version)[0]

    @property
    def reasons(self) -> ReasonStyle:
        """The reason set in use."""
        if self.reason_style is not None:
            return self.reason_style
        return "granular" if self.minor >= 20 else "legacy"

    @property
    def pods_ready_timeout(self) -> float | None:
        """waitForPodsReady's timeout (None: off): on by default from Kueue 0.19 (30 min)."""
        if self.pods_ready is not None:
            return self.pods_ready or None
        return 1800.0 if self.minor >= 19 else None

    @property
    def patches_runtime(self) -> bool:
        """Whether admission writes ``runtimePatches`` (0.17+) rather than overrides."""
        return self.minor >= 17

    @property
    def defaults_priority_class(self) -> bool:
        """WorkloadPriorityClassDefaulting: alpha and off in 0.18-0.19, beta and on from 0.20
        (kueue#13719; pkg/features/kube_features.go)."""
        return self.minor >= 20

    @property
    def merge_patches_admission(self) -> bool:
        """Admission writes the TrainJob with a merge patch (kueue#14836, 0.20) instead of a
        full Update (pkg/controller/jobs/trainjob/trainjob_controller.go RunWithPodSetsInfo at
        v0.19.2: ``c.Update``)."""
        return self.minor >= 20

    @property
    def keeps_runtime_tolerations(self) -> bool:
        """Kueue's patch carries the runtime's tolerations beside the flavor's (kueue#15162,
        0.20); before, the flavor's replace the runtime's under Trainer 2.3 (kueue#15161)."""
        return self.minor >= 20
