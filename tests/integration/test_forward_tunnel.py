"""session.forward() over ONE port-forward tunnel (WebSocket ``SPDY/3.1+portforward.k8s.io``)
on the local cluster: many connections in one upgrade, the v4 fallback when the server serves
no tunnel, a refused stream that leaves the tunnel up, the tunnel dropping mid-transfer, and
``kubectl port-forward`` against the local cluster's tunnel."""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import os
import subprocess
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.faultproxy import FaultProxy
from tests.helpers.polling import wait_until
from tests.helpers.ports import fetch, free_port, port_is_free, serve_http, serving
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

SIZE = 32 * 1024 * 1024
RESET_ERRORS = (ConnectionError, urllib.error.URLError, http.client.HTTPException)


def upgrades(cluster: LocalCluster, pod: str) -> int:
    """pods/portforward requests the API server has seen for ``pod``."""
    return sum(1 for _m, path in cluster.faults.requests_seen() if f"/{pod}/portforward" in path)


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[TrainJobSession]:
    s = connect("torch-distributed", config_file=str(local_cluster.kubeconfig_path))
    yield s
    s.close(timeout=30)


@pytest.fixture(scope="module")
def server_port(session: TrainJobSession) -> int:
    port = free_port()
    assert session.execute("printf 'tunnel page' > index.html").ok
    assert session.execute(f"head -c {SIZE} /dev/urandom > big.bin").ok
    serve_http(session, port)
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2).close()"
    wait_until(lambda: session.execute(["python3", "-c", probe]).ok, timeout=30)
    return port


def test_many_connections_share_one_upgrade(local_cluster, session, server_port) -> None:
    before = upgrades(local_cluster, session.pod)
    with session.forward(server_port) as fwd:
        assert fwd.mode == "tunnel"
        wait_until(lambda: serving(fwd.url), timeout=30)

        def client(_i: int) -> bytes:
            return fetch(fwd.url + "index.html", timeout=60)

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            bodies = list(pool.map(client, range(64)))
        assert bodies == [b"tunnel page"] * 64
        assert fwd.connections >= 64
        wait_until(lambda: fwd.active == 0, timeout=30)
        assert upgrades(local_cluster, session.pod) - before == 1  # the start's, and no other
        assert fwd.errors == []


def test_big_file_byte_exact_over_the_tunnel(local_cluster, session, server_port) -> None:
    with session.forward(server_port) as fwd:
        body = fetch(fwd.url + "big.bin", timeout=120)
        expected = (local_cluster.pod_dir("default", session.pod) / "big.bin").read_bytes()
        assert hashlib.sha256(body).digest() == hashlib.sha256(expected).digest()


def test_a_server_without_the_tunnel_gets_one_websocket_per_connection(
    cluster, session, server_port
) -> None:
    cluster.faults.portforward_tunnel = False  # an API server before 1.30, or the gate off
    before = upgrades(cluster, session.pod)
    with session.forward(server_port) as fwd:
        assert fwd.mode == "websocket"
        assert "websocket" in repr(fwd)
        for _ in range(3):
            assert fetch(fwd.url + "index.html", timeout=30) == b"tunnel page"
        wait_until(lambda: fwd.active == 0, timeout=30)
        # the start (which chose the protocol), and one WebSocket per connection
        assert upgrades(cluster, session.pod) - before == 4
    cluster.faults.portforward_tunnel = True
    with session.forward(server_port) as fwd:
        assert fwd.mode == "tunnel"  # chosen per forward: a new one looks again


def test_via_websocket_skips_the_tunnel(local_cluster, session, server_port) -> None:
    with session.forward(server_port, via="websocket") as fwd:
        assert fwd.mode == "websocket"
        assert fetch(fwd.url + "index.html", timeout=30) == b"tunnel page"
    with pytest.raises(E.InvalidInputError, match="via must be one of auto, websocket"):
        session.forward(server_port, via="spdy")


def test_a_refused_stream_is_reset_and_the_tunnel_stays(local_cluster, session) -> None:
    port = free_port()
    reported: list[str] = []
    before = upgrades(local_cluster, session.pod)
    with session.forward(port, on_error=reported.append) as fwd:
        assert fwd.mode == "tunnel"
        wait_until(lambda: reported, timeout=30)  # the start's probe: nothing listens yet
        for _ in range(3):
            with pytest.raises(RESET_ERRORS):
                fetch(fwd.url, timeout=30)
        wait_until(lambda: len(reported) == 2, timeout=30)
        assert "nothing accepts connections" in reported[1] and "refused" in reported[1]
        assert session.execute(f"printf up > up{port}.txt").ok
        serve_http(session, port)
        wait_until(lambda: serving(fwd.url + f"up{port}.txt"), timeout=30)
        assert fetch(fwd.url + f"up{port}.txt") == b"up"
        assert len(reported) == 2  # three refused streams, said once
        assert upgrades(local_cluster, session.pod) - before == 1  # all in the one tunnel


