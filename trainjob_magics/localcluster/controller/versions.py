"""The Trainer versions the local cluster imitates, and which Kueue versions can drive them.

What changes with the Trainer version (kubeflow/trainer tags v2.0.1, v2.1.0, v2.2.1, v2.3.0):

- the served TrainJob schema (``apiserver/trainjob_schema.py``, after the CRDs
  ``manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml``);
- how the TrainJob's own per-pod changes reach the JobSet: ``spec.podSpecOverrides`` (v2.0,
  ``pkg/runtime/core/trainingruntime.go`` mergePodSpecOverrides), ``spec.podTemplateOverrides``
  (v2.1, mergePodTemplateOverrides), ``spec.runtimePatches`` (v2.2 and later,
  mergeRuntimePatches);
- ``trainer.resourcesPerNode``: replaces the runtime container's limits/requests before v2.3
  (``pkg/runtime/framework/plugins/jobset/builder.go`` Trainer), is merged into them from v2.3
  (``pkg/runtime/core/trainingruntime.go`` newRuntimeInfo, PR 3602);
- the v2.3 runtime snapshot ConfigMap (``pkg/runtime/core/snapshot.go``).

Kueue's TrainJob integration writes its admission (podset labels, node selectors, tolerations)
into the field of the Trainer API it was built against
(kubernetes-sigs/kueue ``pkg/controller/jobs/trainjob/trainjob_controller.go``
RunWithPodSetsInfo, read at each tag):

- v0.14.0-v0.14.4 append ``spec.podSpecOverrides`` and record where they start in the
  annotation ``kueue.x-k8s.io/trainjob-override-idx`` (built against Trainer v2.0.1);
- v0.14.5-v0.14.8 append ``spec.podTemplateOverrides``, still with the annotation (#7755,
  Trainer v2.1.0);
- v0.15 and v0.16 append ``spec.podTemplateOverrides`` without it (Kueue's own entries are the
  ones labelled ``kueue.x-k8s.io/podset``);
- v0.17 and later fill their ``spec.runtimePatches`` entry (Trainer >= v2.2.0; kueue#10127).
  v0.17-v0.19 are built against Trainer v2.2 (v0.19.2's go.mod: v2.2.1) and still run on
  v2.3; 0.20 (and main from kueue#14504) require Trainer v2.3: "Trainer v2.2 and v2.3 don't have
  API compatibility".
"""

from __future__ import annotations

import re

TRAINER_VERSIONS = ("2.0", "2.1", "2.2", "2.3")
DEFAULT_TRAINER_VERSION = "2.3"

PODSPEC_OVERRIDES = "podSpecOverrides"
PODTEMPLATE_OVERRIDES = "podTemplateOverrides"
RUNTIME_PATCHES = "runtimePatches"

# The TrainJob field through which a Trainer version takes per-pod changes.
TRAINER_PATCH_FIELD = {
    "2.0": PODSPEC_OVERRIDES,
    "2.1": PODTEMPLATE_OVERRIDES,
    "2.2": RUNTIME_PATCHES,
    "2.3": RUNTIME_PATCHES,
}


def check_trainer_version(version: str) -> str:
    """``version`` when it is one of TRAINER_VERSIONS; ValueError otherwise."""
    if version not in TRAINER_VERSIONS:
        raise ValueError(
            f"trainer_version must be one of {', '.join(TRAINER_VERSIONS)}, not {version!r}"
        )
    return version


def at_least(version: str, floor: str) -> bool:
    """Whether Trainer ``version`` is ``floor`` or newer ("2.3" >= "2.2")."""
    return _numbers(version) >= _numbers(floor)


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def kueue_release(kueue_version: str) -> tuple[int, int]:
    """(minor, patch) of a Kueue version: "0.14.4" -> (14, 4); "0.14" is the newest patch of
    its minor (patch 99); "main" (the 2026-08 main, 0.20 development) -> (20, 99)."""
    if kueue_version == "main":
        return (20, 99)
    m = re.fullmatch(r"v?0\.(\d+)(?:\.(\d+))?", kueue_version)
    if not m:
        raise ValueError(f"not a Kueue version: {kueue_version!r} (expected 0.N, 0.N.M or main)")
    return (int(m[1]), int(m[2]) if m[2] is not None else 99)


