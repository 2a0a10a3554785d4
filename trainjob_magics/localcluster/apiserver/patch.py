"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch on plain dicts.

Which patch types a resource accepts follows kube-apiserver: built-in kinds take all four
(handlers/patch.go `PatchResource`, installer.go), custom resources take JSON patch, merge
patch and apply (apiextensions-apiserver customresource_handler.go `supportedTypes`); any other
Content-Type is 415 UnsupportedMediaType `the body of the request was in an unknown format -
accepted media types include: ...` (negotiation.NewUnsupportedMediaTypeError).

The strategic merge patch follows apimachinery `pkg/util/strategicpatch/patch.go` for the
schemas of the built-in kinds served here: lists with a patch merge key (containers, env,
volumes, ... by name; ownerReferences by uid; conditions by type) merge element by element,
`metadata.finalizers` merges as a set, other lists are replaced; the directives `$patch`
(replace, delete, merge), `$retainKeys`, `$setElementOrder/<list>` and
`$deleteFromPrimitiveList/<list>` apply.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ..core.apierror import ApiError

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
BUILTIN_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)
CR_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)
MERGE_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)

# patchMergeKey of the built-in types' lists (k8s.io/api struct tags)
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "conditions": "type",
    "resourceClaims": "name",
}
PRIMITIVE_MERGE = {"finalizers"}  # ObjectMeta.finalizers: patchStrategy "merge"
_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


def unsupported_patch(accepted: tuple[str, ...]) -> ApiError:
    return ApiError(
        415,
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def _merge_list(name: str, original: list[Any], patch: list[Any], path: str) -> list[Any]:
    key = MERGE_KEYS.get(name)
    if key is None:
        if name in PRIMITIVE_MERGE and path == "metadata":
            out = list(original)
            out += [v for v in patch if v not in out]
            return out
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    out = [copy.deepcopy(v) for v in original]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(
                400, f"map: {item} does not contain declared merge key: {key}", "BadRequest"
            )
        index = next(
            (i for i, v in enumerate(out) if isinstance(v, dict) and v.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                out.pop(index)
            continue
        if index is None:
            out.append(strategic_merge_patch({}, item, name))
        else:
            out[index] = strategic_merge_patch(out[index], item, name)
    return out


def _order(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def ident(v: Any) -> Any:
        return json.dumps(v.get(key) if key and isinstance(v, dict) else v, sort_keys=True)

    rank = {ident(v): i for i, v in enumerate(order)}
    return sorted(items, key=lambda v: rank.get(ident(v), len(rank)))


def strategic_merge_patch(original: Any, patch: Any, path: str = "") -> Any:
    """Apply a strategic merge patch to `original` (a built-in kind's object)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge"):
        raise ApiError(400, f"Unknown patch type: {directive} in map: {patch}", "BadRequest")
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith(_ORDER):
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            name = key[len(_DELETE_PRIMITIVE) :]
            if isinstance(result.get(name), list) and isinstance(value, list):
                result[name] = [v for v in result[name] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(key, result[key], value, path)
        elif isinstance(value, list):
            result[key] = _merge_list(key, [], value, path)
        else:
            result[key] = copy.deepcopy(value)
    for key, order in patch.items():
        if key.startswith(_ORDER) and isinstance(order, list):
            name = key[len(_ORDER) :]
            if isinstance(result.get(name), list):
                result[name] = _order(result[name], order, MERGE_KEYS.get(name))
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> tuple[Any, str]:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, list):
            cur = cur[int(t)]
        elif isinstance(cur, dict) and t in cur:
            cur = cur[t]
        else:
            raise ApiError(
                422,
                "doc is missing path: /" + "/".join(tokens),
            )
    return cur, tokens[-1]


def _get(doc: Any, pointer: str) -> Any:
    cur = doc
    for t in _tokens(pointer):
        cur = cur[int(t)] if isinstance(cur, list) else cur[t]
    return cur


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens)
    if isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        parent[last] = value
    return doc


def _remove(doc: Any, pointer: str) -> Any:
    tokens = _tokens(pointer)
    parent, last = _parent(doc, tokens)
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        if last not in parent:
            raise ApiError(422, f"doc is missing key: {pointer}")
        del parent[last]
    return doc


def json_patch(target: Any, ops: list[dict[str, Any]]) -> Any:
    """Apply RFC 6902 operations; 422 on a failing op."""
    doc = copy.deepcopy(target)
    if not isinstance(ops, list):
        raise ApiError(400, "json patch body must be a list of operations")
    try:
        for op in ops:
            kind, path = op.get("op"), op.get("path", "")
            if kind == "add":
                doc = _add(doc, path, copy.deepcopy(op.get("value")))
            elif kind == "remove":
                doc = _remove(doc, path)
            elif kind == "replace":
                _get(doc, path)
                doc = _remove(doc, path)
                doc = _add(doc, path, copy.deepcopy(op.get("value")))
            elif kind == "test":
                if _get(doc, path) != op.get("value"):
                    raise ApiError(422, f"testing value {path} failed")
            elif kind in ("move", "copy"):
                value = copy.deepcopy(_get(doc, op["from"]))
                if kind == "move":
                    doc = _remove(doc, op["from"])
                doc = _add(doc, path, value)
            else:
                raise ApiError(422, f"Unexpected kind: {kind}")
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise ApiError(422, f"json patch failed: {exc}") from exc
    return doc
