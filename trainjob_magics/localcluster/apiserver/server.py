"""aiohttp app: middleware (errors, auth, injected faults), routing, discovery, OpenAPI."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from ..core.apierror import ApiError, not_found
from ..core.resources import AGGREGATED_GROUPS, NATIVE_GROUPS
from ..kubelet.node import NODE_NAME
from .api_request import USER_KEY, Target, accepts_json, query_bool
from .api_response import (
    NOT_ALLOWED,
    NOT_FOUND,
    PageNotFound,
    error_response,
    json_response,
    page_not_found,
)
from .clients import openapi, openapi_v2
from .clients.discovery import (
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
)
from .pod_endpoints import PodEndpoints
from .rest_handlers import RestHandlers
from .server_context import ServerContext

log = logging.getLogger(__name__)

# The local cluster's marker: gitVersion carries the build metadata "+trainjob-magics-local"
# (as k3s says "+k3s1"), and /version adds LOCAL_NODE_FIELD, its one node's name and
# allocatable resources (clients decode version.Info and ignore the extra field). A client
# that sees both knows that no other node can ever join (docs/local-cluster.md).
LOCAL_MARKER = "+trainjob-magics-local"
LOCAL_NODE_FIELD = "trainjobMagicsLocalNode"
VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4" + LOCAL_MARKER,
    "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T16:02:27Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}
PUBLIC_PATHS = {"/version", "/healthz", "/livez", "/readyz"}


class ApiServer(RestHandlers, PodEndpoints):
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
            return error_response(err)
        except PageNotFound:
            return page_not_found()
        except Exception as exc:  # an internal error is still a Status
            log.exception("request %s %s failed", request.method, request.path)
            return error_response(ApiError(500, f"Internal error occurred: {exc}"))

    # -- routing ---------------------------------------------------------------------------

    def _index(self) -> dict[str, Any]:
        """GET /: the paths the server serves (genericapiserver's index handler)."""
        paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
        paths += ["/openapi/v2", "/openapi/v3"]
        for group, versions in self.ctx.registry.groups().items():
            if group:
                paths.append(f"/apis/{group}")
                paths += [f"/apis/{group}/{v}" for v in versions]
        return {"paths": sorted(set(paths))}

    def _version(self) -> dict[str, Any]:
        node = {"name": NODE_NAME, "allocatable": dict(self.ctx.node_allocatable)}
        return {**VERSION, LOCAL_NODE_FIELD: node}

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path == "/version":
            return json_response(self._version())
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/":
            return json_response(self._index())
        parts = [p for p in path.split("/") if p]
        if parts[0] == "openapi" and parts[1:] == ["v2"]:
            return self._openapi_v2(request)
        if parts[:2] == ["openapi", "v3"]:
            return self._openapi_v3(request, parts[2:])
        if parts[0] not in ("api", "apis"):
            raise PageNotFound
        reg = self.ctx.registry
        served = reg.groups()
        if parts[0] == "api":
            if len(parts) == 1:
                return json_response(api_versions(self.ctx.address))
            if parts[1] != "v1":
                raise PageNotFound
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return json_response(api_group_list(reg))
            if not parts[1] or parts[1] not in served:
                raise PageNotFound
            if len(parts) == 2:
                doc = api_group(reg, parts[1])
                if doc is None:
                    raise PageNotFound
                return json_response(doc)
            if parts[2] not in served[parts[1]]:
                raise PageNotFound
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            doc = api_resource_list(reg, group, version)
            if doc is None:
                raise PageNotFound
            return json_response(doc)
        target = self._parse_target(group, version, rest, request.method)
        return await self._handle(request, target)

    def _openapi_v2(self, request: web.Request) -> web.Response:
        """GET /openapi/v2 (kube-openapi pkg/handler/handler.go): JSON for `application/json`
        or `*/*`; the protobuf encodings are not produced here, so a request that accepts
        only them gets the handler's 406 (no body)."""
        if not accepts_json(request.headers.get("Accept", "")):
            return web.Response(status=406, headers={"Vary": "Accept"})
        doc = openapi_v2.swagger_doc(self.ctx.registry)
        return json_response(doc)

    def _openapi_v3(self, request: web.Request, rest: list[str]) -> web.Response:
        """GET /openapi/v3 (root) and /openapi/v3/api/v1, /openapi/v3/apis/GROUP/VERSION
        (kube-openapi pkg/handler3: a stale `hash` redirects to the current one; kube-aggregator
        openapiv3/aggregator.go handleGroupVersion: a group-version nobody serves is a 404 with
        no body)."""
        reg = self.ctx.registry
        if not rest:
            return json_response(openapi.root_doc(reg))
        doc = None
        if rest[0] == "api" and len(rest) == 2:
            doc = openapi.group_version_doc(reg, "", rest[1])
        elif rest[0] == "apis" and len(rest) == 3:
            doc = openapi.group_version_doc(reg, rest[1], rest[2])
        if doc is None:
            return web.Response(status=404)
        if not accepts_json(request.headers.get("Accept", "")):
            return web.Response(status=406, headers={"Vary": "Accept"})
        digest = openapi.doc_hash(doc)
        wanted = request.query.get("hash")
        if wanted and wanted != digest:
            raise web.HTTPMovedPermanently(f"/openapi/v3/{'/'.join(rest)}?hash={digest}")
        resp = json_response(doc)
        resp.headers["Etag"] = f'"{digest}"'
        resp.headers["Vary"] = "Accept"
        return resp

    def _parse_target(self, group: str, version: str, rest: list[str], method: str) -> Target:
        """The resource a path names. What does not exist is a Status 404 from the built-in
        (go-restful) handlers and aggregated servers, and the plain-text 404 from
        apiextensions' crdHandler, which delegates unknown resources, scopes and versions to
        the not-found handler (customresource_handler.go ServeHTTP)."""
        native = group in NATIVE_GROUPS or group in AGGREGATED_GROUPS
        crd = not native

        def missing() -> Exception:
            if crd:
                return PageNotFound()
            return ApiError(404, NOT_FOUND, details={})

        namespace = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise missing()
        kind = self.ctx.registry.lookup(group, version, rest[0])
        if kind is None or (namespace is not None and not kind.namespaced):
            raise missing()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if kind.namespaced and namespace is None:
            # only list and watch work across namespaces (crdHandler
            # possiblyAcrossAllNamespacesVerbs; go-restful has no other route there)
            if name is not None:
                raise missing()
            if method != "GET":
                if crd:
                    raise PageNotFound
                raise ApiError(405, NOT_ALLOWED, details={})
        if sub is not None and sub not in kind.subresources:
            if crd:
                raise not_found(kind.plural, kind.group, name or "")
            raise ApiError(404, NOT_FOUND, details={})
        return Target(kind, namespace, name, sub)

    async def _handle(self, request: web.Request, t: Target) -> web.StreamResponse:
        m = request.method
        q = request.query
        if t.sub == "exec" and m in ("GET", "POST"):
            return await self._exec(request, t)
        if t.sub == "portforward" and m in ("GET", "POST"):
            return await self._portforward(request, t)
        if t.sub == "eviction" and m == "POST":
            return await self._evict(request, t)
        getter = self.ctx.subresource_getters.get((t.kind.group, t.kind.plural, t.sub or ""))
        if getter is not None and t.name and m == "GET":
            self._authorize(request, "get", t)
            return json_response(
                getter(t.kind.version, t.kind.plural, t.namespace, t.name, dict(q))
            )
        if t.sub == "log" and m == "GET":
            self._authorize(request, "get", t)
            return await self._log(request, t)
        if t.name is None:
            if m == "GET":
                verb = "watch" if query_bool(q.get("watch")) else "list"
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
            return self._get(request, t)
        if verb == "create":
            return await self._create(request, t)
        if verb in ("update", "patch"):
            return await self._update(request, t, verb)
        if verb == "delete":
            return await self._delete(request, t)
        return await self._delete_collection(request, t)
