"""aiohttp app: bearer-token auth, RBAC denials, routing, CRUD, Status bodies, Warning headers."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from aiohttp import web
from multidict import CIMultiDict

from . import exec_ws, openapi, schema
from .apierror import ApiError, forbidden, invalid, status_body
from .controller import Controller
from .faults import Faults
from .logs import follow_log, read_log
from .patch import JSON_PATCH, MERGE_TYPES, json_patch, merge_patch
from .podspec import random_suffix
from .resources import (
    PODS,
    TRAINJOBS,
    Kind,
    Registry,
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
)
from .selectors import FIELD_SELECTABLE, parse_field_selector, parse_label_selector
from .store import Store
from .tables import include_object, to_table, wants_table
from .watch import WatchParams, serve_watch

log = logging.getLogger(__name__)

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4",
    "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T16:02:27Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}
USER_KEY = web.RequestKey("user", tuple)
PUBLIC_PATHS = {"/version", "/healthz", "/livez", "/readyz"}
NOT_FOUND = "the server could not find the requested resource"
NOT_ALLOWED = "the server does not allow this method on the requested resource"
FIELD_VALIDATION = ("Ignore", "Warn", "Strict")

# Admission hook: (kind, operation "CREATE"|"UPDATE", new object, old object or None) ->
# warnings; may mutate the new object or raise ApiError to deny.
AdmissionHook = Callable[[Kind, str, dict[str, Any], "dict[str, Any] | None"], "list[str] | None"]

SubresourceGetter = Callable[[str, str, "str | None", str, dict[str, str]], dict[str, Any]]


@dataclass
class User:
    name: str
    deny: set[tuple[str, str]] = field(default_factory=set)


@dataclass
class ServerContext:
    store: Store
    registry: Registry
    controller: Controller
    faults: Faults
    users: dict[str, User]
    stopping: asyncio.Event
    address: str = "127.0.0.1:0"
    bookmark_interval: float = 1.0
    admission_hooks: list[AdmissionHook] = field(default_factory=list)
    # (group, plural, subresource) -> fn(version, plural, namespace, name, query) -> JSON body;
    # served for GET after authz ("get" on "plural/sub"), e.g. Kueue's pendingworkloads.
    subresource_getters: dict[tuple[str, str, str], SubresourceGetter] = field(default_factory=dict)


def _json(obj: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers: CIMultiDict[str] = CIMultiDict()
    for w in warnings or []:
        headers.add("Warning", '299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return web.Response(
        body=json.dumps(obj).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _error(err: ApiError) -> web.Response:
    return _json(err.status, err.code)


def _bool(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _int(value: str | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ApiError(400, f"invalid value for {name}: {value!r}") from exc


@dataclass
class Target:
    """A parsed resource path."""

    kind: Kind
    namespace: str | None
    name: str | None
    sub: str | None

    @property
    def resource(self) -> str:
        return f"{self.kind.plural}/{self.sub}" if self.sub else self.kind.plural


class ApiServer:
    """Request handling for one LocalCluster."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    # -- middleware: errors, auth, injected faults -----------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            if request.path not in PUBLIC_PATHS:
                request[USER_KEY] = self._authenticate(request)
            fault = self.ctx.faults.take_request_fault(request.method, request.path_qs)
            if fault is not None:
                raise ApiError(fault.code, fault.message, fault.reason)
            return await handler(request)
        except ApiError as err:
            return _error(err)
        except Exception as exc:  # an internal error is still a Status
            log.exception("request %s %s failed", request.method, request.path)
            return _error(ApiError(500, f"Internal error occurred: {exc}"))

    def _authenticate(self, request: web.Request) -> tuple[str, User]:
        auth = request.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        user = self.ctx.users.get(token) if token else None
        if user is None:
            raise ApiError(401, "Unauthorized")
        return token, user

    def _authorize(self, request: web.Request, verb: str, t: Target) -> None:
        token, user = request[USER_KEY]
        resource = t.resource
        if (
            (verb, resource) in user.deny
            or ("*", resource) in user.deny
            or (
                verb,
                "*",
            )
            in user.deny
            or self.ctx.faults.denied(token, verb, resource)
        ):
            raise forbidden(user.name, verb, resource, t.kind.group, t.name, t.namespace)

    # -- routing ---------------------------------------------------------------------------

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path == "/version":
            return _json(VERSION)
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["openapi", "v3"]:
            return self._openapi_v3(parts[2:])
        if not parts or parts[0] not in ("api", "apis"):
            raise ApiError(404, NOT_FOUND, details={})
        reg = self.ctx.registry
        if parts[0] == "api":
            if len(parts) == 1:
                return _json(api_versions(self.ctx.address))
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return _json(api_group_list(reg))
            if len(parts) == 2:
                doc = api_group(reg, parts[1])
                if doc is None:
                    raise ApiError(404, NOT_FOUND, details={})
                return _json(doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            doc = api_resource_list(reg, group, version)
            if doc is None:
                raise ApiError(404, NOT_FOUND, details={})
            return _json(doc)
        target = self._parse_target(group, version, rest)
        return await self._handle(request, target)

    def _openapi_v3(self, rest: list[str]) -> web.Response:
        """GET /openapi/v3 (root) and /openapi/v3/api/v1, /openapi/v3/apis/GROUP/VERSION."""
        reg = self.ctx.registry
        if not rest:
            return _json(openapi.root_doc(reg))
        doc = None
        if rest[0] == "api" and len(rest) == 2:
            doc = openapi.group_version_doc(reg, "", rest[1])
        elif rest[0] == "apis" and len(rest) == 3:
            doc = openapi.group_version_doc(reg, rest[1], rest[2])
        if doc is None:
            raise ApiError(404, NOT_FOUND, details={})
        return _json(doc)

    def _parse_target(self, group: str, version: str, rest: list[str]) -> Target:
        namespace = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise ApiError(404, NOT_FOUND, details={})
        kind = self.ctx.registry.lookup(group, version, rest[0])
        if kind is None or (namespace is not None and not kind.namespaced):
            raise ApiError(404, NOT_FOUND, details={})
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in kind.subresources:
            raise ApiError(404, NOT_FOUND, details={})
        return Target(kind, namespace, name, sub)

    async def _handle(self, request: web.Request, t: Target) -> web.StreamResponse:
        m = request.method
        q = request.query
        if t.sub == "exec" and m in ("GET", "POST"):
            return await self._exec(request, t)
        getter = self.ctx.subresource_getters.get((t.kind.group, t.kind.plural, t.sub or ""))
        if getter is not None and t.name and m == "GET":
            self._authorize(request, "get", t)
            return _json(getter(t.kind.version, t.kind.plural, t.namespace, t.name, dict(q)))
        if t.sub == "log" and m == "GET":
            self._authorize(request, "get", t)
            return await self._log(request, t)
        if t.name is None:
            if m == "GET":
                verb = "watch" if _bool(q.get("watch")) else "list"
            elif m == "POST":
                verb = "create"
            elif m == "DELETE":
                verb = "deletecollection"
            else:
                raise ApiError(405, NOT_ALLOWED, details={})
        else:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(m, "")
            if not verb:
                raise ApiError(405, NOT_ALLOWED, details={})
        if t.sub != "status" and verb not in t.kind.verbs:
            raise ApiError(405, NOT_ALLOWED, details={})
        self._authorize(request, verb, t)
        if verb == "list":
            return self._list(request, t)
        if verb == "watch":
            return await self._watch(request, t)
        if verb == "get":
            obj = self.ctx.store.get(t.kind, t.namespace, t.name or "")
            if t.sub is None and wants_table(request.headers.get("Accept", "")):
                table = to_table(
                    t.kind, [obj], obj["metadata"]["resourceVersion"], include_object(request.query)
                )
                return _json(table)
            return _json(obj)
        if verb == "create":
            return await self._create(request, t)
        if verb in ("update", "patch"):
            return await self._update(request, t, verb)
        if verb == "delete":
            return await self._delete(request, t)
        return await self._delete_collection(request, t)

    # -- reads -----------------------------------------------------------------------------

    def _selectors(self, request: web.Request, t: Target) -> tuple[list[Any], list[Any]]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        allowed = FIELD_SELECTABLE if t.kind.key == PODS.key else None
        fields = parse_field_selector(request.query.get("fieldSelector"), allowed)
        return labels, fields

    def _list(self, request: web.Request, t: Target) -> web.Response:
        labels, fields = self._selectors(request, t)
        items, rv = self.ctx.store.list(t.kind, t.namespace, labels, fields)
        if wants_table(request.headers.get("Accept", "")):
            return _json(to_table(t.kind, items, rv, include_object(request.query)))
        return _json(
            {
                "kind": t.kind.list_kind,
                "apiVersion": t.kind.api_version,
                "metadata": {"resourceVersion": rv},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        labels, fields = self._selectors(request, t)
        q = request.query
        timeout = _int(q.get("timeoutSeconds"), "timeoutSeconds")
        params = WatchParams(
            namespace=t.namespace,
            labels=labels,
            fields=fields,
            resource_version=q.get("resourceVersion"),
            timeout=float(timeout) if timeout else None,
            bookmarks=_bool(q.get("allowWatchBookmarks")),
            bookmark_interval=self.ctx.bookmark_interval,
            table=(include_object(q) if wants_table(request.headers.get("Accept", "")) else None),
            send_initial_events=_send_initial_events(q),
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
                return schema.validate_trainjob(obj)
            return schema.validate_trainjob_update(old, obj)
        except schema.SchemaError as err:
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
        warnings = _field_validation(request, kind, warnings)
        warnings += self._admit(kind, "CREATE", body, None)
        if kind.key == TRAINJOBS.key:
            self.ctx.controller.resolve_runtime(t.namespace or "default", body)
        if kind.key == "namespaces":
            body["status"] = {"phase": "Active"}
        if _dry_run(request):
            return _json(self.ctx.store.dry_run_create(kind, body, t.namespace), 201, warnings)
        created = self.ctx.store.create(kind, body, t.namespace)
        return _json(created, 201, warnings)

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
            warnings = _field_validation(request, kind, warnings)
            if "status" in kind.subresources and "status" in old:
                result["status"] = old["status"]
            warnings += self._admit(kind, "UPDATE", result, old)
        if _dry_run(request):
            return _json(store.dry_run_replace(kind, result), 200, warnings)
        updated = store.replace(kind, result, check_rv=True)
        return _json(updated, 200, warnings)

    def _grace(self, request: web.Request, body: Any) -> int | None:
        grace = _int(request.query.get("gracePeriodSeconds"), "gracePeriodSeconds")
        if grace is None and isinstance(body, dict):
            grace = body.get("gracePeriodSeconds")
        return grace

    async def _delete(self, request: web.Request, t: Target) -> web.Response:
        kind, store = t.kind, self.ctx.store
        raw = await request.read()
        body = json.loads(raw) if raw.strip() else None
        obj = store.get(kind, t.namespace, t.name or "")
        if _dry_run(request):
            return _json(obj)
        if kind.key == PODS.key:
            grace = self._grace(request, body)
            if grace == 0:
                return _json(store.remove(kind, t.namespace, t.name or ""))
            spec_grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            return _json(store.mark_deleting(kind, t.namespace, t.name or "", grace or spec_grace))
        store.remove(kind, t.namespace, t.name or "")
        return _json(
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
        return _json(
            {
                "kind": t.kind.list_kind,
                "apiVersion": t.kind.api_version,
                "metadata": {"resourceVersion": rv},
                "items": out,
            }
        )

    # -- pods/log and pods/exec ------------------------------------------------------------

    def _container(self, pod: dict[str, Any], requested: str | None) -> str:
        name = pod["metadata"]["name"]
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if not requested:
            if len(names) == 1:
                return names[0]
            raise ApiError(
                400,
                f"a container name must be specified for pod {name}, choose one of: "
                f"[{' '.join(names)}]",
            )
        if requested not in names:
            raise ApiError(400, f"container {requested} is not valid for pod {name}")
        return requested

    async def _log(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        pod = self.ctx.store.get(PODS, t.namespace, t.name or "")
        container = self._container(pod, q.get("container"))
        if _bool(q.get("previous")):
            raise ApiError(
                400,
                f'previous terminated container "{container}" in pod "{t.name}" not found',
            )
        sandbox = self.ctx.controller.sandbox(t.namespace or "", t.name or "")
        status = pod.get("status") or {}
        waiting = next(
            (
                (cs.get("state") or {}).get("waiting")
                for cs in status.get("containerStatuses") or []
                if (cs.get("state") or {}).get("waiting")
            ),
            None,
        )
        if sandbox is None or status.get("phase") == "Pending":
            reason = (waiting or {}).get("reason", "ContainerCreating")
            raise ApiError(
                400,
                f'container "{container}" in pod "{t.name}" is waiting to start: {reason}',
            )
        timestamps = _bool(q.get("timestamps"))
        data = read_log(
            sandbox.log_path,
            _int(q.get("tailLines"), "tailLines"),
            _int(q.get("limitBytes"), "limitBytes"),
            timestamps,
        )
        if not _bool(q.get("follow")):
            return web.Response(body=data, content_type="text/plain")
        ns, name = t.namespace, t.name or ""

        def running() -> bool:
            p = self.ctx.store.try_get(PODS, ns, name)
            return p is not None and (p.get("status") or {}).get("phase") == "Running"

        return await follow_log(
            request, sandbox.log_path, data, running, self.ctx.stopping, timestamps
        )

    async def _exec(self, request: web.Request, t: Target) -> web.StreamResponse:
        _, _user = request[USER_KEY]
        for verb in ("create", "get"):
            self._authorize(request, verb, t)
        q = request.query
        pod = self.ctx.store.get(PODS, t.namespace, t.name or "")
        container = self._container(pod, q.get("container"))
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            raise ApiError(
                400, f"cannot exec into a container in a completed pod; current phase is {phase}"
            )
        if not (pod.get("spec") or {}).get("nodeName"):
            raise ApiError(400, f"pod {t.name} does not have a host assigned")
        sandbox = self.ctx.controller.sandbox(t.namespace or "", t.name or "")
        if phase != "Running" or sandbox is None:
            raise ApiError(
                400, f'unable to upgrade connection: container not found ("{container}")'
            )
        argv = q.getall("command", [])
        if not argv:
            raise ApiError(400, "you must specify at least 1 command")
        return await exec_ws.handle_exec(
            request,
            sandbox,
            list(argv),
            stdin=_bool(q.get("stdin")),
            stdout=_bool(q.get("stdout")),
            stderr=_bool(q.get("stderr")),
            tty=_bool(q.get("tty")),
            drop_after_bytes=self.ctx.faults.exec_drop_after(t.name or ""),
        )


def _dry_run(request: web.Request) -> bool:
    """`?dryRun=All`: validate and answer, store nothing (other values are 400, as upstream)."""
    values = request.query.getall("dryRun", [])
    for v in values:
        if v != "All":
            raise ApiError(
                400, f'dryRun: Unsupported value: "{v}": supported values: "All"', "BadRequest"
            )
    return bool(values)


def _field_validation(request: web.Request, kind: Kind, warnings: list[str]) -> list[str]:
    """Apply `?fieldValidation=` to the pruning warnings (`unknown field "..."`).

    Warn (the default since 1.27) keeps them as Warning headers, Ignore drops them, Strict
    turns them into 400 BadRequest worded like the apiserver's `transformDecodeError`:
    `TrainJob in version "v1alpha1" cannot be handled as a TrainJob: strict decoding error:
    unknown field "spec.x"`.
    """
    mode = request.query.get("fieldValidation") or "Warn"
    if mode not in FIELD_VALIDATION:
        raise ApiError(
            400,
            f'fieldValidation: Unsupported value: "{mode}": supported values: '
            '"Ignore", "Strict", "Warn"',
        )
    unknown = [w for w in warnings if w.startswith("unknown field ")]
    if mode == "Ignore":
        return [w for w in warnings if w not in unknown]
    if mode == "Strict" and unknown:
        raise ApiError(
            400,
            f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
            f"strict decoding error: {', '.join(unknown)}",
        )
    return warnings


def _send_initial_events(q: Any) -> bool:
    """`sendInitialEvents` (WatchList), checked like apimachinery's validateWatchOptions."""
    match = q.get("resourceVersionMatch") or ""
    sie = q.get("sendInitialEvents")
    causes: list[dict[str, str]] = []

    def forbidden(detail: str) -> None:
        causes.append(
            {
                "reason": "FieldValueForbidden",
                "message": f"Forbidden: {detail}",
                "field": "resourceVersionMatch",
            }
        )

    if sie is not None and match != "NotOlderThan":
        forbidden("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
    if match:
        if sie is None:
            forbidden(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
            )
        if match != "NotOlderThan":
            causes.append(
                {
                    "reason": "FieldValueNotSupported",
                    "message": f'Unsupported value: "{match}": supported values: "NotOlderThan"',
                    "field": "resourceVersionMatch",
                }
            )
    if causes:
        raise invalid("ListOptions", "meta.k8s.io", "", causes)
    return _bool(sie)


def new_token() -> str:
    return secrets.token_urlsafe(32)


__all__ = ["ApiServer", "ServerContext", "User", "new_token", "status_body"]
