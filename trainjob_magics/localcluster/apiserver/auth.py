"""Bearer-token authentication and RBAC-style denials of the API server."""

from __future__ import annotations

from aiohttp import web

from ..core.apierror import ApiError, forbidden
from .api_request import USER_KEY, Target
from .server_context import ServerContext, User


class Authorizer:
    """Auth methods of the ApiServer (a mixin; the ApiServer sets ctx)."""

    ctx: ServerContext

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
