"""`metadata.managedFields` as the apiserver's field manager writes them on create, update and
patch (k8s.io/apimachinery `pkg/util/managedfields/internal`: `managedfieldsupdater.go`,
`stripmeta.go`, `managedfields.go`, and structured-merge-diff's `Updater.update`).

- The manager is `?fieldManager=`, else the User-Agent up to its first `/`
  (endpoints/handlers/create.go `managerOrUserAgent`, `prefixFromUserAgent`).
- An Update takes the fields it added or changed; every other manager loses the fields it
  changed or removed; a manager whose set becomes empty is dropped. The entry's `time` moves
  only when the operation took fields. An Apply (server-side apply) owns the fields of the
  applied configuration.
- apiVersion, kind, metadata.name/namespace/uid/resourceVersion/generation/creationTimestamp/
  selfLink/managedFields are never owned (stripmeta.go); an update of the main resource never
  owns status, an update of `/status` owns only status (the strategies' ResetFields).
- Entries are sorted by operation, time, manager, apiVersion, subresource
  (`sortEncodedManagedFields`).

Lists are atomic (a CRD list without `x-kubernetes-list-type` is), except the associative lists
kube-apiserver's built-in schemas key by name/type/uid and the `metadata.finalizers` set.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from ..core.apierror import ApiError, invalid
from ..core.selectors import field_invalid

Path = tuple[str, ...]
MAX_MANAGER_LENGTH = 128

_STRIPPED: set[Path] = {
    ("f:apiVersion",),
    ("f:kind",),
    ("f:metadata", "f:name"),
    ("f:metadata", "f:namespace"),
    ("f:metadata", "f:creationTimestamp"),
    ("f:metadata", "f:selfLink"),
    ("f:metadata", "f:uid"),
    ("f:metadata", "f:generation"),
    ("f:metadata", "f:managedFields"),
    ("f:metadata", "f:resourceVersion"),
    ("f:metadata", "f:deletionTimestamp"),
    ("f:metadata", "f:deletionGracePeriodSeconds"),
}
# Map-typed fields (their own presence is owned, written as ".": {}).
_MAPS = {"labels", "annotations", "nodeSelector", "limits", "requests", "data", "matchLabels"}
# Associative lists of the built-in types: field -> merge key.
_KEYED = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
}
_SETS = {("f:metadata", "f:finalizers")}
_MARK = object()


def manager_name(field_manager: str | None, user_agent: str) -> str:
    """The manager of a request, validated like ValidateFieldManager (422 on PatchOptions,
    CreateOptions or UpdateOptions)."""
    if field_manager:
        return field_manager
    prefix = user_agent.split("/")[0]
    return "".join(c for c in prefix if c.isprintable())[:MAX_MANAGER_LENGTH]


def validate_manager(field_manager: str | None, options_kind: str) -> None:
    if not field_manager:
        return
    causes = []
    if len(field_manager) > MAX_MANAGER_LENGTH:
        causes.append(
            {
                "reason": "FieldValueTooLong",
                "message": f"Too long: may not be more than {MAX_MANAGER_LENGTH} bytes",
                "field": "fieldManager",
            }
        )
    for i, ch in enumerate(field_manager):
        if not ch.isprintable():
            detail = f"invalid character U+{ord(ch):04X} (at position {i})"
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": field_invalid("", field_manager, detail).split(": ", 1)[1],
                    "field": "fieldManager",
                }
            )
    if causes:
        raise invalid(options_kind, "meta.k8s.io", "", causes)


def _paths(value: Any, path: Path, out: dict[Path, Any], in_keyed: bool = False) -> None:
    if isinstance(value, dict):
        if not value:
            out[path] = {}
            return
        if in_keyed or (path and path[-1][2:] in _MAPS):
            out[path] = _MARK
        for key, sub in value.items():
            _paths(sub, (*path, "f:" + key), out)
        return
    if isinstance(value, list) and path:
        name = path[-1][2:]
        merge_key = _KEYED.get(name)
        if path in _SETS and all(isinstance(v, (str, int, bool)) for v in value) and value:
            for item in value:
                out[(*path, "v:" + json.dumps(item, separators=(",", ":")))] = item
            return
        if (
            merge_key
            and value
            and all(isinstance(v, dict) and merge_key in v for v in value)
            and len({json.dumps(v[merge_key]) for v in value}) == len(value)
        ):
            for item in value:
                key = json.dumps({merge_key: item[merge_key]}, separators=(",", ":"))
                _paths(item, (*path, "k:" + key), out, in_keyed=True)
            return
    out[path] = value


def field_paths(obj: dict[str, Any], scope: str = "main") -> dict[Path, Any]:
    """Every owned path of `obj` with its value; `scope` "main" drops status, "status" keeps
    only status."""
    out: dict[Path, Any] = {}
    _paths(obj, (), out)
    out.pop((), None)

    def keep(p: Path) -> bool:
        if any(p[: len(s)] == s for s in _STRIPPED) or p == ("f:metadata",):
            return False
        is_status = p[:1] == ("f:status",)
        return is_status if scope == "status" else not is_status

    return {p: v for p, v in out.items() if keep(p)}


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    """A set of paths as FieldsV1 (a member with members below it gets ".": {})."""
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
        if any(len(q) > len(path) and q[: len(path)] == path for q in paths):
            node.setdefault(".", {})
    return tree


def from_fields_v1(tree: Any, path: Path = ()) -> set[Path]:
    if not isinstance(tree, dict):
        raise ValueError("fieldsV1 must be an object")
    out: set[Path] = set()
    if not tree and path:
        out.add(path)
    for key, sub in tree.items():
        if key == ".":
            out.add(path)
        elif not isinstance(sub, dict) or not sub:
            out.add((*path, key))
        else:
            out |= from_fields_v1(sub, (*path, key))
    return out


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ident(entry: dict[str, Any]) -> tuple[str, str, str, str]:
    op = entry.get("operation", "")
    api_version = "" if op == "Apply" else entry.get("apiVersion", "")
    return (entry.get("manager", ""), op, api_version, entry.get("subresource", ""))


def _decode(entries: Any) -> list[dict[str, Any]]:
    """The entries with their sets; malformed managed fields are reset, as the field manager
    does (it logs and starts over)."""
    out = []
    try:
        for entry in entries or []:
            out.append({**entry, "_set": from_fields_v1(entry.get("fieldsV1") or {})})
    except (ValueError, AttributeError, TypeError):
        return []
    return out


def _encode(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for e in entries:
        if not e["_set"]:
            continue
        entry = {k: v for k, v in e.items() if k != "_set"}
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = to_fields_v1(e["_set"])
        ordered = {
            k: entry[k]
            for k in ("manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1")
            if k in entry
        }
        if entry.get("subresource"):
            ordered["subresource"] = entry["subresource"]
        out.append(ordered)
    out.sort(
        key=lambda e: (
            e.get("operation", ""),
            e.get("time", ""),
            e.get("manager", ""),
            e.get("apiVersion", ""),
            e.get("subresource", ""),
        )
    )
    return out


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    operation: str = "Update",
    subresource: str = "",
    applied: dict[str, Any] | None = None,
) -> None:
    """Set new.metadata.managedFields after `manager` turned `old` (None: a create) into `new`
    (`applied`: the configuration of an Apply)."""
    scope = "status" if subresource == "status" else "main"
    meta = new.setdefault("metadata", {})
    old_meta = (old or {}).get("metadata") or {}
    # decodeLiveOrNew: managed fields sent with the object replace the live ones (not for a
    # subresource); an object that sends none keeps the live ones.
    if old is None or ("managedFields" in meta and not subresource):
        entries = _decode(meta.get("managedFields"))
    else:
        entries = _decode(old_meta.get("managedFields"))
    new_paths = field_paths(new, scope)
    old_paths = field_paths(old, scope) if old is not None else {}
    changed = {p for p, v in new_paths.items() if p not in old_paths or not _same(old_paths[p], v)}
    removed = set(old_paths) - set(new_paths)
    ident = (manager, operation, "" if operation == "Apply" else api_version, subresource)
    mine = next((e for e in entries if _ident(e) == ident), None)
    if operation == "Apply":
        # the applied configuration's fields; a map's own presence is not (SetFromValue of the
        # configuration owns its leaves and the keyed list items)
        config_paths = field_paths(applied if applied is not None else new, scope)
        took = {
            p for p, v in config_paths.items() if not (v is _MARK and p[-1].startswith("f:"))
        } & set(new_paths)
        lose = removed | (took & changed)
        touched = bool(changed or removed) or mine is None or mine["_set"] != took
    else:
        took = changed
        lose = removed | changed
        touched = bool(took)
    for entry in entries:
        entry["_set"] -= lose
    if touched and took:
        if mine is None:
            mine = {"manager": manager, "operation": operation, "_set": set()}
            if subresource:
                mine["subresource"] = subresource
            entries.append(mine)
        mine["apiVersion"] = api_version
        mine["time"] = _now()
        mine["_set"] = set(took) if operation == "Apply" else (mine["_set"] | took) - removed
    meta["managedFields"] = _encode(entries)
    if not meta["managedFields"]:
        del meta["managedFields"]


def require_apply_manager(field_manager: str | None) -> None:
    """ValidatePatchOptions: an apply patch needs ?fieldManager=."""
    if not field_manager:
        raise invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: is required for apply patch",
                    "field": "fieldManager",
                }
            ],
        )


__all__ = [
    "ApiError",
    "field_paths",
    "from_fields_v1",
    "manager_name",
    "require_apply_manager",
    "to_fields_v1",
    "update",
    "validate_manager",
]
