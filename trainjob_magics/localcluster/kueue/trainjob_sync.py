"""Keep a TrainJob in step with its Workload: suspend, or unsuspend with Kueue's runtime patch."""

from __future__ import annotations

import contextlib
from typing import Any

from ..core.apierror import ApiError
from ..core.resources import TRAINJOBS
from ..core.store import now_rfc3339
from .kinds import (
    MANAGER,
    PODSET_LABEL,
    RESOURCE_FLAVORS,
)
from .state import SimulationState


class TrainJobSync(SimulationState):
    """TrainJob side of admission (a part of KueueSimulation)."""

    def _sync_trainjob(self, tj: dict[str, Any], wl: dict[str, Any], admitted: bool) -> None:
        """Admitted: unsuspend and fill Kueue's runtime patch; otherwise keep it suspended."""
        spec = tj.get("spec") or {}
        want_suspend = not admitted
        patch = self._runtime_patch(wl) if admitted else {"manager": MANAGER}
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

        def apply(o: dict[str, Any]) -> None:
            o.setdefault("spec", {})["suspend"] = want_suspend
            o["spec"]["runtimePatches"] = new_patches

        with contextlib.suppress(ApiError):
            self.store.mutate(TRAINJOBS, tj["metadata"]["namespace"], tj["metadata"]["name"], apply)

    def _runtime_patch(self, wl: dict[str, Any]) -> dict[str, Any]:
        """Kueue's patch on admission: podset labels, flavor node labels and tolerations."""
        rjobs = []
        for psa in (wl["status"].get("admission") or {}).get("podSetAssignments") or []:
            flavor_names_ = sorted(set((psa.get("flavors") or {}).values()))
            node_selector: dict[str, str] = {}
            tolerations: list[dict[str, Any]] = []
            for fname in flavor_names_:
                rf = self.store.try_get(RESOURCE_FLAVORS, None, fname) or {}
                node_selector.update((rf.get("spec") or {}).get("nodeLabels") or {})
                tolerations += (rf.get("spec") or {}).get("tolerations") or []
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
