"""OpenAPI v3 discovery (`/openapi/v3` and one document per group-version), built from the
Kind registry.

Why: kubectl >= 1.27 asks `/openapi/v3` before `create -f` / `apply -f`. When the
group-version document lists a PATCH operation for the object's GVK with a `fieldValidation`
parameter, kubectl skips client-side schema validation and sends `?fieldValidation=Strict`
instead (cli-runtime `queryParamVerifierV3.HasSupport`, kubectl `paramVerifyingSchema`). A 404
here makes kubectl fall back to `/openapi/v2` and, failing that too, refuse with
"failed to download openapi ... turn validation off with --validate=false".

The documents are minimal but valid: real paths and operations with
`x-kubernetes-group-version-kind` / `x-kubernetes-action`, and one schema per kind (TrainJob's
converted from the compact validator's schema, the others open objects), so `kubectl explain
trainjob.spec` works too.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ...core.resources import TRAINJOBS, Kind, Registry, is_custom_resource
from .. import trainjob_schema as tj_schema
from .kueue_schemas import KUEUE_GROUP, kueue_schema

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_OBJECT_META_REF = {"$ref": f"#/components/schemas/{META}.ObjectMeta"}


def schema_name(kind: Kind) -> str:
    """Component name as the apiserver spells it: reversed group + version + kind."""
    if not is_custom_resource(kind):
        return f"io.k8s.api.{kind.group.split('.')[0] or 'core'}.{kind.version}.{kind.kind}"
    group = ".".join(reversed(kind.group.split(".")))
    return f"{group}.{kind.version}.{kind.kind}"


def _gvk(kind: Kind, name: str | None = None) -> dict[str, str]:
    return {"group": kind.group, "version": kind.version, "kind": name or kind.kind}


def convert_compact(node: dict[str, Any]) -> dict[str, Any]:
    """The compact validator's schema node -> an OpenAPI v3 (structural) schema."""
    if node.get("object_meta"):
        return {"allOf": [_OBJECT_META_REF], "default": {}}
    out: dict[str, Any] = {}
    if node.get("type"):
        out["type"] = node["type"]
    if node.get("int_or_string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        out["x-kubernetes-int-or-string"] = True
    if node.get("preserve"):
        out["x-kubernetes-preserve-unknown-fields"] = True
    for key in ("default", "pattern", "format", "minimum", "maxItems", "minLength", "maxLength"):
        if key in node:
            out[key] = node[key]
    if "enum" in node:
        out["enum"] = list(node["enum"])
    if node.get("properties"):
        out["properties"] = {k: convert_compact(v) for k, v in node["properties"].items()}
    if node.get("required"):
        out["required"] = list(node["required"])
    if "additional" in node:
        out["additionalProperties"] = convert_compact(node["additional"])
    if "items" in node:
        out["items"] = convert_compact(node["items"])
    if node.get("map_keys"):
        out["x-kubernetes-list-type"] = "map"
        out["x-kubernetes-list-map-keys"] = list(node["map_keys"])
    return out


def _kind_schema(kind: Kind) -> dict[str, Any]:
    kueue = kueue_schema(kind.kind, _OBJECT_META_REF) if kind.group == KUEUE_GROUP else None
    if kind.key == TRAINJOBS.key:
        body = convert_compact(tj_schema.TRAINJOB_SCHEMA)
    elif kueue is not None:
        body = kueue
    else:
        body = {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"allOf": [_OBJECT_META_REF], "default": {}},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
    body.setdefault(
        "description", f"{kind.kind} ({kind.api_version}), as served by the local cluster."
    )
    body["x-kubernetes-group-version-kind"] = [_gvk(kind)]
    return body


def _list_schema(kind: Kind) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "items": {
                "type": "array",
                "items": {"$ref": f"#/components/schemas/{schema_name(kind)}"},
            },
            "metadata": {"$ref": f"#/components/schemas/{META}.ListMeta"},
        },
        "x-kubernetes-group-version-kind": [_gvk(kind, kind.list_kind)],
    }


def _meta_schemas() -> dict[str, dict[str, Any]]:
    string = {"type": "string"}
    string_map = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}
    return {
        f"{META}.ObjectMeta": {
            "type": "object",
            "description": "Standard object's metadata.",
            "properties": {
                "name": string,
                "generateName": string,
                "namespace": string,
                "uid": string,
                "resourceVersion": string,
                "generation": {"type": "integer", "format": "int64"},
                "creationTimestamp": {"type": "string", "format": "date-time"},
                "deletionTimestamp": {"type": "string", "format": "date-time"},
                "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
                "labels": string_map,
                "annotations": string_map,
                "finalizers": {"type": "array", "items": string},
                "ownerReferences": {
                    "type": "array",
                    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
                "managedFields": {
                    "type": "array",
                    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            },
        },
        f"{META}.ListMeta": {
            "type": "object",
            "properties": {
                "resourceVersion": string,
                "continue": string,
                "remainingItemCount": {"type": "integer", "format": "int64"},
            },
        },
        f"{META}.Status": {
            "type": "object",
            "properties": {
                "apiVersion": string,
                "kind": string,
                "status": string,
                "message": string,
                "reason": string,
                "code": {"type": "integer", "format": "int32"},
                "details": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "metadata": {"$ref": f"#/components/schemas/{META}.ListMeta"},
            },
            "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Status"}],
        },
        f"{META}.Patch": {"type": "object"},
        f"{META}.DeleteOptions": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }


