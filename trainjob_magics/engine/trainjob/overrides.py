"""Render a :class:`~.shaping.PodShaping` into the TrainJob field each Trainer release has.

- 2.0: ``spec.podSpecOverrides`` (pod spec only: no pod metadata, no imagePullSecrets; labels
  and annotations go to ``spec.labels``/``spec.annotations``, which reach the JobSet);
- 2.1: ``spec.podTemplateOverrides`` (pod metadata and spec);
- 2.2, 2.3: ``spec.runtimePatches`` with our own manager. 2.2 merges each
  ``replicatedJobs[].template`` into the runtime's job of that name and ignores unknown names;
  2.3 strategic-merges the whole patch into the JobSet spec, so an unknown name would ADD a
  replicated job (kubeflow/trainer pkg/runtime/core/trainingruntime.go at v2.2.1 and v2.3.0).

Every release strategic-merges pod templates: a container named in a patch that the pod lacks
is added, without an image. So each replicated job of the runtime is named, and a container
entry goes only to the jobs whose pods have that container: the trainer container ``node``
gets the mounts; other containers get what the ``--pod-patch`` gives them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInputError
from .served import RUNTIME_PATCHES, SPEC_OVERRIDES, TEMPLATE_OVERRIDES, TrainerAPI
from .shaping import SHM_PATH, PodShaping, Volume
from .trainer_pod import NODE, TRAINER_CONTAINER

MANAGER = "trainjob-magics.kubeflow.org/session"  # runtimePatches[].manager (max 253 chars)
SHM_VOLUME = "tjm-shm"

# Lists merged by a key (the patchMergeKey of k8s.io/api core/v1 PodSpec and Container).
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "env": "name",
    "volumeMounts": "mountPath",
}
_APPENDED = ("tolerations",)  # atomic in the CRDs: ours and the patch's together


@dataclass(frozen=True)
class ReplicatedJob:
    """A replicated job of the runtime and the container names of its pods."""

    name: str
    containers: tuple[str, ...]


FALLBACK_JOBS = (ReplicatedJob(NODE, (TRAINER_CONTAINER,)),)


def replicated_jobs(runtime: Mapping[str, Any] | None) -> tuple[ReplicatedJob, ...]:
    """The replicated jobs of a (Cluster)TrainingRuntime; the ``node`` job with a ``node``
    container when the runtime could not be read (the server then checks the rest)."""
    spec = (((runtime or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    found = []
    for rj in spec.get("replicatedJobs") or []:
        if not isinstance(rj, Mapping) or not rj.get("name"):
            continue
        pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get(
            "spec"
        ) or {}
        names = tuple(str(c.get("name")) for c in pod.get("containers") or [] if c.get("name"))
        found.append(ReplicatedJob(str(rj["name"]), names))
    return tuple(found) or FALLBACK_JOBS


def volume_name(vol: Volume, index: int) -> str:
    """``tjm-pvc-0``: a DNS-1123 label unique within the pod."""
    return f"tjm-{vol.kind}-{index}"


def _volume(vol: Volume, index: int) -> dict[str, Any]:
    name = volume_name(vol, index)
    if vol.kind == "pvc":
        source: dict[str, Any] = {"claimName": vol.source}
        if vol.read_only:
            source["readOnly"] = True
        return {"name": name, "persistentVolumeClaim": source}
    if vol.kind == "configmap":
        return {"name": name, "configMap": {"name": vol.source}}
    if vol.kind == "secret":
        return {"name": name, "secret": {"secretName": vol.source}}
    return {"name": name, "emptyDir": {"sizeLimit": vol.size} if vol.size else {}}


def _mount(vol: Volume, index: int) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": volume_name(vol, index), "mountPath": vol.path}
    if vol.read_only:
        mount["readOnly"] = True
    return mount


def pod_template(shaping: PodShaping, containers: Sequence[str]) -> dict[str, Any]:
    """The pod-template fragment (``metadata``, ``spec``) of one replicated job whose pods have
    ``containers``; the user's ``--pod-patch`` merged last."""
    spec: dict[str, Any] = {}
    volumes = [_volume(v, i) for i, v in enumerate(shaping.volumes)]
    mounts = [_mount(v, i) for i, v in enumerate(shaping.volumes)]
    if shaping.shm_size:
        volumes.append(
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shaping.shm_size}}
        )
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_PATH})
    if volumes:
        spec["volumes"] = volumes
    if mounts and TRAINER_CONTAINER in containers:
        spec["containers"] = [{"name": TRAINER_CONTAINER, "volumeMounts": mounts}]
    if shaping.service_account:
        spec["serviceAccountName"] = shaping.service_account
    if shaping.node_selector:
        spec["nodeSelector"] = dict(shaping.node_selector)
    if shaping.tolerations:
        spec["tolerations"] = [t.as_dict() for t in shaping.tolerations]
    if shaping.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in shaping.image_pull_secrets]
    metadata: dict[str, Any] = {}
    if shaping.labels:
        metadata["labels"] = dict(shaping.labels)
    if shaping.annotations:
        metadata["annotations"] = dict(shaping.annotations)
    template: dict[str, Any] = {}
    if metadata:
        template["metadata"] = metadata
    if spec:
        template["spec"] = spec
    if shaping.pod_patch:
        template = merge(template, _for_containers(shaping.pod_patch, containers))
    return template


