"""Authentication (through the :class:`~.authn.Authenticator`) and RBAC-style denials."""

from __future__ import annotations

from aiohttp import web

from ..core.apierror import forbidden
from .api_request import USER_KEY, Target
from .authn import User
from .server_context import ServerContext


class Authorizer:
    """Auth methods of the ApiServer (a mixin; the ApiServer sets ctx)."""

    ctx: ServerContext

    def _authenticate(self, request: web.Request) -> tuple[str, User]:
        transport = request.transport
        peercert = transport.get_extra_info("peercert") if transport is not None else None
        authorization = request.headers.get("Authorization", "")
        return self.ctx.authenticator.authenticate(authorization, peercert)

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
            or (t.namespace is not None and t.namespace in user.deny_namespaces)
        ):
            raise forbidden(user.name, verb, resource, t.kind.group, t.name, t.namespace)
