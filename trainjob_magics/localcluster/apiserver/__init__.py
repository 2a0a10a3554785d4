"""The API server of the local cluster: the aiohttp app (middleware, routing), authentication
and RBAC-style denials, request options, the generic REST verbs, watch streams, patches, the
TrainJob schema, and pods/log and pods/exec (served through the kubelet).

``clients/`` holds what only kubectl and the official client need: discovery documents,
OpenAPI v3 and Table answers.

Imports ``core/`` and ``kubelet/`` from the rest of the local cluster; it reaches the controller
only through the callbacks in :class:`ServerContext`.
"""

from .authn import AuthStats, User
from .listener import Listener
from .server import ApiServer
from .server_context import AdmissionHook, ServerContext, SubresourceGetter, new_token

__all__ = [
    "AdmissionHook",
    "ApiServer",
    "AuthStats",
    "Listener",
    "ServerContext",
    "SubresourceGetter",
    "User",
    "new_token",
]