def kueue_patch_field(kueue_version: str) -> str:
    """The TrainJob field Kueue ``kueue_version`` ("0.14.4", "0.17", "main") writes on
    admission."""
    minor, patch = kueue_release(kueue_version)
    if minor < 14 or (minor == 14 and patch <= 4):
        return PODSPEC_OVERRIDES
    if minor <= 16:
        return PODTEMPLATE_OVERRIDES
    return RUNTIME_PATCHES


def kueue_override_annotation(kueue_version: str) -> bool:
    """Whether Kueue records ``kueue.x-k8s.io/trainjob-override-idx`` (v0.14.x only)."""
    return kueue_release(kueue_version)[0] <= 14


def kueue_requires_trainer_23(kueue_version: str) -> bool:
    """Kueue 0.20 and main (kueue#14504, go.mod github.com/kubeflow/trainer/v2 v2.3.0)."""
    return kueue_release(kueue_version)[0] >= 20


_KUEUE_BUILT_AGAINST = {
    PODSPEC_OVERRIDES: "Trainer v2.0.1",
    PODTEMPLATE_OVERRIDES: "Trainer v2.1.0",
    RUNTIME_PATCHES: "Trainer v2.2 or later",
}


def check_version_pair(kueue_version: str, trainer_version: str) -> list[str]:
    """Check that Kueue ``kueue_version`` can drive Trainer ``trainer_version``.

    Raises ValueError for a pair upstream refuses: Kueue 0.14-0.16 patch TrainJob overrides,
    which Trainer 2.2 removed; Kueue 0.17 and later patch ``runtimePatches``, which exist only
    from Trainer 2.2; Kueue 0.20 and main require Trainer 2.3 (kueue#14504). Returns warnings
    (one line each) for a pair that runs but loses Kueue's patch: Kueue 0.14.0-0.14.4 with
    Trainer 2.1 (``podSpecOverrides`` became ``podTemplateOverrides``, so the API server prunes
    Kueue's node selectors and tolerations), Kueue 0.14.5-0.16 with Trainer 2.0.
    """
    check_trainer_version(trainer_version)
    writes = kueue_patch_field(kueue_version)
    takes = TRAINER_PATCH_FIELD[trainer_version]
    if kueue_requires_trainer_23(kueue_version) and trainer_version != "2.3":
        raise ValueError(
            f"Kueue {kueue_version} cannot drive Trainer {trainer_version}: Kueue 0.20 and main "
            "require Trainer 2.3 (Trainer 2.2 and 2.3 are not API compatible, kueue#14504); use "
            f"--trainer-version 2.3 with --kueue-version {kueue_version}, or Kueue 0.19 with "
            f"Trainer {trainer_version}"
        )
    if writes == takes:
        return []
    if writes == RUNTIME_PATCHES or takes == RUNTIME_PATCHES:
        need = "2.2 or 2.3" if writes == RUNTIME_PATCHES else "2.0 or 2.1"
        raise ValueError(
            f"Kueue {kueue_version} cannot drive Trainer {trainer_version}: Kueue "
            f"{kueue_version} writes its admission into TrainJob spec.{writes} (built against "
            f"{_KUEUE_BUILT_AGAINST[writes]}), and Trainer {trainer_version} has "
            f"spec.{takes} instead; use --trainer-version {need} with --kueue-version "
            f"{kueue_version}"
        )
    return [
        f"Kueue {kueue_version} writes TrainJob spec.{writes} (built against "
        f"{_KUEUE_BUILT_AGAINST[writes]}), which Trainer {trainer_version} replaced by "
        f"spec.{takes}: the API server prunes it, so the node selectors and tolerations of "
        "Kueue's ResourceFlavors do not reach the pods"
    ]


__all__ = [
    "DEFAULT_TRAINER_VERSION",
    "PODSPEC_OVERRIDES",
    "PODTEMPLATE_OVERRIDES",
    "RUNTIME_PATCHES",
    "TRAINER_PATCH_FIELD",
    "TRAINER_VERSIONS",
    "at_least",
    "check_trainer_version",
    "check_version_pair",
    "kueue_override_annotation",
    "kueue_patch_field",
    "kueue_release",
    "kueue_requires_trainer_23",
]
