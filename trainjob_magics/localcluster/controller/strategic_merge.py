"""Strategic merge patch, as Trainer applies its overrides and runtime patches.

Trainer merges ``podSpecOverrides`` (v2.0), ``podTemplateOverrides`` (v2.1) and
``runtimePatches`` (v2.2+) into the runtime's JobSet template with
``strategicpatch.StrategicMergePatch`` (k8s.io/apimachinery pkg/util/strategicpatch/patch.go),
whose list handling comes from the Go struct tags (``patchStrategy``/``patchMergeKey``) of
k8s.io/api core/v1 types.go, meta/v1 types.go and sigs.k8s.io/jobset api/jobset/v1alpha2.
This module is that algorithm (mergeMap / mergeSlice / normalizeElementOrder /
mergeSortedSlice) over plain dicts, with the patch metadata of the types Trainer merges into:
``JOBSET_SPEC``, ``JOB_TEMPLATE_SPEC``, ``POD_TEMPLATE_SPEC``, ``POD_SPEC``.

Directives: ``$patch: replace|delete`` in maps and list items and ``$retainKeys`` are applied;
``$setElementOrder/...`` and ``$deleteFromPrimitiveList/...`` (which only kubectl's patch
generation writes) are dropped.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

DIRECTIVE = "$patch"


@dataclass(frozen=True)
class Meta:
    """How a field merges: ``merge`` lists by ``key`` ("" for lists of scalars); ``fields``:
    the metadata of its items (lists) or of its own fields (maps)."""

    merge: bool = False
    key: str = ""
    fields: dict[str, Meta] = field(default_factory=dict)


def _merge_list(key: str, fields: dict[str, Meta] | None = None) -> Meta:
    return Meta(True, key, fields or {})


def _struct(fields: dict[str, Meta]) -> Meta:
    return Meta(False, "", fields)


# k8s.io/api core/v1 Container: ports, env, volumeMounts, volumeDevices.
_CONTAINER = {
    "ports": _merge_list("containerPort"),
    "env": _merge_list("name"),
    "volumeMounts": _merge_list("mountPath"),
    "volumeDevices": _merge_list("devicePath"),
}
# k8s.io/apimachinery meta/v1 ObjectMeta: finalizers (scalars), ownerReferences by uid.
OBJECT_META = {"finalizers": _merge_list(""), "ownerReferences": _merge_list("uid")}
# k8s.io/api core/v1 PodSpec; tolerations have no patchStrategy (replaced).
POD_SPEC = {
    "volumes": _merge_list("name"),
    "initContainers": _merge_list("name", _CONTAINER),
    "containers": _merge_list("name", _CONTAINER),
    "ephemeralContainers": _merge_list("name", _CONTAINER),
    "imagePullSecrets": _merge_list("name"),
    "hostAliases": _merge_list("ip"),
    "topologySpreadConstraints": _merge_list("topologyKey"),
    "schedulingGates": _merge_list("name"),
    "resourceClaims": _merge_list("name"),
}
POD_TEMPLATE_SPEC = {"metadata": _struct(OBJECT_META), "spec": _struct(POD_SPEC)}
JOB_TEMPLATE_SPEC = {
    "metadata": _struct(OBJECT_META),
    "spec": _struct({"template": _struct(POD_TEMPLATE_SPEC)}),
}
# sigs.k8s.io/jobset v1alpha2 JobSetSpec: replicatedJobs and their dependsOn merge by name.
JOBSET_SPEC = {
    "replicatedJobs": _merge_list(
        "name", {"template": _struct(JOB_TEMPLATE_SPEC), "dependsOn": _merge_list("name")}
    )
}


def strategic_merge(original: Any, patch: Any, fields: dict[str, Meta]) -> Any:
    """``patch`` applied to a copy of ``original`` (both JSON-like); ``fields``: the patch
    metadata of the type (``POD_SPEC``, ``JOBSET_SPEC``, ...)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    base = copy.deepcopy(original) if isinstance(original, dict) else {}
    return _merge_map(base, copy.deepcopy(patch), fields)


