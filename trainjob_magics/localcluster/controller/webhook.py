"""Trainer's validating webhook for the v2.0/v2.1 TrainJob overrides.

The TrainJob webhook (kubeflow/trainer pkg/webhooks/trainjob_webhook.go) runs the runtime's
custom validation plugins; the JobSet plugin's checks of ``spec.podSpecOverrides`` (v2.0.1) and
``spec.podTemplateOverrides`` (v2.1.0) are here
(pkg/runtime/framework/plugins/jobset/jobset.go Validate and
checkPodSpecOverridesImmutability / checkPodTemplateOverridesImmutability):

- every targetJob is a replicated job of the runtime;
- no ``env`` for the ``node``, ``dataset-initializer`` and ``model-initializer`` containers;
- v2.0: no replicated job is targeted twice;
- on update, the overrides change only while the TrainJob is suspended and no replicated job of
  its JobSet is active.

Upstream also checks that overridden containers exist, but against the runtime with the
overrides already merged in (newRuntimeInfo), so that check never fails; it is left out.
A denial is a 403 ``admission webhook "validator.trainjob.trainer.kubeflow.org" denied the
request: ...`` whose field errors are aggregated like field.ErrorList.ToAggregate (the Go value
of the overrides, printed with %#v upstream, is abbreviated).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.apierror import ApiError
from ..core.resources import JOBSETS, TRAINJOBS, Kind
from ..core.store import Store
from ..runtimes.loader import replicated_jobs
from .versions import PODSPEC_OVERRIDES, PODTEMPLATE_OVERRIDES, TRAINER_PATCH_FIELD

WEBHOOK = "validator.trainjob.trainer.kubeflow.org"
RESERVED_CONTAINERS = ("dataset-initializer", "model-initializer", "node")

RuntimeResolver = Callable[[str, dict[str, Any]], dict[str, Any]]


def _aggregate(errors: list[str]) -> str:
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def override_errors(
    field: str,
    runtime: dict[str, Any],
    new: dict[str, Any],
    old: dict[str, Any] | None,
    jobset: dict[str, Any] | None,
) -> list[str]:
    """The JobSet plugin's field errors for ``spec.<field>`` of ``new`` (an update of ``old``)."""
    type_name = "PodSpecOverride" if field == PODSPEC_OVERRIDES else "PodTemplateOverride"
    title = field[0].upper() + field[1:]
    path = f"spec.{field}"
    new_overrides = (new.get("spec") or {}).get(field) or []
    value = f"[]v1alpha1.{type_name}{{...}}"
    errors: list[str] = []
    if old is not None and ((old.get("spec") or {}).get(field) or []) != new_overrides:
        if not (new.get("spec") or {}).get("suspend"):
            errors.append(
                f"{path}: Forbidden: {title} can only be modified when the TrainJob is suspended"
            )
        else:
            for status in ((jobset or {}).get("status") or {}).get("replicatedJobsStatus") or []:
                if int(status.get("active") or 0) > 0:
                    errors.append(
                        f"{path}: Forbidden: {title} cannot be modified when the JobSet's "
                        f"ReplicatedJob {status.get('name')} is still active"
                    )
    rjob_names = {r.get("name") for r in replicated_jobs(runtime)}
    seen: set[str] = set()
    for override in new_overrides:
        targets = [t.get("name", "") for t in override.get("targetJobs") or []]
        if field == PODSPEC_OVERRIDES:
            for target in targets:
                if target in seen:
                    errors.append(f'{path}: Duplicate value: "{target}"')
                seen.add(target)
        containers = (
            override.get("containers")
            if field == PODSPEC_OVERRIDES
            else (override.get("spec") or {}).get("containers")
        ) or []
        for target in targets:
            if target not in rjob_names:
                errors.append(
                    f"{path}: Invalid value: {value}: must not have targetJob that doesn't exist "
                    "in the runtime job template"
                )
            for container in containers:
                if container.get("env") and container.get("name") in RESERVED_CONTAINERS:
                    errors.append(
                        f"{path}: Invalid value: {value}: must not have envs for the "
                        + ", ".join(RESERVED_CONTAINERS)
                        + " containers"
                    )
    return errors


def trainer_webhook(
    version: str, store: Store, resolve_runtime: RuntimeResolver
) -> Callable[[Kind, str, dict[str, Any], dict[str, Any] | None], list[str]]:
    """The admission hook of Trainer ``version`` (a no-op from v2.2, which has no overrides)."""
    field = TRAINER_PATCH_FIELD[version]

    def hook(kind: Kind, op: str, obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
        if kind.key != TRAINJOBS.key or field not in (PODSPEC_OVERRIDES, PODTEMPLATE_OVERRIDES):
            return []
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        try:
            runtime = resolve_runtime(namespace, obj)
        except ApiError:
            return []  # the runtimeRef check answers this one
        jobset = store.try_get(JOBSETS, namespace, meta.get("name", ""))
        errors = override_errors(field, runtime, obj, old if op == "UPDATE" else None, jobset)
        if errors:
            raise ApiError(
                403, f'admission webhook "{WEBHOOK}" denied the request: {_aggregate(errors)}'
            )
        return []

    return hook


__all__ = ["WEBHOOK", "override_errors", "trainer_webhook"]