def _for_containers(patch: Mapping[str, Any], containers: Sequence[str]) -> dict[str, Any]:
    """The patch with only the container entries this pod has (a strategic merge would add
    the others as containers without an image)."""
    out = copy.deepcopy(dict(patch))
    spec = out.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
        spec["containers"] = [
            c for c in spec["containers"] if isinstance(c, Mapping) and c.get("name") in containers
        ]
        if not spec["containers"]:
            del spec["containers"]
    return out


def merge(base: Any, patch: Any, key: str = "") -> Any:
    """A strategic merge of pod-template fragments: maps merged, named lists merged by their
    merge key, tolerations appended, anything else replaced by the patch."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(copy.deepcopy(base))
        for k, v in patch.items():
            out[k] = merge(out[k], v, k) if k in out else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list):
        if key in _APPENDED:
            return copy.deepcopy(base) + [p for p in copy.deepcopy(patch) if p not in base]
        merge_key = _MERGE_KEYS.get(key)
        if merge_key and all(isinstance(i, Mapping) for i in base + patch):
            out_list = [dict(copy.deepcopy(i)) for i in base]
            for item in patch:
                hit = next(
                    (i for i, b in enumerate(out_list) if b.get(merge_key) == item.get(merge_key)),
                    None,
                )
                if hit is None:
                    out_list.append(copy.deepcopy(dict(item)))
                else:
                    out_list[hit] = merge(out_list[hit], item)
            return out_list
    return copy.deepcopy(patch)


def check_patch_containers(shaping: PodShaping, jobs: Sequence[ReplicatedJob]) -> None:
    """A ``--pod-patch`` container that no pod of the runtime has is a one-line error."""
    spec = (shaping.pod_patch or {}).get("spec") or {}
    have = sorted({c for job in jobs for c in job.containers})
    if jobs == FALLBACK_JOBS:
        return  # the runtime was not readable: the server checks it
    for item in spec.get("containers") or []:
        name = item.get("name") if isinstance(item, Mapping) else None
        if not name:
            raise InvalidInputError(f"{shaping.pod_patch_source}: every container needs a name")
        if name not in have:
            raise InvalidInputError(
                f"{shaping.pod_patch_source}: no pod of the runtime has a container {name!r} "
                f"(containers: {', '.join(have) or 'none'}); patch one of those"
            )


def apply_shaping(
    body: dict[str, Any],
    shaping: PodShaping,
    served: TrainerAPI,
    jobs: Sequence[ReplicatedJob],
) -> dict[str, Any]:
    """Add ``shaping`` to a TrainJob ``body`` (changed in place and returned): labels and
    annotations on the TrainJob, the pod template through the field ``served`` has."""
    meta = body.setdefault("metadata", {})
    if shaping.labels:
        meta["labels"] = {**shaping.labels, **(meta.get("labels") or {})}
    if shaping.annotations:
        meta["annotations"] = {**shaping.annotations, **(meta.get("annotations") or {})}
    if not shaping.touches_pods:
        return body
    check_patch_containers(shaping, jobs)
    spec = body.setdefault("spec", {})
    groups: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for job in jobs:
        template = pod_template(shaping, job.containers)
        key = repr(sorted(template.items()))
        groups.setdefault(key, (template, []))[1].append(job.name)
    if served.field == SPEC_OVERRIDES:
        overrides = _spec_overrides(shaping, groups)
        if overrides:
            spec[SPEC_OVERRIDES] = overrides
        if shaping.labels:
            spec["labels"] = dict(shaping.labels)
        if shaping.annotations:
            spec["annotations"] = dict(shaping.annotations)
    elif served.field == TEMPLATE_OVERRIDES:
        spec[TEMPLATE_OVERRIDES] = [
            {"targetJobs": [{"name": n} for n in names], **template}
            for template, names in groups.values()
            if template
        ]
    else:
        spec.setdefault(RUNTIME_PATCHES, []).append(runtime_patch(shaping, jobs))
    return body


def _spec_overrides(
    shaping: PodShaping, groups: Mapping[str, tuple[dict[str, Any], list[str]]]
) -> list[dict[str, Any]]:
    if shaping.image_pull_secrets:
        raise InvalidInputError(
            "--image-pull-secret needs Kubeflow Trainer 2.1 or later (2.0's podSpecOverrides "
            "has no imagePullSecrets); ask your admin to add the secret to the service account "
            "or the runtime"
        )
    if (shaping.pod_patch or {}).get("metadata"):
        raise InvalidInputError(
            f"{shaping.pod_patch_source}: pod metadata needs Kubeflow Trainer 2.1 or later "
            "(2.0's podSpecOverrides patches the pod spec only); use --label/--annotation"
        )
    out = []
    for template, names in groups.values():
        pod_spec = template.get("spec") or {}
        if pod_spec:
            out.append({"targetJobs": [{"name": n} for n in names], **pod_spec})
    return out


def runtime_patch(shaping: PodShaping, jobs: Sequence[ReplicatedJob]) -> dict[str, Any]:
    """Our ``runtimePatches`` entry: every replicated job of the runtime named."""
    replicated = []
    for job in jobs:
        template = pod_template(shaping, job.containers)
        if template:
            replicated.append({"name": job.name, "template": {"spec": {"template": template}}})
    patch_template: dict[str, Any] = {"spec": {"replicatedJobs": replicated}}
    metadata: dict[str, Any] = {}
    if shaping.labels:
        metadata["labels"] = dict(shaping.labels)
    if shaping.annotations:
        metadata["annotations"] = dict(shaping.annotations)
    if metadata:  # the JobSet's labels and annotations (propagated by Trainer)
        patch_template["metadata"] = metadata
    return {"manager": MANAGER, "trainingRuntimeSpec": {"template": patch_template}}


def env_from_entries(kind: str, name: str, keys: Sequence[str]) -> list[dict[str, Any]]:
    """``env`` entries taking every key of a Secret/ConfigMap (``envFrom`` is not among the
    fields a TrainJob may patch; ``spec.trainer.env`` takes ``valueFrom`` in every release)."""
    ref = "secretKeyRef" if kind == "secret" else "configMapKeyRef"
    return [{"name": key, "valueFrom": {ref: {"name": name, "key": key}}} for key in keys]


__all__ = [
    "MANAGER",
    "ReplicatedJob",
    "apply_shaping",
    "env_from_entries",
    "merge",
    "pod_template",
    "replicated_jobs",
    "runtime_patch",
]
