"""pods/portforward on the local cluster, as a kubelet serves it behind kube-apiserver.

A TrainJob's pod runs ``python -m http.server`` on a free port of the host (the pods' network).
The peers are the stock kubernetes client (``kubernetes.stream.portforward``) and
websocket-client reading the raw frames: port-number preambles, the error channel, close codes,
the refusals before the upgrade, and the TCP side (a listener of the test's own) closing when
the client goes.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import socket
import ssl
import struct
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import websocket
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward

from tests.helpers.polling import wait_until
from tests.helpers.ports import free_port
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.kubelet.portforward_ws import CHUNK

pytestmark = pytest.mark.timeout(120)

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
BINARY, BASE64 = "v4.channel.k8s.io", "v4.base64.channel.k8s.io"
PAGE = b"<html><body>port-forward page</body></html>\n"
BIG = 50 << 20
MID = 2 << 20


@dataclass
class Served:
    cluster: LocalCluster
    job: str
    pod: str
    port: int
    big: bytes
    mid: bytes


def new_api(cluster: LocalCluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig_path))


def job_pods(core: client.CoreV1Api, job: str) -> list[Any]:
    selector = f"jobset.sigs.k8s.io/jobset-name={job}"
    return core.list_namespaced_pod("default", label_selector=selector).items


def running_pod(core: client.CoreV1Api, job: str) -> str:
    def check() -> str | None:
        pods = [p for p in job_pods(core, job) if p.status.phase == "Running"]
        return pods[0].metadata.name if pods else None

    return wait_until(check, timeout=60)


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def create_job(api: client.ApiClient, name: str, command: list[str]) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 1, "command": command},
        },
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", body
    )


def delete_job(api: client.ApiClient, name: str) -> None:
    with contextlib.suppress(ApiException):
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", name
        )


@pytest.fixture(scope="module")
def served(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A pod serving a page, a 2 MiB and a 50 MiB file over HTTP on 127.0.0.1:port."""
    root = tmp_path_factory.mktemp("pf-www")
    big, mid = os.urandom(BIG), os.urandom(MID)
    (root / "index.html").write_bytes(PAGE)
    (root / "big.bin").write_bytes(big)
    (root / "mid.bin").write_bytes(mid)
    port = free_port()
    job = f"pf{secrets.token_hex(4)}"
    api = new_api(local_cluster)
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    create_job(api, job, [*argv, "--directory", str(root)])
    try:
        pod = running_pod(client.CoreV1Api(api), job)
        wait_until(lambda: listening(port), timeout=30)
        yield Served(local_cluster, job, pod, port, big, mid)
    finally:
        delete_job(api, job)
        api.close()


def open_forward(api: client.ApiClient, pod: str, ports: str) -> Any:
    core = client.CoreV1Api(api)
    return portforward(core.connect_get_namespaced_pod_portforward, pod, "default", ports=ports)


def read_to_eof(sock: Any) -> bytes:
    chunks = bytearray()
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return bytes(chunks)
        chunks += data


def http_get(sock: Any, path: str) -> tuple[str, bytes]:
    """An HTTP/1.0 GET over ``sock`` (the server closes after the body): status line, body."""
    sock.sendall(f"GET {path} HTTP/1.0\r\nHost: pod\r\n\r\n".encode())
    head, _, body = read_to_eof(sock).partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body


def pf_url(cluster: LocalCluster, pod: str, query: list[tuple[str, str]]) -> str:
    base = f"wss://127.0.0.1:{cluster.port}/api/v1/namespaces/default/pods/{pod}/portforward"
    return f"{base}?{urlencode(query)}" if query else base


def raw_ws(
    cluster: LocalCluster,
    pod: str,
    query: list[tuple[str, str]],
    protocols: Sequence[str] | None = (BINARY,),
    token: str | None = None,
) -> websocket.WebSocket:
    ws = websocket.WebSocket(sslopt={"cert_reqs": ssl.CERT_NONE, "check_hostname": False})
    ws.connect(
        pf_url(cluster, pod, query),
        header=[f"Authorization: Bearer {token or cluster.token}"],
        subprotocols=list(protocols) if protocols else None,
        timeout=30,
    )
    return ws


