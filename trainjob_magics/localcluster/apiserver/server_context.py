"""ServerContext: what the API server serves from (store, users, hooks, and the callbacks
into the controller and the kubelet)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.faults import Faults
from ..core.resources import Kind, Registry
from ..core.store import Store
from ..kubelet.processes import PodSandbox
from .authn import Authenticator

# Admission hook: (kind, operation "CREATE"|"UPDATE", new object, old object or None) ->
# warnings; may mutate the new object or raise ApiError to deny.
AdmissionHook = Callable[[Kind, str, dict[str, Any], "dict[str, Any] | None"], "list[str] | None"]

SubresourceGetter = Callable[[str, str, "str | None", str, dict[str, str]], dict[str, Any]]
# (namespace, TrainJob) -> its runtime; raises ApiError 422 when it does not exist (the
# create-time check of the Trainer webhook).
RuntimeResolver = Callable[[str, dict[str, Any]], dict[str, Any]]
# (namespace, pod name) -> where its processes run, or None (not started, or gone).
SandboxLookup = Callable[[str, str], "PodSandbox | None"]


@dataclass
class ServerContext:
    store: Store
    registry: Registry
    resolve_runtime: RuntimeResolver
    sandbox: SandboxLookup
    faults: Faults
    authenticator: Authenticator
    stopping: asyncio.Event
    address: str = "127.0.0.1:0"
    bookmark_interval: float = 1.0
    admission_hooks: list[AdmissionHook] = field(default_factory=list)
    # (group, plural, subresource) -> fn(version, plural, namespace, name, query) -> JSON body;
    # served for GET after authz ("get" on "plural/sub"), e.g. Kueue's pendingworkloads.
    subresource_getters: dict[tuple[str, str, str], SubresourceGetter] = field(default_factory=dict)
    # How pods/exec reports a container that is not running: "pre-upgrade" (HTTP 400 before the
    # WebSocket upgrade) or "translated" (after the 101, as a 1.30+ apiserver's stream
    # translator does: a Status on channel 3).
    exec_errors: str = "pre-upgrade"
    # The one node's Node.status.allocatable (quantities), served in /version under
    # LOCAL_NODE_FIELD: no Node object is served, and a client learns what the node holds.
    node_allocatable: dict[str, str] = field(default_factory=dict)


def new_token() -> str:
    return secrets.token_urlsafe(32)