def test_the_tunnel_dropping_mid_transfer(local_cluster, server_port, tmp_path: Path) -> None:
    proxy = FaultProxy(local_cluster.port)
    config = proxy.kubeconfig(Path(local_cluster.kubeconfig_path), tmp_path / "kubeconfig")
    s = connect("torch-distributed", config_file=str(config))
    try:
        port = free_port()
        assert s.execute(f"head -c {SIZE} /dev/zero > zero.bin").ok
        serve_http(s, port)
        fwd = s.forward(port)
        wait_until(lambda: serving(fwd.url), timeout=30)
        conn = http.client.HTTPConnection("127.0.0.1", fwd.local_port, timeout=60)
        conn.request("GET", "/zero.bin")
        resp = conn.getresponse()
        assert resp.read(1 << 20) == bytes(1 << 20)
        proxy.drop_established()  # every connection through it: the tunnel too
        with pytest.raises(RESET_ERRORS):  # a reset or a short body, never a clean end
            rest = resp.read()
            assert len(rest) == SIZE - (1 << 20), "the transfer ended short without an error"
        conn.close()
        # the next connection opens a new tunnel
        assert fetch(fwd.url + "zero.bin", timeout=60) == bytes(SIZE)
        assert fwd.mode == "tunnel"
        wait_until(lambda: fwd.active == 0, timeout=30)
    finally:
        s.close(timeout=30)
        proxy.close()


def test_kubectl_port_forward_serves_a_page(local_cluster, session, server_port, tmp_path):
    local = free_port()
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(local_cluster.kubeconfig_path)}
    argv = ["kubectl", "port-forward", f"pod/{session.pod}", f"{local}:{server_port}", "-v=4"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{local}/index.html"
        wait_until(lambda: serving(url), timeout=30)
        for _ in range(3):
            assert fetch(url, timeout=30) == b"tunnel page"
        time.sleep(0.2)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert f"Forwarding from 127.0.0.1:{local} -> {server_port}" in out.decode()
    # kubectl took the WebSocket tunnel, not its SPDY-upgrade fallback
    assert "negotiated protocol: portforward.k8s.io" in err.decode()


def forward_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "trainjob-forward"]


def test_closing_mid_transfer_leaves_nothing_behind(local_cluster, session, server_port) -> None:
    before = len(forward_threads())
    fwd = session.forward(server_port)
    conn = http.client.HTTPConnection("127.0.0.1", fwd.local_port, timeout=60)
    conn.request("GET", "/big.bin")
    resp = conn.getresponse()
    assert len(resp.read(1 << 20)) == 1 << 20
    assert fwd.active == 1
    fwd.close()
    assert port_is_free(fwd.local_port)
    wait_until(lambda: len(forward_threads()) == before, timeout=10)
    with pytest.raises(RESET_ERRORS):  # cut short: a reset or a short body, never a clean end
        rest = resp.read()
        assert len(rest) == SIZE - (1 << 20), "the transfer ended short without an error"
    conn.close()
    assert fwd.active == 0


SLOW_SERVER = """
import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(2)
        body = b"slow ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_an_unanswered_connection_moves_to_the_next_tunnel(local_cluster, tmp_path) -> None:
    proxy = FaultProxy(local_cluster.port)
    config = proxy.kubeconfig(Path(local_cluster.kubeconfig_path), tmp_path / "kubeconfig")
    s = connect("torch-distributed", config_file=str(config))
    try:
        port = free_port()
        assert s.execute(f"cat > slow.py << 'EOF'\n{SLOW_SERVER}\nEOF").ok
        assert s.execute(f"nohup python3 slow.py {port} > slow.log 2>&1 < /dev/null &").ok
        fwd = s.forward(port)
        wait_until(lambda: serving(fwd.url), timeout=30)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(fetch, fwd.url, 30)
            wait_until(lambda: fwd.active == 1, timeout=10)
            time.sleep(0.5)  # the request is in the pod, which answers after 2 s
            proxy.drop_established()
            # the pod had not answered: the request goes again through a new tunnel
            assert answer.result() == b"slow ok"
        assert fwd.mode == "tunnel"
    finally:
        s.close(timeout=30)
        proxy.close()


def test_a_server_that_stops_serving_the_tunnel_moves_the_forward_to_websockets(
    cluster, tmp_path
) -> None:
    """The tunnel drops and the server no longer serves one (an API server restarted with
    PortForwardWebsockets off; the pod replaced onto a node that does not serve it): the next
    upgrade offers both subprotocols again, the server answers v4, and that connection and
    every later one go a WebSocket each, said in one line (the tunnel-only upgrade it made
    before failed every connection: a real node answers it with a bare 403)."""
    proxy = FaultProxy(cluster.port)
    config = proxy.kubeconfig(Path(cluster.kubeconfig_path), tmp_path / "kubeconfig")
    s = connect("torch-distributed", config_file=str(config))
    reported: list[str] = []
    try:
        port = free_port()
        assert s.execute("printf 'moved page' > moved.html").ok
        serve_http(s, port)
        fwd = s.forward(port, on_error=reported.append)
        wait_until(lambda: serving(fwd.url + "moved.html"), timeout=30)
        assert fwd.mode == "tunnel" and s.protocols.forwards == (
            (port, "tunnel", "SPDY/3.1+portforward.k8s.io"),
        )
        cluster.faults.portforward_tunnel = False
        proxy.drop_established()  # the tunnel too
        before = upgrades(cluster, s.pod)
        for _ in range(3):
            assert fetch(fwd.url + "moved.html", timeout=30) == b"moved page"
        assert fwd.mode == "websocket" and fwd.protocol == "v4.channel.k8s.io"
        assert s.protocols.forwards == ((port, "websocket", "v4.channel.k8s.io"),)
        assert upgrades(cluster, s.pod) - before == 3  # one WebSocket per connection
        assert [r for r in reported if "no longer serves" in r] == [
            f"the API server no longer serves SPDY/3.1+portforward.k8s.io for pod {s.pod} (it "
            "answered v4.channel.k8s.io): the forward goes via websocket from now on"
        ], reported
        wait_until(lambda: fwd.active == 0, timeout=30)
    finally:
        s.close(timeout=30)
        proxy.close()