def refusal(
    cluster: LocalCluster, pod: str, query: list[tuple[str, str]], **kw: Any
) -> tuple[int, str, bytes]:
    """Status code, Content-Type and body of a refused upgrade."""
    with pytest.raises(websocket.WebSocketBadStatusException) as info:
        raw_ws(cluster, pod, query, **kw).close()
    exc = info.value
    headers = {k.lower(): v for k, v in (exc.resp_headers or {}).items()}
    return int(exc.status_code), headers.get("content-type", ""), exc.resp_body or b""


def status_message(body: bytes) -> str:
    status = json.loads(body)
    assert status["kind"] == "Status" and status["status"] == "Failure"
    return str(status["message"])


def messages(ws: websocket.WebSocket) -> tuple[list[tuple[int, bytes]], int | None]:
    """Every (opcode, payload) until the server's close, and its close code."""
    out: list[tuple[int, bytes]] = []
    while True:
        opcode, frame = ws.recv_data_frame(True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            code = struct.unpack("!H", frame.data[:2])[0] if frame.data else None
            return out, code
        out.append((opcode, frame.data))


def binary_data(frames: list[tuple[int, bytes]], channel: int) -> bytes:
    return b"".join(d[1:] for op, d in frames if d[:1] == bytes([channel]))


def port_bytes(port: int) -> bytes:
    return struct.pack("<H", port)


def connect_refused(pod: str, port: int) -> str:
    inner = (
        f"failed to connect to localhost:{port} inside namespace of pod default/{pod}: "
        f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    )
    return f"error forwarding port {port} to pod default/{pod}, uid : {inner}"


# -- data through the stock client -----------------------------------------------------------


def test_page_and_50mb_body_through_the_stock_client(served: Served) -> None:
    api = new_api(served.cluster)
    try:
        pf = open_forward(api, served.pod, str(served.port))
        status, body = http_get(pf.socket(served.port), "/index.html")
        assert status == "HTTP/1.0 200 OK" and body == PAGE
        assert pf.error(served.port) is None
        pf = open_forward(api, served.pod, str(served.port))
        start = time.monotonic()
        status, body = http_get(pf.socket(served.port), "/big.bin")
        elapsed = time.monotonic() - start
        assert status == "HTTP/1.0 200 OK" and len(body) == BIG
        assert hashlib.sha256(body).digest() == hashlib.sha256(served.big).digest()
        print(f"50 MiB through kubernetes.stream.portforward: {BIG / elapsed / 1e6:.0f} MB/s")
        wait_until(lambda: not pf.connected, timeout=10)  # the server closed after the body
    finally:
        api.close()


def test_50mb_body_raw_frames(served: Served) -> None:
    """The server side alone: the frames of a 50 MiB body read by websocket-client."""
    ws = raw_ws(served.cluster, served.pod, [("ports", str(served.port))])
    try:
        assert ws.recv() == b"\x00" + port_bytes(served.port)
        assert ws.recv() == b"\x01" + port_bytes(served.port)
        ws.send_binary(b"\x00GET /big.bin HTTP/1.0\r\n\r\n")
        start = time.monotonic()
        frames, code = messages(ws)
        elapsed = time.monotonic() - start
    finally:
        ws.close()
    assert code == 1000 and binary_data(frames, 1) == b""
    assert all(d[:1] == b"\x00" for _, d in frames)
    assert max(len(d) for _, d in frames) <= CHUNK + 1
    body = binary_data(frames, 0).partition(b"\r\n\r\n")[2]
    assert body == served.big
    print(f"50 MiB in raw frames: {BIG / elapsed / 1e6:.0f} MB/s")


def test_eight_concurrent_connections(served: Served) -> None:
    def fetch(i: int) -> tuple[str, bytes]:
        api = new_api(served.cluster)  # the stock portforward patches its ApiClient: one each
        try:
            pf = open_forward(api, served.pod, str(served.port))
            return http_get(pf.socket(served.port), "/index.html" if i % 2 else "/mid.bin")
        finally:
            api.close()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(fetch, range(8)))
    for i, (status, body) in enumerate(results):
        assert status == "HTTP/1.0 200 OK"
        assert body == (PAGE if i % 2 else served.mid)


# -- the protocol's details ------------------------------------------------------------------


