"""What a server without WebSocket streaming answers, as the engine reads it (issue 37; the real
stack's tests/realstack/test_fallbacks_real.py runs it for real): a bare 403 from the node's
stream server for subprotocols it does not speak is no missing permission, and the session's
record of the protocols it got says which fallback it took."""

from __future__ import annotations

import json

import websocket
from kubernetes.client import ApiClient, Configuration

from trainjob_magics.engine import errors as E
from trainjob_magics.engine.exec.client import ExecClient
from trainjob_magics.engine.result import JobStatus, Protocols
from trainjob_magics.magics.views.status import render_status_html
from trainjob_magics.magics.views.status_text import format_status, protocols_line

TUNNEL = "SPDY/3.1+portforward.k8s.io"
V4, V5 = "v4.channel.k8s.io", "v5.channel.k8s.io"


def _refused(status: int, body: bytes, resource: str, protocols: list[str]) -> E.TrainJobError:
    client = ExecClient(ApiClient(Configuration(host="https://127.0.0.1:1")))
    exc = websocket.WebSocketBadStatusException(
        "Handshake status %d %s", status, "Forbidden", {}, body
    )
    return client._handshake_error(exc, "ns", "p-0", resource, protocols)


def test_a_bare_403_is_a_refused_subprotocol_not_a_permission() -> None:
    """containerd's stream server (x/net/websocket) answers a handshake offering none of its
    subprotocols with 403 and no body."""
    err = _refused(403, b"", "pods/portforward", [TUNNEL])
    assert isinstance(err, E.ApiServerError) and err.reason == "SubprotocolRefused"
    text = str(err)
    assert "permission" not in text and "rbac" not in text.lower()
    assert f"speaks none of the WebSocket subprotocols offered ({TUNNEL})" in text
    assert "pods/portforward of pod p-0" in text and "\n" not in text


def test_a_403_with_the_api_servers_status_stays_a_permission() -> None:
    body = {
        "kind": "Status",
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        "message": 'pods "p-0" is forbidden: User "u" cannot create resource "pods/exec"',
    }
    err = _refused(403, json.dumps(body).encode(), "pods/exec", [V5, V4])
    assert err.reason != "SubprotocolRefused"
    assert "permission denied" in str(err) and "pods/exec" in str(err)


def _status(protocols: Protocols) -> JobStatus:
    return JobStatus("job", "ns", "torch", "Running", "", protocols=protocols)


def test_the_status_names_the_fallbacks_a_session_took() -> None:
    fell_back = Protocols(exec=V4, forwards=((8080, "websocket", V4),))
    assert fell_back.fallback
    line = (
        "Protocols (server fallback): exec v4.channel.k8s.io · forward 8080 websocket "
        "(v4.channel.k8s.io)"
    )
    assert protocols_line(_status(fell_back)) == line
    assert f"  {line}" in format_status(_status(fell_back)).splitlines()
    assert 'class="tjm-protocols"' in render_status_html(_status(fell_back))
    only_forward = Protocols(exec=V5, forwards=((8080, "websocket", V4),))
    assert protocols_line(_status(only_forward)).endswith(
        "exec v5.channel.k8s.io · forward 8080 websocket (v4.channel.k8s.io)"
    )


def test_a_current_servers_protocols_add_no_line() -> None:
    current = Protocols(exec=V5, forwards=((8080, "tunnel", TUNNEL),))
    assert not current.fallback and protocols_line(_status(current)) == ""
    assert "Protocols" not in format_status(_status(current))
    assert "tjm-protocols" not in render_status_html(_status(current))
    assert protocols_line(_status(Protocols())) == ""  # nothing ran yet