def _param(name: str, where: str = "query", type_: str = "string") -> dict[str, Any]:
    p: dict[str, Any] = {"name": name, "in": where, "schema": {"type": type_, "uniqueItems": True}}
    if where == "path":
        p["required"] = True
    return p


_WRITE_PARAMS = [_param("dryRun"), _param("fieldManager"), _param("fieldValidation")]
_LIST_PARAMS = [
    _param("allowWatchBookmarks", type_="boolean"),
    _param("continue"),
    _param("fieldSelector"),
    _param("labelSelector"),
    _param("limit", type_="integer"),
    _param("resourceVersion"),
    _param("resourceVersionMatch"),
    _param("sendInitialEvents", type_="boolean"),
    _param("timeoutSeconds", type_="integer"),
    _param("watch", type_="boolean"),
]
# The patch types of the PATCH operation: built-in kinds take strategic merge patch, custom
# resources do not (apiextensions-apiserver), which is how kubectl decides between a strategic
# and a JSON merge patch (kubectl apply/patcher.go gvkSupportsPatchOpenAPIV3).
_CR_PATCH_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
)
_BUILTIN_PATCH_TYPES = (*_CR_PATCH_TYPES, "application/strategic-merge-patch+json")


def _op(
    kind: Kind, action: str, op_id: str, ok_ref: str, params: list[dict[str, Any]]
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": op_id,
        "parameters": list(params),
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": {"$ref": ok_ref}}},
            },
            "401": {"description": "Unauthorized"},
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(kind),
    }
    return op


def _paths(kind: Kind) -> dict[str, Any]:
    prefix = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    scope = "/namespaces/{namespace}" if kind.namespaced else ""
    collection = f"{prefix}{scope}/{kind.plural}"
    item = collection + "/{name}"
    ref = f"#/components/schemas/{schema_name(kind)}"
    list_ref = f"#/components/schemas/{schema_name(kind)}List"
    status_ref = f"#/components/schemas/{META}.Status"
    suffix = kind.kind + ("Namespaced" if kind.namespaced else "")
    common = [_param("pretty")]
    path_params = [_param("namespace", "path")] if kind.namespaced else []
    verbs = set(kind.verbs)
    coll: dict[str, Any] = {"parameters": common + path_params}
    if "list" in verbs:
        coll["get"] = _op(kind, "list", f"list{suffix}", list_ref, _LIST_PARAMS)
    if "create" in verbs:
        post = _op(kind, "post", f"create{suffix}", ref, _WRITE_PARAMS)
        post["requestBody"] = {
            "content": {"*/*": {"schema": {"$ref": ref}}},
            "required": True,
        }
        coll["post"] = post
    if "deletecollection" in verbs:
        coll["delete"] = _op(
            kind, "deletecollection", f"deletecollection{suffix}", status_ref, _LIST_PARAMS
        )
    one: dict[str, Any] = {"parameters": [_param("name", "path"), *path_params, *common]}
    if "get" in verbs:
        one["get"] = _op(kind, "get", f"read{suffix}", ref, [])
    if "update" in verbs:
        put = _op(kind, "put", f"replace{suffix}", ref, _WRITE_PARAMS)
        put["requestBody"] = {"content": {"*/*": {"schema": {"$ref": ref}}}, "required": True}
        one["put"] = put
    if "patch" in verbs:
        patch = _op(kind, "patch", f"patch{suffix}", ref, [*_WRITE_PARAMS, _param("force")])
        patch["requestBody"] = {
            "content": {
                t: {"schema": {"$ref": f"#/components/schemas/{META}.Patch"}}
                for t in (_CR_PATCH_TYPES if is_custom_resource(kind) else _BUILTIN_PATCH_TYPES)
            },
            "required": True,
        }
        one["patch"] = patch
    if "delete" in verbs:
        one["delete"] = _op(
            kind,
            "delete",
            f"delete{suffix}",
            status_ref,
            [_param("dryRun"), _param("gracePeriodSeconds", type_="integer")],
        )
    out = {collection: coll, item: one}
    return {p: v for p, v in out.items() if set(v) - {"parameters"}}


def gv_path(group: str, version: str) -> str:
    """`api/v1` or `apis/GROUP/VERSION` (the keys of the root document)."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def group_version_doc(reg: Registry, group: str, version: str) -> dict[str, Any] | None:
    """GET /openapi/v3/apis/GROUP/VERSION (or /openapi/v3/api/v1)."""
    kinds = [k for k in reg.kinds.values() if k.group == group and k.version == version]
    if not kinds:
        return None
    paths: dict[str, Any] = {}
    schemas = _meta_schemas()
    for k in sorted(kinds, key=lambda k: k.plural):
        paths.update(_paths(k))
        schemas[schema_name(k)] = _kind_schema(k)
        schemas[schema_name(k) + "List"] = _list_schema(k)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "description": "Bearer Token authentication",
                    "name": "authorization",
                    "in": "header",
                }
            },
        },
    }


def doc_hash(doc: dict[str, Any]) -> str:
    """The `hash=` query value: an uppercase SHA-512 of the document, as the apiserver uses."""
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()


def root_doc(reg: Registry) -> dict[str, Any]:
    """GET /openapi/v3: every served group-version -> its document's server-relative URL."""
    paths: dict[str, Any] = {}
    for group, versions in sorted(reg.groups().items()):
        for version in versions:
            doc = group_version_doc(reg, group, version)
            if doc is None:
                continue
            path = gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={doc_hash(doc)}"}
    return {"paths": paths}
