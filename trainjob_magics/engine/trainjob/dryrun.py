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


def _empty_patch(patch: Any) -> bool:
    """A ``runtimePatches`` entry that patches nothing: Kueue's webhook marker
    (``{manager: kueue.x-k8s.io/manager, trainingRuntimeSpec: {template: {spec: {}}}}``, added
    to every TrainJob it covers, kubernetes-sigs/kueue pkg/controller/jobs/trainjob)."""
    template = ((patch or {}).get("trainingRuntimeSpec") or {}).get("template") or {}
    return not template.get("spec") and not template.get("metadata")


def clean_manifest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` without status and server-owned metadata, and without the empty
    runtimePatches entries webhooks add on every create: Kueue 0.19 and older append theirs
    again even when present (kueue#15213), and a repeated manager is invalid."""
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    spec = out.get("spec") or {}
    if spec.get("runtimePatches"):
        kept = [p for p in spec["runtimePatches"] if not _empty_patch(p)]
        if kept:
            spec["runtimePatches"] = kept
        else:
            del spec["runtimePatches"]
    meta = out.get("metadata") or {}
    for key in SERVER_METADATA:
        meta.pop(key, None)
    for key in ("labels", "annotations"):
        if key in meta and not meta[key]:
            del meta[key]
    return out


def to_yaml(obj: Mapping[str, Any]) -> str:
    """The manifest as YAML (block style, keys in their order). A multi-line string (the
    keep-alive script) is a literal block, one line of the script per line, not one quoted
    string full of ``\\n`` and ``\\"``; it loads back the same."""
    import yaml  # PyYAML comes with the kubernetes client

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None  # PyYAML quotes what a block cannot hold
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(dict(obj), Dumper=Dumper, sort_keys=False, default_flow_style=False)


__all__ = ["DRY_RUN_QUERY", "clean_manifest", "to_yaml"]
