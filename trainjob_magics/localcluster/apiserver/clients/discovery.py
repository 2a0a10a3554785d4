"""Legacy discovery documents built from the Kind registry (`/api`, `/apis`, `/api/v1`,
`/apis/GROUP`, `/apis/GROUP/VERSION`): what kubectl and dynamic clients read first."""

from __future__ import annotations

from typing import Any

from ...core.resources import Registry


def api_versions(server_address: str) -> dict[str, Any]:
    """GET /api."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_doc(group: str, versions: list[str]) -> dict[str, Any]:
    gv = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gv, "preferredVersion": gv[-1]}


def api_group(reg: Registry, group: str) -> dict[str, Any] | None:
    """GET /apis/GROUP."""
    versions = reg.groups().get(group)
    if not group or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, versions)}


def api_group_list(reg: Registry) -> dict[str, Any]:
    """GET /apis."""
    groups = [_group_doc(g, v) for g, v in sorted(reg.groups().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(reg: Registry, group: str, version: str) -> dict[str, Any] | None:
    """GET /api/v1 or /apis/GROUP/VERSION."""
    kinds = [k for k in reg.kinds.values() if k.group == group and k.version == version]
    if not kinds:
        return None
    resources: list[dict[str, Any]] = []
    for k in sorted(kinds, key=lambda k: k.plural):
        entry: dict[str, Any] = {
            "name": k.plural,
            "singularName": k.singular or k.kind.lower(),
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": list(k.verbs),
        }
        if k.short_names:
            entry["shortNames"] = list(k.short_names)
        if k.categories:
            entry["categories"] = list(k.categories)
        resources.append(entry)
        for sub in k.subresources:
            verbs = {
                "status": ["get", "patch", "update"],
                "log": ["get"],
                "exec": ["create", "get"],
                "portforward": ["create", "get"],
                "eviction": ["create"],
            }
            sub_kind = {
                "log": "Pod",
                "exec": "PodExecOptions",
                "portforward": "PodPortForwardOptions",
                "eviction": "Eviction",
            }.get(sub, k.kind)
            resources.append(
                {
                    "name": f"{k.plural}/{sub}",
                    "singularName": "",
                    "namespaced": k.namespaced,
                    "kind": sub_kind,
                    "verbs": verbs.get(sub, ["get"]),
                    # kubectl drain reads the Eviction's group/version here (CheckEvictionSupport)
                    **({"group": "policy", "version": "v1"} if sub == "eviction" else {}),
                }
            )
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }
