"""Keep a TrainJob in step with its Workload: suspend, or unsuspend with Kueue's runtime patch
(kubernetes-sigs/kueue pkg/controller/jobs/trainjob/trainjob_controller.go RunWithPodSetsInfo
and Stop, read at v0.14.0, v0.14.8, v0.16.5, v0.19.2 and main)."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from ..controller.versions import (
    PODSPEC_OVERRIDES,
    kueue_override_annotation,
    kueue_patch_field,
)
from ..core.apierror import ApiError
from ..core.events import record_event
from ..core.resources import TRAINJOBS
from ..core.store import now_rfc3339
from . import workload_conditions as C
from .kinds import (
    JOB_CONTROLLER,
    MANAGER,
    MULTIKUEUE_CONTROLLER,
    PODSET_LABEL,
    RESOURCE_FLAVORS,
)
from .state import SimulationState
from .webhook import skeleton_patch

OVERRIDE_IDX = "kueue.x-k8s.io/trainjob-override-idx"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
# PodSpecPatch fields Trainer 2.3 guards with CEL ``self == oldSelf``
# (kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go at v2.3.0; removed by #3890)
CEL_IMMUTABLE = (
    "serviceAccountName",
    "volumes",
    "initContainers",
    "containers",
    "imagePullSecrets",
    "securityContext",
    "terminationGracePeriodSeconds",
)


def update_refused_on_unsuspend(tj: dict[str, Any]) -> bool:
    """Whether a TrainJob has another manager's runtime patch with a CEL-immutable pod field:
    Kueue <= 0.19's full-object Update on admission then fails under Trainer 2.3 (the round
    trip through Kueue's older Go types changes those fields: kubeflow/trainer#3888), so the
    job stays suspended while its Workload is admitted. Kueue 0.20 merge-patches (#14836)."""
    for patch in (tj.get("spec") or {}).get("runtimePatches") or []:
        if patch.get("manager") == MANAGER:
            continue
        spec = (patch.get("trainingRuntimeSpec") or {}).get("template", {}).get("spec") or {}
        for rjob in spec.get("replicatedJobs") or []:
            pod = ((((rjob.get("template") or {}).get("spec") or {}).get("template")) or {}).get(
                "spec"
            ) or {}
            if any(k in pod for k in CEL_IMMUTABLE):
                return True
    return False


class TrainJobSync(SimulationState):
    """TrainJob side of admission (a part of KueueSimulation)."""

    def _sync_trainjob(self, tj: dict[str, Any], wl: dict[str, Any], admitted: bool) -> None:
        """Admitted: fill Kueue's patch while still suspended, then unsuspend in a second update
        (pkg/controller/jobframework/reconciler.go: startJob -> RunWithPodSetsInfo, then the
        unsuspend); otherwise keep it suspended with the patch emptied."""
        if tj.get("spec", {}).get("managedBy") == MULTIKUEUE_CONTROLLER:
            return  # runs on a worker cluster: nothing starts here
        if not self.config.patches_runtime:
            self._sync_overrides(tj, wl, admitted)
            return
        if (
            admitted
            and self.config.unsuspend_update_fails
            and self.config.trainer_version == "2.3"
            and not self.config.merge_patches_admission
            and update_refused_on_unsuspend(tj)
        ):
            return  # Kueue logs "Unsuspending job" with the API error and retries; no Event
        spec = tj.get("spec") or {}
        want_suspend = not admitted
        patch = self._runtime_patch(wl) if admitted else skeleton_patch()
        patches = list(spec.get("runtimePatches") or [])
        new_patches = [p for p in patches if p.get("manager") != MANAGER]
        old = next((p for p in patches if p.get("manager") == MANAGER), None)
        kept_meta = (
            ((old or {}).get("trainingRuntimeSpec") or {}).get("template", {}).get("metadata")
        )
        if kept_meta is not None:
            # admission and restore touch only the pod sets: the JobSet metadata the webhook
            # wrote (v0.17.0-v0.17.1's queue label) stays
            patch = copy.deepcopy(patch)
            patch["trainingRuntimeSpec"].setdefault("template", {})["metadata"] = kept_meta
        if not admitted and old is not None and (not spec.get("suspend") or self._active(tj)):
            # Stop (trainjob_controller.go): suspend first; the patch's replicatedJobs are
            # cleared (RestorePodSetsInfo) only once no pod is active ("jobs are still active")
            patch = old
        if (
            old is not None
            and admitted
            and old.get("trainingRuntimeSpec") == patch.get("trainingRuntimeSpec")
        ):
            patch = old
        new_patches.append(patch)
        if bool(spec.get("suspend")) == want_suspend and (
            old is not None
            and {k: v for k, v in old.items() if k != "time"}
            == {k: v for k, v in patch.items() if k != "time"}
        ):
            return

        patch_changes = old is None or {k: v for k, v in old.items() if k != "time"} != {
            k: v for k, v in patch.items() if k != "time"
        }
        # two steps on admission: the patch first (still suspended), the unsuspend next
        suspend = True if (admitted and patch_changes) else want_suspend

        def apply(o: dict[str, Any]) -> None:
            o.setdefault("spec", {})["suspend"] = suspend
            o["spec"]["runtimePatches"] = new_patches

        self._write_trainjob(tj, apply)
        self._start_stop_event(tj, wl, bool(spec.get("suspend")), suspend)

    def _start_stop_event(
        self, tj: dict[str, Any], wl: dict[str, Any], was_suspended: bool, suspend: bool
    ) -> None:
        """jobframework/reconciler.go startJob / stopJob: ``Started`` ("Admitted by
        clusterQueue X") when Kueue unsuspends the job, ``Stopped`` (the eviction's message)
        when it suspends a running one."""
        if was_suspended and not suspend:
            cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
            record_event(
                self.store,
                tj,
                reason="Started",
                message=f"Admitted by clusterQueue {cq}",
                component=JOB_CONTROLLER,
            )
        elif suspend and not was_suspended:
            evicted = C.get_cond(wl, C.EVICTED) or {}
            message = evicted.get("message") or "No matching Workload"
            record_event(
                self.store, tj, reason="Stopped", message=message, component=JOB_CONTROLLER
            )

    def _active(self, tj: dict[str, Any]) -> bool:
        """Whether pods of ``tj`` still exist (Eviction._pods_left, when mixed in)."""
        pods_left = getattr(self, "_pods_left", None)
        return bool(pods_left(tj)) if pods_left is not None else False

    def _write_trainjob(self, tj: dict[str, Any], apply: Any) -> None:
        with contextlib.suppress(ApiError):
            self.store.mutate(TRAINJOBS, tj["metadata"]["namespace"], tj["metadata"]["name"], apply)

    def _sync_overrides(self, tj: dict[str, Any], wl: dict[str, Any], admitted: bool) -> None:
        """Kueue 0.14-0.16: on admission append one override per pod set (node selector,
        tolerations; with the podset label from v0.14.5) to ``podSpecOverrides`` (v0.14.0-
        v0.14.4) or ``podTemplateOverrides`` (v0.14.5 and later), recording where they start in
        ``kueue.x-k8s.io/trainjob-override-idx`` in v0.14.x; on stop cut them off again (at the
        annotation in 0.14, at the first entry labelled ``kueue.x-k8s.io/podset`` in 0.15 and
        0.16: RestorePodSetsInfo at v0.16.5). Trainer 2.0/2.1 apply them to the pods."""
        field = kueue_patch_field(self.config.version)
        annotate = kueue_override_annotation(self.config.version)
        spec = tj.get("spec") or {}
        notes = (tj.get("metadata") or {}).get("annotations") or {}
        overrides = list(spec.get(field) or [])
        if OVERRIDE_IDX in notes:
            overrides = overrides[: int(notes[OVERRIDE_IDX])]
        elif field != PODSPEC_OVERRIDES:
            cut = next(
                (
                    i
                    for i, o in enumerate(overrides)
                    if PODSET_LABEL in ((o.get("metadata") or {}).get("labels") or {})
                ),
                len(overrides),
            )
            overrides = overrides[:cut]
        start = len(overrides)
        ours = self._overrides(wl, field) if admitted else []
        wanted = overrides + ours
        want_notes = (
            {**notes, OVERRIDE_IDX: str(start)}
            if admitted and annotate
            else {k: v for k, v in notes.items() if k != OVERRIDE_IDX}
        )
        unchanged = list(spec.get(field) or []) == wanted and notes == want_notes
        if unchanged and bool(spec.get("suspend")) == (not admitted):
            return
        suspend = True if (admitted and not unchanged) else (not admitted)

        def apply(o: dict[str, Any]) -> None:
            o.setdefault("spec", {})["suspend"] = suspend
            if wanted:
                o["spec"][field] = wanted
            else:
                o["spec"].pop(field, None)
            o.setdefault("metadata", {})["annotations"] = want_notes

        self._write_trainjob(tj, apply)
        self._start_stop_event(tj, wl, bool(spec.get("suspend")), suspend)

    def _overrides(self, wl: dict[str, Any], field: str) -> list[dict[str, Any]]:
        """One override per admitted pod set: its flavors' node labels and tolerations; a
        podTemplateOverride also carries the podset label in its metadata."""
        out = []
        for psa in (wl["status"].get("admission") or {}).get("podSetAssignments") or []:
            node_selector, tolerations = self._flavor_placement(psa)
            entry: dict[str, Any] = {"targetJobs": [{"name": psa["name"]}]}
            pod: dict[str, Any] = entry
            if field != PODSPEC_OVERRIDES:
                labels, notes = self._podset_meta(wl, psa)
                entry["metadata"] = {"labels": labels, "annotations": notes}
                pod = entry.setdefault("spec", {})
            if node_selector:
                pod["nodeSelector"] = node_selector
            if tolerations:
                pod["tolerations"] = tolerations
            out.append(entry)
        return out

    def _flavor_placement(self, psa: dict[str, Any]) -> tuple[dict[str, str], list[dict[str, Any]]]:
        node_selector: dict[str, str] = {}
        tolerations: list[dict[str, Any]] = []
        for fname in sorted(set((psa.get("flavors") or {}).values())):
            rf = self.store.try_get(RESOURCE_FLAVORS, None, fname) or {}
            node_selector.update((rf.get("spec") or {}).get("nodeLabels") or {})
            tolerations += (rf.get("spec") or {}).get("tolerations") or []
        return node_selector, tolerations

    def _podset_meta(
        self, wl: dict[str, Any], psa: dict[str, Any]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Pod labels and annotations of an admitted pod set (jobframework/reconciler.go
        getPodSetsInfoFromStatus): the podset label; the Workload's name as an annotation
        (TopologyAwareScheduling, beta and on since 0.14); the LocalQueue and ClusterQueue
        labels (AssignQueueLabelsForPods, beta and on since 0.17)."""
        labels = {PODSET_LABEL: psa["name"]}
        if self.config.minor >= 17:
            labels[LOCAL_QUEUE_LABEL] = str((wl.get("spec") or {}).get("queueName", ""))
            cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
            if cq:
                labels[CLUSTER_QUEUE_LABEL] = cq
        return labels, {WORKLOAD_ANNOTATION: wl["metadata"]["name"]}

    def _runtime_patch(self, wl: dict[str, Any]) -> dict[str, Any]:
        """Kueue's patch on admission: podset labels, flavor node labels and tolerations. From
        0.20 (kueue#15162) the pod set's own tolerations come first, so that Trainer 2.3's
        merge (tolerations are atomic) keeps the runtime's; before, the flavor's replace them
        (kueue#15161)."""
        rjobs = []
        own = {
            ps.get("name"): ((ps.get("template") or {}).get("spec") or {}).get("tolerations") or []
            for ps in (wl.get("spec") or {}).get("podSets") or []
        }
        for psa in (wl["status"].get("admission") or {}).get("podSetAssignments") or []:
            node_selector, tolerations = self._flavor_placement(psa)
            if tolerations and self.config.keeps_runtime_tolerations:
                kept = list(own.get(psa["name"]) or [])
                tolerations = kept + [t for t in tolerations if t not in kept]
            pod_spec: dict[str, Any] = {}
            if node_selector:
                pod_spec["nodeSelector"] = node_selector
            if tolerations:
                pod_spec["tolerations"] = tolerations
            labels, notes = self._podset_meta(wl, psa)
            pod_tpl: dict[str, Any] = {
                "metadata": {"labels": labels, "annotations": notes},
                "spec": pod_spec,
            }
            rjobs.append({"name": psa["name"], "template": {"spec": {"template": pod_tpl}}})
        return {
            "manager": MANAGER,
            "time": now_rfc3339(),
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": rjobs}}},
        }
