"""session.forward() on a real cluster (issue 31): one tunnel (WebSocket carrying SPDY) for many
connections, the v4 WebSocket fallback, a stream the pod resets (nothing listens) that leaves the
tunnel up, the tunnel dropping mid-transfer (through a TCP proxy in front of the API server),
and a forward that outlives its trainer pod, replaced by the job.

Port-forward does not depend on the runtime: one runtime (the first of
``TRAINJOB_MAGICS_E2E_RUNTIMES``). Replacing the trainer pod deletes it with
``TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG`` when set (a user's Role need not delete pods), else with
the user's kubeconfig. ``tests/integration/test_realcluster_suite.py`` runs this module against
the local cluster too.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import subprocess
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from tests.helpers.faultproxy import FaultProxy
from tests.helpers.polling import wait_until
from tests.helpers.ports import fetch, free_port, serve_http, serving
from tests.realcluster.settings import ADMIN, KUBECONFIG, NAMESPACE, NEEDS_CLUSTER, RUNTIMES, WAIT
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E

RUNTIME = RUNTIMES[0]

SIZE = 16 * 1024 * 1024
RESET_ERRORS = (ConnectionError, urllib.error.URLError, http.client.HTTPException)

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.timeout(900),
    NEEDS_CLUSTER,
]


def _connect(config_file: str = KUBECONFIG) -> TrainJobSession:
    return connect(RUNTIME, config_file=config_file, namespace=NAMESPACE, timeout=WAIT, num_nodes=1)


def _server_minor() -> int:
    client = kubernetes.config.new_client_from_config(config_file=KUBECONFIG)
    try:
        version = kubernetes.client.VersionApi(client).get_code()
    finally:
        client.close()
    return int("".join(ch for ch in version.minor if ch.isdigit()))


@pytest.fixture(scope="module")
def session() -> Iterator[TrainJobSession]:
    s = _connect()
    yield s
    s.close(timeout=300)


@pytest.fixture(scope="module")
def served(session: TrainJobSession) -> tuple[int, str]:
    """A port served in the trainer pod, with ``index.html`` and ``big.bin`` (16 MB random)."""
    port = free_port()
    made = session.execute(
        f"printf 'forward page' > index.html && head -c {SIZE} /dev/urandom > big.bin"
    )
    assert made.ok, made.stderr
    serve_http(session, port, wait=60)
    return port, session.execute("sha256sum big.bin").stdout.split()[0]


def test_many_connections_share_one_tunnel(session: TrainJobSession, served) -> None:
    """kube-apiserver 1.31+ serves the tunnel (PortForwardWebsockets, beta and on): every
    connection is a stream pair in the one upgrade; the bytes arrive exact."""
    port, digest = served
    with session.forward(port) as fwd:
        if _server_minor() >= 31:
            assert fwd.mode == "tunnel", fwd
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            pages = list(pool.map(lambda _i: fetch(fwd.url + "index.html", 60), range(24)))
        assert pages == [b"forward page"] * 24
        assert hashlib.sha256(fetch(fwd.url + "big.bin", 120)).hexdigest() == digest
        wait_until(lambda: fwd.active == 0, timeout=60)
        if fwd.mode == "tunnel":
            assert fwd.upgrades == 1, fwd.upgrades  # the start's; 25 connections rode in it
        assert not fwd.errors, fwd.errors


def test_the_websocket_fallback_serves_the_same_bytes(session: TrainJobSession, served) -> None:
    """``via="websocket"``: what a server without the tunnel gets (one v4.channel.k8s.io
    WebSocket per connection), chosen once, said in the forward's repr."""
    port, digest = served
    with session.forward(port, via="websocket") as fwd:
        assert fwd.mode == "websocket" and "websocket" in repr(fwd)
        for _ in range(3):
            assert fetch(fwd.url + "index.html", 60) == b"forward page"
        assert hashlib.sha256(fetch(fwd.url + "big.bin", 120)).hexdigest() == digest
        wait_until(lambda: fwd.active == 0, timeout=60)
        assert fwd.upgrades == 5, fwd.upgrades  # the start's, then one per connection
        assert not fwd.errors, fwd.errors