def test_nothing_listening_error_channel_then_a_normal_close(served: Served) -> None:
    port = free_port()
    ws = raw_ws(served.cluster, served.pod, [("ports", str(port))])
    try:
        frames, code = messages(ws)
    finally:
        ws.close()
    assert frames == [
        (websocket.ABNF.OPCODE_BINARY, b"\x00" + port_bytes(port)),
        (websocket.ABNF.OPCODE_BINARY, b"\x01" + port_bytes(port)),
        (websocket.ABNF.OPCODE_BINARY, b"\x01" + connect_refused(served.pod, port).encode()),
    ]
    assert code == 1000
    api = new_api(served.cluster)
    try:
        pf = open_forward(api, served.pod, str(port))
        assert read_to_eof(pf.socket(port)) == b""
        assert pf.error(port) == connect_refused(served.pod, port)
    finally:
        api.close()


@pytest.mark.parametrize("protocols", [[BINARY], ["v5.channel.k8s.io", BASE64, BINARY], None])
def test_port_number_preambles_for_each_subprotocol(
    served: Served, protocols: list[str] | None
) -> None:
    """Both ports' numbers on their data and error channels; one or repeated ``ports``."""
    closed = free_port()
    b64 = protocols is not None and protocols[1:2] == [BASE64]
    joined = [("ports", f"{served.port},{closed}")]
    repeated = [("ports", str(served.port)), ("ports", str(closed))]
    for query in (joined, repeated):
        ws = raw_ws(served.cluster, served.pod, query, protocols=protocols)
        try:
            assert ws.getsubprotocol() == (protocols[1] if b64 else BINARY if protocols else None)
            first = [ws.recv_data_frame(True) for _ in range(4)]
            if b64:
                assert [op for op, _ in first] == [websocket.ABNF.OPCODE_TEXT] * 4
                got = [(f.data[:1], base64.b64decode(f.data[1:])) for _, f in first]
                want = [
                    (b"0", port_bytes(served.port)),
                    (b"1", port_bytes(served.port)),
                    (b"2", port_bytes(closed)),
                    (b"3", port_bytes(closed)),
                ]
                assert got == want
                ws.send("0" + base64.b64encode(b"GET /index.html HTTP/1.0\r\n\r\n").decode())
            else:
                assert [f.data for _, f in first] == [
                    b"\x00" + port_bytes(served.port),
                    b"\x01" + port_bytes(served.port),
                    b"\x02" + port_bytes(closed),
                    b"\x03" + port_bytes(closed),
                ]
                ws.send_binary(b"\x00GET /index.html HTTP/1.0\r\n\r\n")
            frames, code = messages(ws)
        finally:
            ws.close()
        assert code == 1000  # both forwards ended: the page was served, the other refused
        if b64:
            decoded = [(d[:1], base64.b64decode(d[1:])) for _, d in frames]
            data = b"".join(p for ch, p in decoded if ch == b"0")
            errors = b"".join(p for ch, p in decoded if ch == b"3")
        else:
            data, errors = binary_data(frames, 0), binary_data(frames, 3)
        assert data.endswith(b"\r\n\r\n" + PAGE)
        assert errors.decode() == connect_refused(served.pod, closed)


def test_client_closing_first_closes_the_tcp_side(served: Served) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(20)
        port = listener.getsockname()[1]
        ws = raw_ws(served.cluster, served.pod, [("ports", str(port))])
        peer, _ = listener.accept()
        with peer:
            peer.settimeout(20)
            assert ws.recv() == b"\x00" + port_bytes(port)
            assert ws.recv() == b"\x01" + port_bytes(port)
            upload = os.urandom(3 << 20)
            for i in range(0, len(upload), 1 << 20):  # the stock client's frames: up to 1 MiB
                ws.send_binary(b"\x00" + upload[i : i + (1 << 20)])
            got = bytearray()
            while len(got) < len(upload):
                got += peer.recv(1 << 20)
            assert got == upload
            peer.sendall(b"pong")
            assert ws.recv() == b"\x00pong"
            ws.close()
            assert peer.recv(16) == b""  # EOF: the forward closed its connection


