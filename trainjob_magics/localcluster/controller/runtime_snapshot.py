"""Trainer v2.3's runtime snapshot: the ConfigMap ``<trainjob>-runtime-snapshot`` that holds the
runtime a TrainJob was first reconciled from (kubeflow/trainer pkg/runtime/core/snapshot.go,
v2.3.0; called from NewObjects in pkg/runtime/core/{clustertrainingruntime,trainingruntime}.go).

createRuntimeSnapshot serializes the typed runtime object with sigs.k8s.io/yaml (encoding/json,
then YAML with sorted keys) into data key ``runtime``, owned by the TrainJob (controller,
blockOwnerDeletion), applied with field owner ``trainer``. getRuntimeSnapshot checks the owner,
the key, the YAML and that the runtime is the one the TrainJob refers to.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from ..core.store import now_rfc3339

SNAPSHOT_SUFFIX = "-runtime-snapshot"
RUNTIME_KEY = "runtime"
FIELD_MANAGER = "trainer"
TRAINER_GROUP = "trainer.kubeflow.org"


class SnapshotError(Exception):
    """The snapshot ConfigMap exists but cannot be used (getRuntimeSnapshot's errors)."""


def snapshot_name(trainjob_name: str) -> str:
    return trainjob_name + SNAPSHOT_SUFFIX


def _template(obj: dict[str, Any]) -> dict[str, Any]:
    """A non-pointer ``*TemplateSpec`` struct: encoding/json never omits a struct, so
    ``metadata`` and ``spec`` are always there (creationTimestamp is omitzero)."""
    obj.setdefault("metadata", {})
    obj.setdefault("spec", {})
    return obj


def typed_runtime(runtime: dict[str, Any]) -> dict[str, Any]:
    """``runtime`` as encoding/json writes the typed (Cluster)TrainingRuntime: only its Go
    fields (no status), the always-present struct fields filled in (JobSetTemplateSpec,
    JobTemplateSpec, PodTemplateSpec, a container's resources)."""
    out = {k: copy.deepcopy(runtime[k]) for k in ("apiVersion", "kind", "metadata", "spec")}
    spec = out.setdefault("spec", {})
    template = _template(spec.setdefault("template", {}))
    for rjob in template["spec"].get("replicatedJobs") or []:
        job = _template(rjob.setdefault("template", {}))
        pod = _template(job["spec"].setdefault("template", {}))
        for key in ("initContainers", "containers"):
            for container in pod["spec"].get(key) or []:
                container.setdefault("resources", {})
    return out


def snapshot_yaml(runtime: dict[str, Any]) -> str:
    """sigs.k8s.io/yaml.Marshal of the typed runtime: sorted keys, block style, 2 spaces."""
    return yaml.safe_dump(
        typed_runtime(runtime), sort_keys=True, default_flow_style=False, allow_unicode=True
    )


def snapshot_configmap(trainjob: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap createRuntimeSnapshot applies for ``trainjob``."""
    meta = trainjob["metadata"]
    uid = meta["uid"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": snapshot_name(meta["name"]),
            "namespace": meta["namespace"],
            "ownerReferences": [
                {
                    "apiVersion": trainjob.get("apiVersion", f"{TRAINER_GROUP}/v1alpha1"),
                    "kind": "TrainJob",
                    "name": meta["name"],
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            # client.Apply(..., client.FieldOwner("trainer"), client.ForceOwnership)
            "managedFields": [
                {
                    "manager": FIELD_MANAGER,
                    "operation": "Apply",
                    "apiVersion": "v1",
                    "time": now_rfc3339(),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:data": {f"f:{RUNTIME_KEY}": {}},
                        "f:metadata": {"f:ownerReferences": {f'k:{{"uid":"{uid}"}}': {}}},
                    },
                }
            ],
        },
        "data": {RUNTIME_KEY: snapshot_yaml(runtime)},
    }


def read_snapshot(configmap: dict[str, Any], trainjob: dict[str, Any]) -> dict[str, Any]:
    """The runtime in ``configmap``; SnapshotError with getRuntimeSnapshot's message when it is
    not this TrainJob's or not a runtime of the name, group and kind the TrainJob refers to.

    The kind must be the one referred to (pkg/runtime/core/snapshot.go getRuntimeSnapshot): a
    runtime is fetched by its kind and name only, so a TrainingRuntime never stands in for a
    ClusterTrainingRuntime of the same name.
    """
    meta = trainjob["metadata"]
    owner = next(
        (
            r
            for r in (configmap.get("metadata") or {}).get("ownerReferences") or []
            if r.get("controller")
        ),
        None,
    )
    if owner is None or owner.get("uid") != meta.get("uid"):
        raise SnapshotError(
            "invalid runtime snapshot: a snapshot configmap exists but is owned by another object"
        )
    data = configmap.get("data") or {}
    if RUNTIME_KEY not in data:
        raise SnapshotError(
            f'invalid runtime snapshot: snapshot ConfigMap missing "{RUNTIME_KEY}" data key'
        )
    try:
        runtime = yaml.safe_load(data[RUNTIME_KEY])
    except yaml.YAMLError as exc:
        raise SnapshotError(
            f"invalid runtime snapshot: unable to unmarshal the snapshot: {exc}"
        ) from None
    if not isinstance(runtime, dict):
        raise SnapshotError(
            "invalid runtime snapshot: unable to unmarshal the snapshot: error unmarshaling "
            f"JSON: while decoding JSON: json: cannot unmarshal {type(runtime).__name__} into Go "
            "value of type v1alpha1.ClusterTrainingRuntime"
        )
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    group = str(runtime.get("apiVersion") or "").rpartition("/")[0]
    kind = str(runtime.get("kind") or "")
    name = str((runtime.get("metadata") or {}).get("name") or "")
    want_kind = ref.get("kind") or "ClusterTrainingRuntime"
    want_group = ref.get("apiGroup") or TRAINER_GROUP
    if kind != want_kind or group != want_group or name != ref.get("name"):
        raise SnapshotError(
            "invalid runtime snapshot: the snapshot refers to the wrong runtime: expecting a "
            "runtime with name, api group and kind of "
            f'"{ref.get("name", "")}", "{want_group}", "{want_kind}" but found runtime with '
            f'name, api group and kind of "{name}", "{group}", "{kind}"'
        )
    return runtime


__all__ = [
    "RUNTIME_KEY",
    "SNAPSHOT_SUFFIX",
    "SnapshotError",
    "read_snapshot",
    "snapshot_configmap",
    "snapshot_name",
    "snapshot_yaml",
    "typed_runtime",
]
