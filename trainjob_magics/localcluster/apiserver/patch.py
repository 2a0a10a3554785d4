"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) on plain dicts."""

from __future__ import annotations

import copy
from typing import Any

from ..core.apierror import ApiError

MERGE_TYPES = (
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",  # treated as a merge patch
    "application/apply-patch+yaml",
)
JSON_PATCH = "application/json-patch+json"


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
