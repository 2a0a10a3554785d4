"""``connect(..., dry_run=True)``: the TrainJob as the API server would store it (after a
server-side ``dryRun=All`` create, so webhooks, schema and CEL rules checked it), cleaned of
what the server owns, so ``kubectl apply -f`` of it creates the same TrainJob."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

SERVER_METADATA = (
    "managedFields",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
DRY_RUN_QUERY = [("dryRun", "All"), ("fieldValidation", "Strict")]


def clean_manifest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` without status and server-owned metadata."""
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    meta = out.get("metadata") or {}
    for key in SERVER_METADATA:
        meta.pop(key, None)
    for key in ("labels", "annotations"):
        if key in meta and not meta[key]:
            del meta[key]
    return out


def to_yaml(obj: Mapping[str, Any]) -> str:
    """The manifest as YAML (block style, keys in their order)."""
    import yaml  # PyYAML comes with the kubernetes client

    return yaml.safe_dump(dict(obj), sort_keys=False, default_flow_style=False)


__all__ = ["DRY_RUN_QUERY", "clean_manifest", "to_yaml"]