def test_peer_closing_sends_what_it_wrote_then_closes_1000(served: Served) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(20)
        port = listener.getsockname()[1]
        ws = raw_ws(served.cluster, served.pod, [("ports", str(port))], protocols=None)
        try:
            peer, _ = listener.accept()
            payload = os.urandom(3 << 20)
            with peer:
                peer.sendall(payload)
            frames, code = messages(ws)
        finally:
            ws.close()
    assert code == 1000
    assert binary_data(frames, 0) == port_bytes(port) + payload
    assert binary_data(frames, 1) == port_bytes(port)


# -- refusals before the upgrade -------------------------------------------------------------


def test_refusals_before_the_upgrade(served: Served, tmp_path: Path) -> None:
    cluster, pod, port = served.cluster, served.pod, str(served.port)
    code, _, body = refusal(cluster, "nope-xyz", [("ports", port)])
    assert code == 404 and status_message(body) == 'pods "nope-xyz" not found'
    api = new_api(cluster)
    try:
        with pytest.raises(ApiException) as info:
            open_forward(api, "nope-xyz", port)
        assert "404" in str(info.value.reason)
    finally:
        api.close()
    # the ports kube-apiserver cannot decode: a Status
    for value, why in (("abc", "invalid syntax"), ("70000", "value out of range"), ("", "")):
        code, ctype, body = refusal(cluster, pod, [("ports", value)])
        why = why or "invalid syntax"
        assert code == 400 and ctype.startswith("application/json")
        assert status_message(body) == (
            f'cannot convert to []int32: strconv.ParseUint: parsing "{value}": {why}'
        )
    # what kubelet refuses: its text/plain body, passed on by the apiserver's proxy
    for query, text in (
        ([], 'query parameter "port" is required'),
        ([("ports", f"{port},0")], f'port "{port},0" must be > 0'),
    ):
        code, ctype, body = refusal(cluster, pod, query)
        assert (code, body.decode()) == (400, text) and ctype.startswith("text/plain")
    code, _, body = refusal(cluster, pod, [("ports", port)], protocols=["v5.channel.k8s.io"])
    assert code == 400 and "not supported" in status_message(body)


def test_plain_get_and_a_completed_pod_are_400(served: Served, unique_name: Any) -> None:
    api = new_api(served.cluster)
    try:
        status, body = plain_get(api, served.pod, served.port)
        assert status == 400 and status_message(body) == "Upgrade request required"
        job = unique_name("pf")
        create_job(api, job, ["true"])
        try:
            core = client.CoreV1Api(api)
            pods = wait_until(
                lambda: [p for p in job_pods(core, job) if p.status.phase == "Succeeded"],
                timeout=60,
            )
            code, _, body = refusal(served.cluster, pods[0].metadata.name, [("ports", "80")])
            assert code == 400 and status_message(body) == (
                "unable to forward port because pod is not running. Current status=Succeeded"
            )
        finally:
            delete_job(api, job)
    finally:
        api.close()


def plain_get(api: client.ApiClient, pod: str, port: int) -> tuple[int, bytes]:
    cfg = api.configuration
    headers = {a["key"]: a["value"] for a in cfg.auth_settings().values() if a["in"] == "header"}
    url = f"{cfg.host}/api/v1/namespaces/default/pods/{pod}/portforward?ports={port}"
    resp = api.call_api("GET", url, header_params=headers)
    return resp.status, resp.read()


def test_rbac_get_and_create_on_pods_portforward(served: Served) -> None:
    cluster, pod, port = served.cluster, served.pod, str(served.port)
    for verb in ("get", "create"):
        token = cluster.add_user(f"pf-{verb}", deny=[(verb, "pods/portforward")])
        code, _, body = refusal(cluster, pod, [("ports", port)], token=token)
        assert code == 403 and status_message(body) == (
            f'pods "{pod}" is forbidden: User "pf-{verb}" cannot {verb} resource '
            f'"pods/portforward" in API group "" in the namespace "default"'
        )
    token = cluster.add_user("pf-exec-only", deny=[("create", "pods/exec")])
    ws = raw_ws(cluster, pod, [("ports", port)], token=token)
    ws.close()


def test_discovery_lists_pods_portforward(served: Served) -> None:
    api = new_api(served.cluster)
    try:
        resources = client.CoreV1Api(api).get_api_resources().resources
    finally:
        api.close()
    entry = next(r for r in resources if r.name == "pods/portforward")
    assert entry.kind == "PodPortForwardOptions" and sorted(entry.verbs) == ["create", "get"]
