"""OpenAPI v2 (`/openapi/v2`, Swagger 2.0 JSON), built from the same group-version documents
as OpenAPI v3 (`openapi.py`): paths with `consumes`/`produces`, body and query parameters,
`x-kubernetes-action` and `x-kubernetes-group-version-kind`, and the schemas as
`#/definitions/...` (what kube-apiserver's aggregated v2 spec carries for each operation;
kubectl reads the PATCH `consumes` to pick a patch type, `explain --output
plaintext-openapiv2` the definitions).
"""

from __future__ import annotations

import copy
from typing import Any

from ...core.resources import Registry
from . import openapi

_PRODUCES = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]


def _refs(node: Any) -> Any:
    """Rewrite `#/components/schemas/X` to `#/definitions/X`."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                out[k] = v.replace("#/components/schemas/", "#/definitions/")
            else:
                out[k] = _refs(v)
        return out
    if isinstance(node, list):
        return [_refs(v) for v in node]
    return node


def _param(p: dict[str, Any]) -> dict[str, Any]:
    out = {"name": p["name"], "in": p["in"], **p.get("schema", {})}
    if p.get("required"):
        out["required"] = True
    return out


def _operation(op: dict[str, Any], method: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": op["operationId"],
        "schemes": ["https"],
        "produces": list(_PRODUCES),
        "parameters": [_param(p) for p in op.get("parameters", [])],
        "responses": {},
    }
    body = op.get("requestBody")
    if body:
        content = body.get("content", {})
        out["consumes"] = sorted(content) if method == "patch" else ["*/*"]
        schema = next(iter(content.values()), {}).get("schema", {})
        out["parameters"].insert(
            0, {"name": "body", "in": "body", "required": True, "schema": _refs(schema)}
        )
    else:
        out["consumes"] = ["*/*"]
    for code, resp in op.get("responses", {}).items():
        entry: dict[str, Any] = {"description": resp.get("description", "")}
        schema = next(iter(resp.get("content", {}).values()), {}).get("schema")
        if schema:
            entry["schema"] = _refs(schema)
        out["responses"][code] = entry
    for key in ("x-kubernetes-action", "x-kubernetes-group-version-kind"):
        if key in op:
            out[key] = copy.deepcopy(op[key])
    return out


def swagger_doc(reg: Registry) -> dict[str, Any]:
    """GET /openapi/v2."""
    paths: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    for group, versions in sorted(reg.groups().items()):
        for version in versions:
            doc = openapi.group_version_doc(reg, group, version)
            if doc is None:
                continue
            for path, item in doc["paths"].items():
                entry: dict[str, Any] = {}
                for method, op in item.items():
                    if method == "parameters":
                        entry["parameters"] = [_param(p) for p in op]
                    else:
                        entry[method] = _operation(op, method)
                paths[path] = entry
            for name, schema in doc["components"]["schemas"].items():
                definitions[name] = _refs(schema)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.4"},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {
            "BearerToken": {
                "description": "Bearer Token authentication",
                "type": "apiKey",
                "name": "authorization",
                "in": "header",
            }
        },
        "security": [{"BearerToken": []}],
    }
