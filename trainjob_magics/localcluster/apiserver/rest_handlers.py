"""The generic REST verbs: get, list, watch, create, update/patch, delete, deletecollection.

Follows k8s.io/apiserver `pkg/endpoints/handlers` (get.go, create.go, update.go, patch.go,
delete.go): request bodies are negotiated by Content-Type (negotiation.NegotiateInputSerializer:
JSON, YAML, and protobuf for built-in kinds; anything else is 415), patch types per resource
(patch.py), `metadata.managedFields` written by the field manager (managed_fields.py), list
paging (paging.py), field selectors converted per kind as the kinds' field label conversions do.
events.k8s.io/v1 Events are served from the core/v1 Event objects (events_v1.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml
from aiohttp import web

from ..core.apierror import ApiError, invalid
from ..core.garbage import FOREGROUND, ORPHAN, GarbageCollector, policy_of
from ..core.resources import (
    EVENTS,
    EVENTS_V1,
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    PVC_PROTECTION,
    TRAINJOBS,
    Kind,
    is_custom_resource,
)
from ..core.selectors import (
    EVENT_FIELD_SELECTABLE,
    EVENTS_V1_FIELD_LABELS,
    FIELD_SELECTABLE,
    NAMESPACE_FIELD_SELECTABLE,
    Requirement,
    parse_field_selector,
    parse_label_selector,
)
from ..core.store import random_suffix
from . import events_v1, managed_fields, protobuf, trainjob_schema
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
from .paging import list_page, rv_or_500
from .patch import (
    APPLY_PATCH,
    BUILTIN_PATCH_TYPES,
    CR_PATCH_TYPES,
    JSON_PATCH,
    STRATEGIC_MERGE_PATCH,
    json_patch,
    merge_patch,
    strategic_merge_patch,
    unsupported_patch,
)
from .server_context import ServerContext
from .watch_stream import WatchParams, serve_watch

JSON = "application/json"
YAML = "application/yaml"


def list_body(
    kind: Kind, meta: dict[str, Any] | str, items: list[dict[str, Any]]
) -> dict[str, Any]:
    """A `<Kind>List` answer (list, deletecollection); `meta` is the ListMeta or its RV."""
    return {
        "kind": kind.list_kind,
        "apiVersion": kind.api_version,
        "metadata": {"resourceVersion": meta} if isinstance(meta, str) else meta,
        "items": items,
    }


def _media_type(request: web.Request) -> str:
    return request.headers.get("Content-Type", "").split(";")[0].strip().lower()


def _is_view(kind: Kind) -> bool:
    return kind.key == EVENTS_V1.key


# Pod updates may change metadata only here: the spec is immutable except for the fields
# pkg/apis/core/validation ValidatePodUpdate lets change, which the local cluster does not run.
_POD_SPEC_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)


def _namespace_label(ns: dict[str, Any]) -> None:
    """SetDefaults_Namespace (pkg/apis/core/v1/defaults.go): the immutable label
    `kubernetes.io/metadata.name` carries the namespace's name."""
    meta = ns.setdefault("metadata", {})
    labels = meta.get("labels") or {}
    labels["kubernetes.io/metadata.name"] = meta.get("name", "")
    meta["labels"] = labels


