"""The generic REST verbs: list, watch, create, update/patch, delete, deletecollection."""

from __future__ import annotations

import json
from typing import Any

import yaml
from aiohttp import web

from ..core.apierror import ApiError, invalid
from ..core.resources import EVENTS, PODS, TRAINJOBS, Kind
from ..core.selectors import (
    EVENT_FIELD_SELECTABLE,
    FIELD_SELECTABLE,
    parse_field_selector,
    parse_label_selector,
)
from ..core.store import random_suffix
from . import trainjob_schema
from .api_request import (
    Target,
    dry_run,
    field_validation,
    query_bool,
    query_int,
    send_initial_events,
)
from .api_response import json_response
from .clients.tables import include_object, to_table, wants_table
from .patch import JSON_PATCH, MERGE_TYPES, json_patch, merge_patch
from .server_context import ServerContext
from .watch_stream import WatchParams, serve_watch


def list_body(kind: Kind, rv: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """A `<Kind>List` answer (list, deletecollection)."""
    return {
        "kind": kind.list_kind,
        "apiVersion": kind.api_version,
        "metadata": {"resourceVersion": rv},
        "items": items,
    }


class RestHandlers:
    """REST verb methods of the ApiServer (a mixin; the ApiServer sets ctx)."""

    ctx: ServerContext

    def _selectors(self, request: web.Request, t: Target) -> tuple[list[Any], list[Any]]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        allowed = FIELD_SELECTABLE if t.kind.key == PODS.key else None
        if t.kind.key == EVENTS.key:
            allowed = EVENT_FIELD_SELECTABLE
        fields = parse_field_selector(request.query.get("fieldSelector"), allowed)
        return labels, fields

    def _list(self, request: web.Request, t: Target) -> web.Response:
        labels, fields = self._selectors(request, t)
        items, rv = self.ctx.store.list(t.kind, t.namespace, labels, fields)
        if wants_table(request.headers.get("Accept", "")):
            return json_response(to_table(t.kind, items, rv, include_object(request.query)))
        return json_response(list_body(t.kind, rv, items))

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        labels, fields = self._selectors(request, t)
        q = request.query
        timeout = query_int(q.get("timeoutSeconds"), "timeoutSeconds")
        params = WatchParams(
            namespace=t.namespace,
            labels=labels,
            fields=fields,
            resource_version=q.get("resourceVersion"),
            timeout=float(timeout) if timeout else None,
            bookmarks=query_bool(q.get("allowWatchBookmarks")),
            bookmark_interval=self.ctx.bookmark_interval,
            table=(include_object(q) if wants_table(request.headers.get("Accept", "")) else None),
            send_initial_events=send_initial_events(q),
        )
        return await serve_watch(request, self.ctx.store, t.kind, params, self.ctx.stopping)

    # -- writes ----------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            if "yaml" in request.headers.get("Content-Type", ""):
                return yaml.safe_load(raw)
            return json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(
                400,
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
            ) from exc

    def _admit(
        self, kind: Kind, op: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> list[str]:
        warnings: list[str] = []
        for hook in self.ctx.admission_hooks:
            warnings += hook(kind, op, obj, old) or []
        return warnings

    def _validate(
        self, kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> tuple[dict[str, Any], list[str]]:
        if kind.key != TRAINJOBS.key:
            return obj, []
        try:
            if old is None:
                return trainjob_schema.validate_trainjob(obj)
            return trainjob_schema.validate_trainjob_update(old, obj)
        except trainjob_schema.SchemaError as err:
            name = (obj.get("metadata") or {}).get("name", "")
            raise invalid(kind.kind, kind.group, name, err.causes) from err

    async def _create(self, request: web.Request, t: Target) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was not a JSON object")
        kind = t.kind
        if body.get("kind") not in (None, kind.kind) or body.get("apiVersion") not in (
            None,
            kind.api_version,
        ):
            raise ApiError(
                400,
                f"the API version in the data ({body.get('apiVersion')}) does not match the "
                f"expected API version ({kind.api_version})",
            )
        body.setdefault("apiVersion", kind.api_version)
        body.setdefault("kind", kind.kind)
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + random_suffix()
        if t.namespace is not None:
            if meta.get("namespace") not in (None, "", t.namespace):
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                )
            meta["namespace"] = t.namespace
        if not meta.get("name"):
            raise invalid(
                kind.kind,
                kind.group,
                "",
                [
                    {
                        "reason": "FieldValueRequired",
                        "message": "Required value: name or generateName is required",
                        "field": "metadata.name",
                    }
                ],
            )
        if "status" in kind.subresources:
            body.pop("status", None)
        body, warnings = self._validate(kind, body, None)
        warnings = field_validation(request, kind, warnings)
        warnings += self._admit(kind, "CREATE", body, None)
        if kind.key == TRAINJOBS.key:
            self.ctx.resolve_runtime(t.namespace or "default", body)
        if kind.key == "namespaces":
            body["status"] = {"phase": "Active"}
        if dry_run(request):
            return json_response(
                self.ctx.store.dry_run_create(kind, body, t.namespace), 201, warnings
            )
        created = self.ctx.store.create(kind, body, t.namespace)
        return json_response(created, 201, warnings)

    async def _update(self, request: web.Request, t: Target, verb: str) -> web.Response:
        kind, store = t.kind, self.ctx.store
        old = store.get(kind, t.namespace, t.name or "")
        body = await self._body(request)
        if verb == "patch":
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype == JSON_PATCH:
                new = json_patch(old, body)
            elif ctype in MERGE_TYPES:
                if not isinstance(body, dict):
                    raise ApiError(400, "merge patch body must be a JSON object")
                new = merge_patch(old, body)
            else:
                raise ApiError(415, f"the server does not support the media type {ctype!r}")
        else:
            new = body
        if not isinstance(new, dict):
            raise ApiError(400, "the body of the request was not a JSON object")
        meta = new.setdefault("metadata", {})
        if meta.get("name", t.name) != t.name:
            raise ApiError(
                400,
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({t.name})",
            )
        meta["name"] = t.name
        if kind.namespaced:
            meta["namespace"] = t.namespace
        if t.sub == "status":
            result = {**old, "status": new.get("status")}
            if new.get("status") is None:
                result.pop("status")
            if meta.get("resourceVersion"):
                result["metadata"] = {**old["metadata"], "resourceVersion": meta["resourceVersion"]}
            warnings: list[str] = []
        else:
            if "status" in kind.subresources:
                new["status"] = old.get("status")
                if new["status"] is None:
                    new.pop("status")
            result, warnings = self._validate(kind, new, old)
            warnings = field_validation(request, kind, warnings)
            if "status" in kind.subresources and "status" in old:
                result["status"] = old["status"]
            warnings += self._admit(kind, "UPDATE", result, old)
        if dry_run(request):
            return json_response(store.dry_run_replace(kind, result), 200, warnings)
        updated = store.replace(kind, result, check_rv=True)
        return json_response(updated, 200, warnings)

    def _grace(self, request: web.Request, body: Any) -> int | None:
        grace = query_int(request.query.get("gracePeriodSeconds"), "gracePeriodSeconds")
        if grace is None and isinstance(body, dict):
            grace = body.get("gracePeriodSeconds")
        return grace

    async def _delete(self, request: web.Request, t: Target) -> web.Response:
        kind, store = t.kind, self.ctx.store
        raw = await request.read()
        body = json.loads(raw) if raw.strip() else None
        obj = store.get(kind, t.namespace, t.name or "")
        if dry_run(request):
            return json_response(obj)
        if kind.key == PODS.key:
            grace = self._grace(request, body)
            if grace == 0:
                return json_response(store.remove(kind, t.namespace, t.name or ""))
            spec_grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            return json_response(
                store.mark_deleting(kind, t.namespace, t.name or "", grace or spec_grace)
            )
        store.remove(kind, t.namespace, t.name or "")
        return json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": t.name,
                    "group": kind.group,
                    "kind": kind.plural,
                    "uid": obj["metadata"]["uid"],
                },
            }
        )

    async def _delete_collection(self, request: web.Request, t: Target) -> web.Response:
        labels, fields = self._selectors(request, t)
        items, rv = self.ctx.store.list(t.kind, t.namespace, labels, fields)
        out = []
        for o in items:
            m = o["metadata"]
            if t.kind.key == PODS.key:
                out.append(self.ctx.store.mark_deleting(t.kind, m.get("namespace"), m["name"]))
            else:
                out.append(self.ctx.store.remove(t.kind, m.get("namespace"), m["name"]))
        return json_response(list_body(t.kind, rv, out))

    # -- pods/log and pods/exec ------------------------------------------------------------