def test_a_stream_the_pod_resets_leaves_the_tunnel_up(session: TrainJobSession) -> None:
    """Nothing listens: each connection is reset, said once; the server started later is
    reached through the same tunnel."""
    port = free_port()
    reported: list[str] = []
    with session.forward(port, on_error=reported.append) as fwd:
        wait_until(lambda: reported, timeout=60)  # the start's probe: nothing listens yet
        assert "nothing listens" in reported[0], reported
        for _ in range(3):
            with pytest.raises(RESET_ERRORS):
                fetch(fwd.url, timeout=60)
        wait_until(lambda: len(reported) == 2, timeout=60)
        assert "nothing accepts connections" in reported[1], reported
        assert session.execute(f"printf up > up{port}.txt").ok
        serve_http(session, port, wait=60)
        assert fetch(fwd.url + f"up{port}.txt", 60) == b"up"
        assert len(reported) == 2, reported  # three refused streams, said once
        if fwd.mode == "tunnel":
            assert fwd.upgrades == 1, fwd.upgrades


def test_the_tunnel_dropping_mid_transfer(tmp_path: Path) -> None:
    """Every TCP connection to the API server reset mid-download: the transfer ends with an
    error (never a clean short end), and the next connection opens a new tunnel."""
    proxy = FaultProxy.for_kubeconfig(Path(KUBECONFIG), tmp_path / "kubeconfig")
    s = _connect(str(tmp_path / "kubeconfig"))
    try:
        port = free_port()
        assert s.execute(f"head -c {SIZE} /dev/zero > zero.bin").ok
        serve_http(s, port, wait=60)
        with s.forward(port) as fwd:
            wait_until(lambda: serving(fwd.url), timeout=60)
            before = fwd.upgrades
            conn = http.client.HTTPConnection("127.0.0.1", fwd.local_port, timeout=120)
            conn.request("GET", "/zero.bin")
            resp = conn.getresponse()
            assert resp.read(1 << 20) == bytes(1 << 20)
            proxy.drop_established()  # the tunnel's connection among them
            with pytest.raises(RESET_ERRORS):
                rest = resp.read()
                assert len(rest) == SIZE - (1 << 20), "the transfer ended short without an error"
            conn.close()
            assert fetch(fwd.url + "zero.bin", timeout=120) == bytes(SIZE)
            assert fwd.upgrades > before
            wait_until(lambda: fwd.active == 0, timeout=60)
    finally:
        s.close(timeout=300)
        proxy.close()


def _delete_pod(name: str, namespace: str) -> None:
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", ADMIN, "delete", "pod", name, "-n", namespace, "--wait=true"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_forward_outlives_a_replaced_trainer_pod() -> None:
    """The trainer pod deleted: its Job creates another; the forward's next connection finds
    it (the session's commands too), and the server started there is reached."""
    s = _connect()
    try:
        port = free_port()
        assert s.execute("printf first > who.txt").ok
        serve_http(s, port, wait=60)
        with s.forward(port) as fwd:
            assert fetch(fwd.url + "who.txt", 60) == b"first"
            old = s.pod
            _delete_pod(old, s.namespace)
            # the next connection waits for the new pod; nothing listens there yet: a reset
            with pytest.raises(RESET_ERRORS):
                fetch(fwd.url + "who.txt", timeout=WAIT)
            assert fwd.pod != old and s.pod == fwd.pod
            assert s.execute("printf second > who.txt").ok
            serve_http(s, port, wait=60)
            assert fetch(fwd.url + "who.txt", 60) == b"second"
            assert not fwd.closed
    finally:
        s.close(timeout=300)
    with pytest.raises(E.SessionClosedError):
        s.forward(port)
