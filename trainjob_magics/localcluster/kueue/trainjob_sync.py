"""Keep a TrainJob in step with its Workload: suspend, or unsuspend with Kueue's runtime patch."""

from __future__ import annotations

import contextlib
from typing import Any

from ..core.apierror import ApiError
from ..core.resources import TRAINJOBS
from ..core.store import now_rfc3339
from .kinds import (
    MANAGER,
    MULTIKUEUE_CONTROLLER,
    PODSET_LABEL,
    RESOURCE_FLAVORS,
)
from .state import SimulationState
from .webhook import skeleton_patch

OVERRIDE_IDX = "kueue.x-k8s.io/trainjob-override-idx"


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
        spec = tj.get("spec") or {}
        want_suspend = not admitted
        patch = self._runtime_patch(wl) if admitted else skeleton_patch()
        patches = list(spec.get("runtimePatches") or [])
        new_patches = [p for p in patches if p.get("manager") != MANAGER]
        old = next((p for p in patches if p.get("manager") == MANAGER), None)
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

    def _write_trainjob(self, tj: dict[str, Any], apply: Any) -> None:
        with contextlib.suppress(ApiError):
            self.store.mutate(TRAINJOBS, tj["metadata"]["namespace"], tj["metadata"]["name"], apply)

    def _sync_overrides(self, tj: dict[str, Any], wl: dict[str, Any], admitted: bool) -> None:
        """Kueue 0.14-0.16 (pkg/controller/jobs/trainjob/trainjob_controller.go at v0.14.0):
        on admission append ``podSpecOverrides`` (node selector, tolerations per pod set) and
        record where they start in ``kueue.x-k8s.io/trainjob-override-idx``; on stop remove
        them and the annotation. Trainer 2.0/2.1 apply them to the pods."""
        spec = tj.get("spec") or {}
        notes = (tj.get("metadata") or {}).get("annotations") or {}
        overrides = list(spec.get("podSpecOverrides") or [])
        if OVERRIDE_IDX in notes:
            overrides = overrides[: int(notes[OVERRIDE_IDX])]
        start = len(overrides)
        ours = self._pod_spec_overrides(wl) if admitted else []
        wanted = overrides + ours
        want_notes = (
            {**notes, OVERRIDE_IDX: str(start)}
            if admitted
            else {k: v for k, v in notes.items() if k != OVERRIDE_IDX}
        )
        unchanged = list(spec.get("podSpecOverrides") or []) == wanted and notes == want_notes
        if unchanged and bool(spec.get("suspend")) == (not admitted):
            return
        suspend = True if (admitted and not unchanged) else (not admitted)

        def apply(o: dict[str, Any]) -> None:
            o.setdefault("spec", {})["suspend"] = suspend
            if wanted:
                o["spec"]["podSpecOverrides"] = wanted
            else:
                o["spec"].pop("podSpecOverrides", None)
            o.setdefault("metadata", {})["annotations"] = want_notes

        self._write_trainjob(tj, apply)

    def _pod_spec_overrides(self, wl: dict[str, Any]) -> list[dict[str, Any]]:
        """One podSpecOverride per admitted pod set: its flavors' node labels and tolerations."""
        out = []
        for psa in (wl["status"].get("admission") or {}).get("podSetAssignments") or []:
            node_selector, tolerations = self._flavor_placement(psa)
            entry: dict[str, Any] = {"targetJobs": [{"name": psa["name"]}]}
            if node_selector:
                entry["nodeSelector"] = node_selector
            if tolerations:
                entry["tolerations"] = tolerations
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

    def _runtime_patch(self, wl: dict[str, Any]) -> dict[str, Any]:
        """Kueue's patch on admission: podset labels, flavor node labels and tolerations."""
        rjobs = []
        for psa in (wl["status"].get("admission") or {}).get("podSetAssignments") or []:
            node_selector, tolerations = self._flavor_placement(psa)
            pod_spec: dict[str, Any] = {}
            if node_selector:
                pod_spec["nodeSelector"] = node_selector
            if tolerations:
                pod_spec["tolerations"] = tolerations
            pod_tpl: dict[str, Any] = {"metadata": {"labels": {PODSET_LABEL: psa["name"]}}}
            if pod_spec:
                pod_tpl["spec"] = pod_spec
            rjobs.append({"name": psa["name"], "template": {"spec": {"template": pod_tpl}}})
        return {
            "manager": MANAGER,
            "time": now_rfc3339(),
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": rjobs}}},
        }
