"""Kueue's TrainJob webhook on CREATE (kubernetes-sigs/kueue
pkg/controller/jobs/trainjob/trainjob_webhook.go Default, v0.17.0-v0.19.2 and main, with
jobframework's defaulting in pkg/controller/jobframework/defaults.go):

- the webhook covers every namespace but kube-system and Kueue's own (the namespaceSelector
  that config/components/webhook/kustomization.yaml gives ``mtrainjob.kb.io``): a TrainJob
  elsewhere is not touched at all;
- LocalQueueDefaulting (on by default since v0.12, GA in v0.17): a job without a queue label,
  in a namespace that matches ``managedJobsNamespaceSelector`` (default: every namespace but
  kube-system and Kueue's own, apis/config/v1beta2/defaults.go) and has a LocalQueue named
  ``default``, gets ``kueue.x-k8s.io/queue-name: default``
  (ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector);
- WorkloadPriorityClassDefaulting (beta and on from v0.20, kueue#13719; so on 0.20 and main
  here): a job without a priority class gets ``default`` when a WorkloadPriorityClass of that
  name exists (ApplyDefaultWorkloadPriorityClass);
- a managed job whose ClusterQueue has a MultiKueue admission check gets ``spec.managedBy:
  kueue.x-k8s.io/multikueue`` (its pods then run on a worker cluster);
- a job with a queue label is suspended (WorkloadShouldBeSuspended; manageJobsWithoutQueueName
  is off by default);
- from v0.17 (runtimePatches, Trainer >= 2.2) Kueue's entry
  ``{manager: kueue.x-k8s.io/manager, trainingRuntimeSpec: {template: {spec: {}}}}`` is
  appended to ``runtimePatches`` of EVERY TrainJob the webhook sees, queue label or not; only
  the suspend depends on the label. v0.14-v0.16 write overrides on admission instead.
"""

from __future__ import annotations

from typing import Any

from ..controller.versions import kueue_release
from ..core.resources import TRAINJOBS, Kind
from ..core.store import Store
from .kinds import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    MANAGER,
    MULTIKUEUE_CONTROLLER,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    WORKLOAD_PRIORITY_CLASSES,
)
from .simulation_config import KueueConfig

DEFAULT_LOCAL_QUEUE = "default"
DEFAULT_PRIORITY_CLASS = "default"  # pkg/controller/constants DefaultWorkloadPriorityClassName


def queue_name(obj: dict[str, Any]) -> str | None:
    """The LocalQueue a TrainJob asks for (its queue-name label), or None."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL) or None


def kueue_patch(obj: dict[str, Any]) -> dict[str, Any] | None:
    """Kueue's runtimePatches entry of a TrainJob, if any."""
    for patch in (obj.get("spec") or {}).get("runtimePatches") or []:
        if patch.get("manager") == MANAGER:
            return patch
    return None


def skeleton_patch() -> dict[str, Any]:
    """The empty entry the webhook adds (filled on admission, kept with no replicated jobs on
    stop)."""
    return {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}


def admission_check_names(cluster_queue: dict[str, Any]) -> list[str]:
    """A ClusterQueue's admission checks: ``spec.admissionChecks`` and the strategy's list."""
    spec = cluster_queue.get("spec") or {}
    names = [str(n) for n in spec.get("admissionChecks") or []]
    strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    return names + [str(r["name"]) for r in strategy if r.get("name")]


class TrainJobWebhook:
    """The admission hook, reading LocalQueues, ClusterQueues and AdmissionChecks."""

    def __init__(self, store: Store, config: KueueConfig) -> None:
        self.store = store
        self.config = config

    def __call__(
        self, kind: Kind, op: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> list[str]:
        if kind.key != TRAINJOBS.key or op != "CREATE":
            return []
        meta = obj.setdefault("metadata", {})
        namespace = meta.get("namespace") or "default"
        if not self.covers(namespace):
            return []  # outside the webhook's namespaceSelector
        # the same default selector decides LocalQueue defaulting (defaults.go)
        if queue_name(obj) is None and self.store.try_get(
            LOCAL_QUEUES, namespace, DEFAULT_LOCAL_QUEUE
        ):
            meta.setdefault("labels", {})[QUEUE_NAME_LABEL] = DEFAULT_LOCAL_QUEUE
        # WorkloadPriorityClassDefaulting (pkg/controller/jobframework/defaults.go; alpha and off
        # in 0.18-0.19, beta and on from 0.20): no priority-class label and a
        # WorkloadPriorityClass named "default" exists -> label it "default"
        labels = meta.get("labels") or {}
        if (
            self.config.defaults_priority_class
            and not labels.get(PRIORITY_CLASS_LABEL)
            and self.store.try_get(WORKLOAD_PRIORITY_CLASSES, None, DEFAULT_PRIORITY_CLASS)
        ):
            meta.setdefault("labels", {})[PRIORITY_CLASS_LABEL] = DEFAULT_PRIORITY_CLASS
        queue = queue_name(obj)
        spec = obj.setdefault("spec", {})
        if queue is not None:
            if self._multikueue(namespace, queue):
                spec["managedBy"] = MULTIKUEUE_CONTROLLER
            spec["suspend"] = True
            if self.config.minor <= 16:
                # v0.14-v0.16 also label the JobSet through Trainer 2.0/2.1's spec.labels
                # (trainjob_webhook.go at v0.14.8 and v0.16.9)
                spec.setdefault("labels", {})[QUEUE_NAME_LABEL] = queue
        if self.config.patches_runtime:
            # appended unconditionally (trainjob_webhook.go Default: ``append`` after the
            # suspend decision; a second webhook call could duplicate it before 0.20, #15213)
            patch = skeleton_patch()
            if queue is not None and kueue_release(self.config.version) <= (17, 1):
                # v0.17.0 and v0.17.1 also label the JobSet with the queue through the patch
                # (trainjob_webhook.go at v0.17.0: Template.Metadata; gone in v0.17.2)
                patch["trainingRuntimeSpec"]["template"]["metadata"] = {
                    "labels": {QUEUE_NAME_LABEL: queue}
                }
            spec.setdefault("runtimePatches", []).append(patch)
        return []

    def covers(self, namespace: str) -> bool:
        """Whether Kueue's webhook and managedJobsNamespaceSelector include ``namespace``
        (default: all but kube-system and Kueue's namespace)."""
        return namespace not in ("kube-system", self.config.kueue_namespace)

    def _multikueue(self, namespace: str, queue: str) -> bool:
        lq = self.store.try_get(LOCAL_QUEUES, namespace, queue) or {}
        cq_name = (lq.get("spec") or {}).get("clusterQueue")
        cq = self.store.try_get(CLUSTER_QUEUES, None, cq_name) if cq_name else None
        for check in admission_check_names(cq or {}):
            ac = self.store.try_get(ADMISSION_CHECKS, None, check) or {}
            if (ac.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER:
                return True
        return False


__all__ = ["DEFAULT_LOCAL_QUEUE", "TrainJobWebhook", "kueue_patch", "queue_name"]