def _strip_directives(value: Any) -> tuple[Any, bool]:
    """removeDirectives (and discardNullValuesFromPatch, as StrategicMergePatch sets
    IgnoreUnmatchedNulls): drop ``$``-keys and nulls; (value, False) for a delete directive."""
    if isinstance(value, dict):
        if value.get(DIRECTIVE) == "delete":
            return None, False
        out = {}
        for k, v in value.items():
            if k.startswith("$") or v is None:  # IgnoreUnmatchedNulls: nested nulls dropped
                continue
            stripped, keep = _strip_directives(v)
            if keep:
                out[k] = stripped
        return out, True
    if isinstance(value, list):
        items = [_strip_directives(v) for v in value]
        return [v for v, keep in items if keep], True
    return value, True


def _merge_map(original: dict, patch: dict, fields: dict[str, Meta]) -> dict:
    directive = patch.pop(DIRECTIVE, None)
    if directive == "replace":
        return _strip_directives(patch)[0]
    if directive == "delete":
        return {}
    retain = patch.pop("$retainKeys", None)
    if isinstance(retain, list):
        for k in list(original):
            if k not in retain:
                del original[k]
    for k, pv in patch.items():
        if k.startswith("$"):
            continue
        if pv is None:
            original.pop(k, None)
            continue
        if k not in original:
            value, keep = _strip_directives(pv)
            if keep:
                original[k] = value
            continue
        ov = original[k]
        meta = fields.get(k, Meta())
        if isinstance(ov, dict) and isinstance(pv, dict):
            original[k] = _merge_map(ov, pv, meta.fields)
        elif isinstance(ov, list) and isinstance(pv, list) and meta.merge:
            original[k] = _merge_slice(ov, pv, meta)
        elif isinstance(ov, list) and isinstance(pv, list):
            original[k] = pv  # no patchStrategy: the patch list replaces
        else:
            value, keep = _strip_directives(pv)
            if keep:
                original[k] = value
            else:
                del original[k]
    return original


def _key_of(item: Any, key: str) -> Any:
    return item.get(key) if key and isinstance(item, dict) else item


def _index(items: list, item: Any, key: str) -> int:
    wanted = _key_of(item, key)
    for i, v in enumerate(items):
        if _key_of(v, key) == wanted:
            return i
    return -1


def _merge_slice(original: list, patch: list, meta: Meta) -> list:
    if not original and not patch:
        return original
    key = meta.key
    maps = any(isinstance(v, dict) for v in original + patch)
    if not maps:
        merged: list = []
        for v in original + patch:
            if v not in merged:
                merged.append(v)
        key = ""
    else:
        if not key:
            raise ValueError("cannot merge lists without merge key")
        original, patch = _special_elements(original, patch, key)
        merged = list(original)
        for item in patch:
            if key not in item:
                raise ValueError(f"map: {item} does not contain declared merge key: {key}")
            at = _index(merged, item, key)
            if at >= 0:
                merged[at] = _merge_map(merged[at], item, meta.fields)
            else:
                value, keep = _strip_directives(item)
                if keep:
                    merged.append(value)
    # enforce the order (normalizeElementOrder)
    patch_items = [v for v in merged if _index(patch, v, key) >= 0]
    server_only = [v for v in merged if _index(patch, v, key) < 0]
    patch_items.sort(key=lambda v: _index(patch, v, key))
    server_only.sort(key=lambda v: _index(original, v, key))
    return _merge_sorted(server_only, patch_items, original, key)


def _special_elements(original: list, patch: list, key: str) -> tuple[list, list]:
    """mergeSliceWithSpecialElements: ``$patch: delete`` items remove their match,
    ``$patch: replace`` makes the rest of the patch the whole list."""
    rest = []
    replace = False
    for item in patch:
        directive = item.get(DIRECTIVE) if isinstance(item, dict) else None
        if directive is None:
            rest.append(item)
        elif directive == "delete":
            original = [v for v in original if _key_of(v, key) != item.get(key)]
        elif directive == "replace":
            replace = True
        else:
            raise ValueError(f"unknown patch type: {directive} in map: {item}")
    if replace:
        return rest, []
    return original, rest


def _merge_sorted(left: list, right: list, server_order: list, key: str) -> list:
    """mergeSortedSlice: server-only items (left) into the patch items (right), keeping the
    relative order of both; a server item goes before a patch item only when both are in the
    live list and it is first there."""
    out = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li, ri = _index(server_order, left[i], key), _index(server_order, right[j], key)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


__all__ = ["JOBSET_SPEC", "OBJECT_META", "POD_SPEC", "POD_TEMPLATE_SPEC", "Meta", "strategic_merge"]
