"""session.forward() over the local cluster's pods/portforward: pages and a 50 MB file byte for
byte, 8 concurrent clients, nothing listening, close freeing the port, a replaced trainer pod."""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.helpers.polling import wait_until
from tests.helpers.ports import fetch, free_port, port_is_free, serve_http, serving
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

SIZE_50MB = 50 * 1024 * 1024


def listening(session: TrainJobSession, port: int) -> bool:
    """Whether something in the pod accepts connections on ``port`` (checked in the pod)."""
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2).close()"
    return session.execute(["python3", "-c", probe]).ok


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[TrainJobSession]:
    s = connect("torch-distributed", config_file=str(local_cluster.kubeconfig_path))
    yield s
    s.close(timeout=30)


@pytest.fixture(scope="module")
def server_port(session: TrainJobSession) -> int:
    port = free_port()
    page = "<html><body>hello from the pod</body></html>"
    assert session.execute(f"printf '%s' '{page}' > index.html").ok
    assert session.execute(f"head -c {SIZE_50MB} /dev/urandom > big.bin").ok
    serve_http(session, port)
    wait_until(lambda: listening(session, port), timeout=30)
    return port


def test_page_and_50mb_file_byte_exact(local_cluster, session, server_port) -> None:
    with session.forward(server_port) as fwd:
        assert fwd.url == f"http://127.0.0.1:{fwd.local_port}/"
        assert (fwd.active, fwd.connections) == (0, 0)  # the start's probe is no connection
        wait_until(lambda: serving(fwd.url), timeout=30)
        assert b"hello from the pod" in fetch(fwd.url + "index.html")
        body = fetch(fwd.url + "big.bin", timeout=120)
        expected = (local_cluster.pod_dir("default", session.pod) / "big.bin").read_bytes()
        assert len(body) == SIZE_50MB
        assert hashlib.sha256(body).digest() == hashlib.sha256(expected).digest()
        assert fwd.pod == session.pod
        assert fwd.errors == []


def test_eight_concurrent_clients(session, server_port) -> None:
    with session.forward(server_port) as fwd:
        wait_until(lambda: serving(fwd.url), timeout=30)

        def client(i: int) -> list[bytes]:
            conn = http.client.HTTPConnection("127.0.0.1", fwd.local_port, timeout=60)
            bodies = []
            for _ in range(5):
                conn.request("GET", "/index.html", headers={"Connection": "keep-alive"})
                bodies.append(conn.getresponse().read())
            conn.close()
            return bodies

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(client, range(8)))
        assert all(b"hello from the pod" in body for bodies in results for body in bodies)
        assert sum(len(bodies) for bodies in results) == 40
        assert fwd.connections >= 8


def test_nothing_listening_resets_the_connection_and_reports_once(session) -> None:
    port = free_port()
    reported: list[str] = []
    with session.forward(port, on_error=reported.append) as fwd:
        # the probe at start already says nothing listens yet
        wait_until(lambda: reported, timeout=30)
        assert len(reported) == 1 and f"nothing listens on port {port}" in reported[0]
        for _ in range(3):
            with pytest.raises((ConnectionError, urllib.error.URLError, http.client.HTTPException)):
                fetch(fwd.url, timeout=30)
        wait_until(lambda: len(reported) == 2, timeout=30)
        assert f"nothing accepts connections on port {port}" in reported[1]
        assert "refused" in reported[1]
        assert len(reported) == 2  # three refused connections, one report
        # the forward is not dead: once a server listens, the next connection works
        assert session.execute("printf ok > ok.txt").ok
        serve_http(session, port)
        wait_until(lambda: serving(fwd.url + "ok.txt"), timeout=30)
        assert fetch(fwd.url + "ok.txt") == b"ok"


def test_close_frees_the_local_port(session, server_port) -> None:
    fwd = session.forward(server_port)
    wait_until(lambda: serving(fwd.url), timeout=30)
    assert fwd in session.forwards
    conn = http.client.HTTPConnection("127.0.0.1", fwd.local_port, timeout=30)
    conn.request("GET", "/index.html")
    assert conn.getresponse().read()
    fwd.close()
    assert fwd not in session.forwards
    assert port_is_free(fwd.local_port)
    conn.close()


def test_fixed_local_port_and_its_conflict(session, server_port) -> None:
    local = free_port()
    with session.forward(server_port, local_port=local) as fwd:
        assert fwd.local_port == local
        wait_until(lambda: serving(fwd.url), timeout=30)
        with pytest.raises(E.InvalidInputError, match=f"local port {local} is already in use"):
            session.forward(server_port, local_port=local)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"port": 0}, "port must be a port number from 1 to 65535"),
        ({"port": 70000}, "port must be a port number"),
        ({"port": "http"}, "port must be a port number"),
        ({"port": 80, "local_port": -1}, "local_port must be a port number from 0"),
        ({"port": 80, "address": "my laptop"}, "address must be an IP address"),
        ({"port": 80, "pod": "all"}, "a forward goes to one pod"),
    ],
)
def test_bad_arguments_fail_before_anything_is_sent(session, kwargs, match) -> None:
    port = kwargs.pop("port")
    with pytest.raises(E.InvalidInputError, match=match):
        session.forward(port, **kwargs)


def test_session_close_ends_its_forwards(local_cluster) -> None:
    s = connect("torch-distributed", config_file=str(local_cluster.kubeconfig_path))
    try:
        port = free_port()
        serve_http(s, port)
        fwd = s.forward(port)
        wait_until(lambda: serving(fwd.url), timeout=30)
    finally:
        s.close(timeout=30)
    assert fwd.closed and fwd.closed_reason == "session closed"
    assert port_is_free(fwd.local_port)
    with pytest.raises(E.SessionClosedError):
        s.forward(port)


def test_a_replaced_trainer_pod_is_followed(local_cluster, kubectl) -> None:
    s = connect("torch-distributed", config_file=str(local_cluster.kubeconfig_path))
    try:
        port = free_port()
        assert s.execute("printf first > who.txt").ok
        serve_http(s, port)
        fwd = s.forward(port)
        wait_until(lambda: serving(fwd.url + "who.txt"), timeout=30)
        assert fetch(fwd.url + "who.txt") == b"first"
        old = s.pod
        done = kubectl("delete", "pod", old, "-n", s.namespace, "--wait=true", timeout=120)
        assert done.returncode == 0, done.stderr
        # the next connection finds the job's new trainer pod (waiting for it to run); nothing
        # listens there yet, so that connection is reset
        with pytest.raises((ConnectionError, urllib.error.URLError, http.client.HTTPException)):
            fetch(fwd.url + "who.txt", timeout=150)
        new = fwd.pod
        assert new != old
        assert s.pod == new  # the session's commands go there too
        assert s.execute("printf second > who.txt").ok
        serve_http(s, port)
        wait_until(lambda: serving(fwd.url + "who.txt"), timeout=60)
        assert fetch(fwd.url + "who.txt") == b"second"
        assert fwd.pod == new
    finally:
        s.close(timeout=30)
