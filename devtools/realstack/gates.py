"""Feature gates of a stack's kube-apiserver and kubelet: ``up --apiserver-feature-gates`` /
``--kubelet-feature-gates``, and :func:`apply` / :func:`websocket_fallbacks`, which restart the
running component with other ``--feature-gates`` (and back), waiting until it serves again.

What the WebSocket streaming gates change (read from k8s.io/kubernetes v1.36.3):

- kube-apiserver ``PortForwardWebsockets`` (beta, on since 1.31) and
  ``TranslateStreamCloseWebsocketRequests`` (beta, on since 1.30): with each on, the API
  server serves a WebSocket ``SPDY/3.1+portforward.k8s.io`` tunnel / ``v5.channel.k8s.io``
  exec itself, translating to SPDY towards the kubelet; off, it only proxies the upgrade to
  the kubelet (``pkg/registry/core/pod/rest/subresources.go`` ``PortForwardREST.Connect``,
  ``ExecREST.Connect``).
- kubelet ``ExtendWebSocketsToKubelet`` (beta, on since 1.36; the node declares it in
  ``status.declaredFeatures``): the kubelet serves the tunnel and v5 itself
  (``pkg/kubelet/server/server.go`` ``getPortForward``, ``getExec``), and a 1.36 API server
  with its gates on proxies to such a node instead of translating. So on 1.36+ the API
  server's gates off change nothing while the kubelet's is on: the fallbacks need both off.
- With all of them off the upgrade reaches the container runtime's stream server. containerd
  v2.2's (``internal/cri/streamingserver/remotecommand/websocket.go``,
  ``portforward/websocket.go``) speaks exec up to ``v4.channel.k8s.io`` and port-forward only
  as ``v4.channel.k8s.io`` (one WebSocket per connection), picking the first protocol the
  client offers that it knows (apimachinery ``util/httpstream/wsstream`` ``handshake``).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from devtools.realstack import procs
from devtools.realstack.context import StackContext

APISERVER, KUBELET = "kube-apiserver", "kubelet"
COMPONENTS = (APISERVER, KUBELET)
FLAG = "--feature-gates="

Gates = dict[str, bool]

# the API server's own WebSocket streaming (KEP-4006): off, it proxies upgrades to the kubelet
APISERVER_WEBSOCKETS: Gates = {
    "PortForwardWebsockets": False,
    "TranslateStreamCloseWebsocketRequests": False,
}
# the kubelet's (1.36+, KEP-4006 extended to the kubelet); older kubelets do not know the gate
KUBELET_WEBSOCKETS: Gates = {"ExtendWebSocketsToKubelet": False}
KUBELET_WEBSOCKETS_SINCE = 36

READY_WAIT = 180.0  # seconds for a restarted component to serve again (a loaded 2-core host)


def parse(text: str) -> Gates:
    """``A=false,B=true`` as a dict (``""``: none); a malformed one raises StackError."""
    gates: Gates = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if not name or value.lower() not in ("true", "false"):
            raise procs.StackError(f"feature gate {item!r}: write NAME=true or NAME=false")
        gates[name] = value.lower() == "true"
    return gates


def render(gates: Mapping[str, bool]) -> str:
    """``A=false,B=true``, sorted by name."""
    return ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))


def flags(gates: Mapping[str, bool]) -> list[str]:
    """The command-line flag for ``gates`` (none for no gates)."""
    return [FLAG + render(gates)] if gates else []


def with_gates(argv: Sequence[str], gates: Mapping[str, bool]) -> list[str]:
    """``argv`` with its ``--feature-gates`` replaced by ``gates`` (removed when empty)."""
    return [a for a in map(str, argv) if not a.startswith(FLAG)] + flags(gates)


def running_gates(ctx: StackContext, component: str) -> Gates:
    """The gates ``component`` was started with (its last ``--feature-gates``)."""
    found = [a for a in procs.spec(ctx.run, component)["argv"] if str(a).startswith(FLAG)]
    return parse(found[-1][len(FLAG) :]) if found else {}


def websocket_fallback_gates(ctx: StackContext) -> dict[str, Gates]:
    """Per component, the gates that make this stack's Kubernetes version answer as a server
    without WebSocket streaming: exec on ``v4.channel.k8s.io``, port-forward one v4 WebSocket
    per connection."""
    gates = {APISERVER: dict(APISERVER_WEBSOCKETS)}
    if minor(ctx.versions.kubernetes) >= KUBELET_WEBSOCKETS_SINCE:
        gates[KUBELET] = dict(KUBELET_WEBSOCKETS)
    return gates


def minor(version: str) -> int:
    """``v1.36.3`` -> 36."""
    return int(version.lstrip("v").split(".")[1])


def apply(ctx: StackContext, wanted: Mapping[str, Mapping[str, bool]]) -> dict[str, Gates]:
    """Restart each component of ``wanted`` whose gates differ with exactly those gates ({}:
    none, the version's defaults), kube-apiserver first, and wait until each serves again.
    The stack's state records them (``up`` of the same stack keeps them). Returns each
    component's gates before."""
    before: dict[str, Gates] = {}
    for component in COMPONENTS:
        if component not in wanted:
            continue
        gates = dict(wanted[component])
        before[component] = running_gates(ctx, component)
        if before[component] == gates:
            continue
        argv = with_gates(procs.spec(ctx.run, component)["argv"], gates)
        aggregated = available_apiservices(ctx) if component == APISERVER else set()
        procs.restart(ctx.run, component, argv)  # returns once the old one is gone
        _wait_serving(ctx, component, since=time.time(), aggregated=aggregated)
        _record(ctx, component, gates)
    return before


def _record(ctx: StackContext, component: str, gates: Gates) -> None:
    """Write ``component``'s gates into the stack's state, as it is on disk now (``ctx`` may
    be older than ports another step added since), and into ``ctx``."""
    current = StackContext.load(ctx.run)
    for state in (current, ctx):
        state.feature_gates.pop(component, None)
        if gates:
            state.feature_gates[component] = dict(gates)
    current.save()


@contextlib.contextmanager
def websocket_fallbacks(ctx: StackContext) -> Iterator[dict[str, Gates]]:
    """The running stack without WebSocket streaming while inside; then back to the gates it
    had (restarted and serving again), also when the body fails."""
    wanted = websocket_fallback_gates(ctx)
    before = {c: running_gates(ctx, c) for c in wanted}
    try:
        apply(ctx, {c: {**before[c], **gates} for c, gates in wanted.items()})
        yield wanted
    finally:
        apply(ctx, before)


def _wait_serving(ctx: StackContext, component: str, *, since: float, aggregated: set[str]) -> None:
    if component == APISERVER:
        procs.wait_for(
            "kube-apiserver /readyz",
            lambda: apiserver_ready(ctx),
            timeout=READY_WAIT,
            run=ctx.run,
            name=component,
        )
        # /readyz does not wait for the aggregation layer (Kueue's visibility API)
        procs.wait_for(
            f"the {len(aggregated)} API services available before the restart",
            lambda: aggregated <= available_apiservices(ctx),
            timeout=READY_WAIT,
            run=ctx.run,
            name=component,
        )
    else:
        procs.wait_for(
            "the restarted kubelet's node to be Ready with a renewed lease",
            lambda: kubelet_back(ctx, since),
            timeout=READY_WAIT,
            run=ctx.run,
            name=component,
        )


def apiserver_ready(ctx: StackContext) -> bool:
    """kube-apiserver answers /readyz with 200."""
    return procs.https_ok(
        f"{ctx.apiserver_url}/readyz",
        ca=ctx.pki.ca.cert,
        cert=ctx.pki.dir / "admin.crt",
        key=ctx.pki.dir / "admin.key",
    )


def available_apiservices(ctx: StackContext) -> set[str]:
    """The APIServices whose Available condition is True."""
    from devtools.realstack.controllers import kubectl

    found = json.loads(kubectl(ctx, "get", "apiservices", "-o", "json").stdout)
    return {
        item["metadata"]["name"]
        for item in found.get("items") or []
        for cond in (item.get("status") or {}).get("conditions") or []
        if cond.get("type") == "Available" and cond.get("status") == "True"
    }


def kubelet_back(ctx: StackContext, since: float) -> bool:
    """The restarted kubelet renewed its node's lease after ``since``, the node is Ready, and
    the kubelet knows every pod the API server runs on it: until it has read them, it answers
    an exec or port-forward to one with 404 ``pod does not exist`` (2 s here after a restart;
    ``pkg/kubelet/server/server.go`` ``getExec``)."""
    from devtools.realstack.controllers import kubectl
    from devtools.realstack.realnode.kubelet import NODE_NAME, node_ready

    lease = kubectl(
        ctx,
        "get",
        "lease",
        "-n",
        "kube-node-lease",
        NODE_NAME,
        "-o",
        "jsonpath={.spec.renewTime}",
        check=False,
    ).stdout.strip()
    if not lease or _rfc3339(lease) <= since or not node_ready(ctx):
        return False
    running = kubectl(
        ctx,
        "get",
        "pods",
        "-A",
        f"--field-selector=spec.nodeName={NODE_NAME},status.phase=Running",
        "-o",
        "json",
    ).stdout
    served = kubectl(ctx, "get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/pods").stdout
    return _uids(running) <= _uids(served)


def _rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _uids(pod_list: str) -> set[str]:
    return {p["metadata"]["uid"] for p in json.loads(pod_list).get("items") or []}


__all__ = [
    "APISERVER",
    "APISERVER_WEBSOCKETS",
    "KUBELET",
    "KUBELET_WEBSOCKETS",
    "apply",
    "parse",
    "render",
    "running_gates",
    "websocket_fallback_gates",
    "websocket_fallbacks",
    "with_gates",
]