class RestHandlers:
    """REST verb methods of the ApiServer (a mixin; the ApiServer sets ctx)."""

    ctx: ServerContext

    # -- views: events.k8s.io/v1 Events are core/v1 Events ---------------------------------

    def _stored(self, kind: Kind) -> Kind:
        return EVENTS if _is_view(kind) else kind

    def _out(self, kind: Kind) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return events_v1.to_v1 if _is_view(kind) else (lambda obj: obj)

    # -- selectors --------------------------------------------------------------------------

    def _field_selector(self, kind: Kind, text: str | None) -> list[Requirement]:
        """The kind's field label conversion (core/v1 conversion.go for pods, events and
        namespaces; events/v1 conversion.go; apiextensions crConverter for custom resources:
        metadata.name, and metadata.namespace when namespaced)."""
        if _is_view(kind):
            return parse_field_selector(text, labels=EVENTS_V1_FIELD_LABELS)
        allowed = {
            PODS.key: FIELD_SELECTABLE,
            EVENTS.key: EVENT_FIELD_SELECTABLE,
            NAMESPACES.key: NAMESPACE_FIELD_SELECTABLE,
        }.get(kind.key)
        if allowed is None:
            allowed = {"metadata.name"} | ({"metadata.namespace"} if kind.namespaced else set())
        return parse_field_selector(text, allowed)

    def _selectors(self, request: web.Request, t: Target) -> tuple[list[Any], list[Any]]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = self._field_selector(t.kind, request.query.get("fieldSelector"))
        return labels, fields

    # -- reads ------------------------------------------------------------------------------

    def _get(self, request: web.Request, t: Target) -> web.Response:
        rv_or_500(request.query.get("resourceVersion"))  # the watch cache parses it (cacher Get)
        stored = self._stored(t.kind)
        obj = self.ctx.store.get(stored, t.namespace, t.name or "")
        out = self._out(t.kind)(obj)
        if t.sub is None and wants_table(request.headers.get("Accept", "")):
            rv = obj["metadata"]["resourceVersion"]
            table = to_table(t.kind, [obj], rv, include_object(request.query), objects=[out])
            return json_response(table)
        return json_response(out)

    def _list(self, request: web.Request, t: Target) -> web.Response:
        labels, fields = self._selectors(request, t)
        page = list_page(
            self.ctx.store, self._stored(t.kind), t.namespace, labels, fields, request.query
        )
        out = [self._out(t.kind)(o) for o in page.items]
        if wants_table(request.headers.get("Accept", "")):
            table = to_table(
                t.kind,
                page.items,
                page.rv,
                include_object(request.query),
                meta=page.meta(),
                objects=out,
            )
            return json_response(table)
        return json_response(list_body(t.kind, page.meta(), out))

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        labels, fields = self._selectors(request, t)
        q = request.query
        initial = send_initial_events(q)
        if not initial:
            rv_or_500(q.get("resourceVersion"))
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
            send_initial_events=initial,
            stored=self._stored(t.kind),
            convert=self._out(t.kind) if _is_view(t.kind) else None,
        )
        return await serve_watch(request, self.ctx.store, t.kind, params, self.ctx.stopping)

    # -- request bodies ---------------------------------------------------------------------

    def _accepted_media(self, kind: Kind) -> list[str]:
        if is_custom_resource(kind):
            return [JSON, YAML]
        return [JSON, YAML, protobuf.MEDIA_TYPE]

    async def _body(self, request: web.Request, kind: Kind) -> Any:
        """The request body in the negotiated format; 415 for a media type the resource does
        not take (NegotiateInputSerializer), 400 when it does not decode."""
        raw = await request.read()
        media = _media_type(request) or JSON
        accepted = self._accepted_media(kind)
        if media not in accepted:
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types "
                "include: " + ", ".join(accepted),
            )
        if media == protobuf.MEDIA_TYPE:
            if (kind.group, kind.kind) not in protobuf.DECODABLE:
                raise ApiError(
                    415,
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/json, application/yaml",
                )
            return protobuf.decode(raw, kind.kind, kind.group)
        try:
            if media == YAML:
                return yaml.safe_load(raw)
            return json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(
                400,
                f"couldn't get version/kind; json parse error: {exc}",
                "BadRequest",
            ) from exc

    async def _patch_body(self, request: web.Request, media: str) -> Any:
        raw = await request.read()
        try:
            if media == APPLY_PATCH:
                return yaml.safe_load(raw)
            return json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, f"error decoding patch: {exc}", "BadRequest") from exc

    # -- admission and validation -----------------------------------------------------------

    def _admit(
        self, kind: Kind, op: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> list[str]:
        warnings: list[str] = []
        for hook in self.ctx.admission_hooks:
            warnings += hook(kind, op, obj, old) or []
        return warnings

    def _validate(
        self, kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None, view: Kind
    ) -> tuple[dict[str, Any], list[str]]:
        if kind.key == EVENTS.key:
            name = (obj.get("metadata") or {}).get("name", "")
            events_v1.validate(obj, old, strict=_is_view(view), name=name)
            return obj, []
        if kind.key == PODS.key and old is not None:
            if obj.get("spec") != old.get("spec"):
                name = (obj.get("metadata") or {}).get("name", "")
                raise invalid(
                    "Pod",
                    "",
                    name,
                    [
                        {
                            "reason": "FieldValueForbidden",
                            "message": f"Forbidden: {_POD_SPEC_FORBIDDEN}",
                            "field": "spec",
                        }
                    ],
                )
            return obj, []
        if kind.key != TRAINJOBS.key:
            return obj, []
        try:
            if old is None:
                return trainjob_schema.validate_trainjob(obj)
            return trainjob_schema.validate_trainjob_update(old, obj)
        except trainjob_schema.SchemaError as err:
            name = (obj.get("metadata") or {}).get("name", "")
            raise invalid(kind.kind, kind.group, name, err.causes) from err

    def _manager(self, request: web.Request, options: str) -> str:
        fm = request.query.get("fieldManager")
        managed_fields.validate_manager(fm, options)
        return managed_fields.manager_name(fm, request.headers.get("User-Agent", ""))

    # -- writes -----------------------------------------------------------------------------

    async def _refuse_pod(self, request: web.Request) -> None:
        """A pod create: denied the way an admission plugin denies (apierrors.NewForbidden:
        `pods "name" is forbidden: ...`), since the local cluster runs only the pods its Job
        controller makes. Discovery still lists `create`, as kube-apiserver's does."""
        name = ""
        if (_media_type(request) or JSON) in (JSON, YAML):
            body = await self._body(request, PODS)
            if isinstance(body, dict):
                name = str((body.get("metadata") or {}).get("name") or "")
        subject = f'pods "{name}"' if name else "pods"
        details: dict[str, Any] = {"group": "", "kind": "pods"}
        if name:
            details["name"] = name
        raise ApiError(
            403,
            f"{subject} is forbidden: the local cluster runs only the pods its Job controller "
            "creates (TrainJob -> JobSet -> Job -> pods)",
            details=details,
        )

    async def _create(self, request: web.Request, t: Target) -> web.Response:
        view, kind = t.kind, self._stored(t.kind)
        if kind.key == PODS.key:
            await self._refuse_pod(request)
        manager = self._manager(request, "CreateOptions")
        body = await self._body(request, view)
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was not a JSON object")
        if body.get("kind") not in (None, view.kind) or body.get("apiVersion") not in (
            None,
            view.api_version,
        ):
            raise ApiError(
                400,
                f"the API version in the data ({body.get('apiVersion')}) does not match the "
                f"expected API version ({view.api_version})",
            )
        if _is_view(view):
            body = events_v1.from_v1(body)
        body["apiVersion"] = kind.api_version
        body["kind"] = kind.kind
        meta = body.setdefault("metadata", {})
        if meta is None:
            meta = body["metadata"] = {}
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
        for server_set in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            meta.pop(server_set, None)
        if kind.key == NAMESPACES.key:
            _namespace_label(body)
        body, warnings = self._validate(kind, body, None, view)
        warnings = field_validation(request, kind, warnings)
        warnings += self._admit(kind, "CREATE", body, None)
        if kind.key == TRAINJOBS.key:
            self.ctx.resolve_runtime(t.namespace or "default", body)
        # the field manager runs before the strategy's PrepareForCreate (handlers/create.go),
        # so what PrepareForCreate sets is owned by nobody
        managed_fields.update(None, body, manager=manager, api_version=view.api_version)
        if kind.key == NAMESPACES.key:  # namespace strategy.go PrepareForCreate
            body["status"] = {"phase": "Active"}
            spec = body.setdefault("spec", {})
            finalizers = spec.setdefault("finalizers", [])
            if "kubernetes" not in finalizers:
                finalizers.append("kubernetes")
        out = self._out(view)
        if dry_run(request):
            return json_response(
                out(self.ctx.store.dry_run_create(kind, body, t.namespace)), 201, warnings
            )
        created = self.ctx.store.create(kind, body, t.namespace)
        return json_response(out(created), 201, warnings)

    async def _update(self, request: web.Request, t: Target, verb: str) -> web.Response:
        view, kind, store = t.kind, self._stored(t.kind), self.ctx.store
        old = store.get(kind, t.namespace, t.name or "")
        out = self._out(view)
        operation, applied = "Update", None
        if verb == "patch":
            media = _media_type(request)
            accepted = CR_PATCH_TYPES if is_custom_resource(view) else BUILTIN_PATCH_TYPES
            if media not in accepted:
                raise unsupported_patch(accepted)
            fm = request.query.get("fieldManager")
            if media == APPLY_PATCH:
                managed_fields.require_apply_manager(fm)
            elif request.query.get("force") is not None:
                raise invalid(
                    "PatchOptions",
                    "meta.k8s.io",
                    "",
                    [
                        {
                            "reason": "FieldValueForbidden",
                            "message": "Forbidden: may not be specified for non-apply patch",
                            "field": "force",
                        }
                    ],
                )
            manager = self._manager(request, "PatchOptions")
            body = await self._patch_body(request, media)
            current = out(old)
            if media == JSON_PATCH:
                new = json_patch(current, body)
            else:
                if not isinstance(body, dict):
                    raise ApiError(400, "merge patch body must be a JSON object")
                if media == STRATEGIC_MERGE_PATCH:
                    new = strategic_merge_patch(current, body)
                else:
                    new = merge_patch(current, body)
                if media == APPLY_PATCH:
                    operation, applied = "Apply", body
        else:
            manager = self._manager(request, "UpdateOptions")
            new = await self._body(request, view)
        if not isinstance(new, dict):
            raise ApiError(400, "the body of the request was not a JSON object")
        if _is_view(view):
            new = events_v1.from_v1(new)
            if applied is not None:
                applied = events_v1.from_v1(applied)
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
        if kind.key == NAMESPACES.key and t.sub is None:
            _namespace_label(new)
        if t.sub == "status":
            result = {**old, "status": new.get("status")}
            if new.get("status") is None:
                result.pop("status")
            result["metadata"] = dict(old["metadata"])
            if meta.get("resourceVersion"):
                result["metadata"]["resourceVersion"] = meta["resourceVersion"]
            warnings: list[str] = []
        else:
            if "status" in kind.subresources:
                new["status"] = old.get("status")
                if new["status"] is None:
                    new.pop("status")
            result, warnings = self._validate(kind, new, old, view)
            warnings = field_validation(request, kind, warnings)
            if "status" in kind.subresources and "status" in old:
                result["status"] = old["status"]
            warnings += self._admit(kind, "UPDATE", result, old)
        managed_fields.update(
            old,
            result,
            manager=manager,
            api_version=view.api_version,
            operation=operation,
            subresource=t.sub or "",
            applied=applied,
        )
        if dry_run(request):
            return json_response(out(store.dry_run_replace(kind, result)), 200, warnings)
        updated = store.replace(kind, result, check_rv=True)
        return json_response(out(updated), 200, warnings)

    async def _delete_options(self, request: web.Request, kind: Kind) -> Any:
        raw = await request.read()
        if not raw.strip():
            return None
        if _media_type(request) == protobuf.MEDIA_TYPE:
            return protobuf.decode(raw, "DeleteOptions")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, f"couldn't get version/kind; json parse error: {exc}") from exc

    def _grace(self, request: web.Request, body: Any) -> int | None:
        grace = query_int(request.query.get("gracePeriodSeconds"), "gracePeriodSeconds")
        if grace is None and isinstance(body, dict):
            grace = body.get("gracePeriodSeconds")
        return grace

    async def _delete(self, request: web.Request, t: Target) -> web.Response:
        view, kind, store = t.kind, self._stored(t.kind), self.ctx.store
        body = await self._delete_options(request, kind)
        obj = store.get(kind, t.namespace, t.name or "")
        out = self._out(view)
        if dry_run(request):
            return json_response(out(obj))
        if kind.key == PODS.key:
            grace = self._grace(request, body)
            if grace == 0:
                return json_response(store.remove(kind, t.namespace, t.name or ""))
            spec_grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            return json_response(
                store.mark_deleting(kind, t.namespace, t.name or "", grace or spec_grace)
            )
        if kind.key == PERSISTENT_VOLUME_CLAIMS.key and PVC_PROTECTION in (
            obj["metadata"].get("finalizers") or []
        ):
            # a finalizer makes the delete graceful: the PVC protection controller removes the
            # claim once no pod uses it (registry/generic/registry/store.go
            # updateForGracefulDeletionAndFinalizers); only this finalizer is honoured here
            return json_response(out(store.mark_deleting(kind, t.namespace, t.name or "", 0)))
        policy = policy_of(body, request.query)
        removed = GarbageCollector(store).delete(kind, t.namespace, t.name or "", policy)
        if {FOREGROUND, ORPHAN} & set(removed["metadata"].get("finalizers") or []):
            return json_response(out(removed), 202)  # marked: the collector finishes it
        if kind.returns_deleted:
            return json_response(out(removed))
        return json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": t.name,
                    "group": view.group,
                    "kind": view.plural,
                    "uid": obj["metadata"]["uid"],
                },
            }
        )

    async def _delete_collection(self, request: web.Request, t: Target) -> web.Response:
        view, kind = t.kind, self._stored(t.kind)
        labels, fields = self._selectors(request, t)
        items, rv = self.ctx.store.list(kind, t.namespace, labels, fields)
        out = []
        for o in items:
            m = o["metadata"]
            if kind.key == PODS.key:
                out.append(self.ctx.store.mark_deleting(kind, m.get("namespace"), m["name"]))
            else:
                out.append(self.ctx.store.remove(kind, m.get("namespace"), m["name"]))
        convert = self._out(view)
        return json_response(list_body(view, rv, [convert(o) for o in out]))


__all__ = ["RestHandlers", "list_body"]
