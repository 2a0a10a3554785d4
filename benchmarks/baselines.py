"""The baselines: the stock kubernetes client WSClient loop, kubectl exec, a raw socket reader."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import ssl
import subprocess
import urllib.parse
from dataclasses import dataclass

from kubernetes import client
from kubernetes.stream import stream

from benchmarks.k8s import KubeTarget


@dataclass
class RawResult:
    """What a baseline read: byte counts (or text) and the exit status."""

    stdout_len: int
    stderr_len: int
    status: dict | None
    frames: int = 0
    stdout: bytes | str | None = None


def stock_exec(
    core: client.CoreV1Api, pod: str, namespace: str, command: list[str], keep: bool = False
) -> RawResult:
    """The seed PR's loop: stream(_preload_content=False), then update/read_stdout until closed."""
    ws = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=command,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    out: list[str] = []
    err: list[str] = []
    while ws.is_open():
        ws.update(timeout=1)
        if ws.peek_stdout():
            out.append(ws.read_stdout())
        if ws.peek_stderr():
            err.append(ws.read_stderr())
    try:
        rc = ws.returncode
    except (TypeError, ValueError):
        rc = None
    ws.close()
    text = "".join(out)
    return RawResult(
        len(text), sum(map(len, err)), {"returncode": rc}, stdout=text if keep else None
    )


def kubectl_exec(kubeconfig: str, cache_dir: str, pod: str, namespace: str, command: list[str]):
    """`kubectl exec POD -- CMD` as a subprocess; returns the CompletedProcess."""
    return subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            kubeconfig,
            "--cache-dir",
            cache_dir,
            "-n",
            namespace,
            "exec",
            pod,
            "--",
            *command,
        ],
        capture_output=True,
        check=False,
    )


def exec_path(namespace: str, pod: str, command: list[str], container: str | None = None) -> str:
    """The pods/exec request path with one `command=` per argv element."""
    q: list[tuple[str, str]] = [("command", c) for c in command]
    if container:
        q.append(("container", container))
    q += [("stdout", "true"), ("stderr", "true")]
    return f"/api/v1/namespaces/{namespace}/pods/{pod}/exec?" + urllib.parse.urlencode(q)


_SSL_CONTEXTS: dict[tuple[bytes | None, str | None, str | None], ssl.SSLContext] = {}


def _ssl_context(target: KubeTarget) -> ssl.SSLContext:
    """One TLS context per CA and client certificate (built once: loading them costs
    milliseconds, which the floor should not pay on every exec)."""
    key = (target.ca_pem, target.cert_file, target.key_file)
    ctx = _SSL_CONTEXTS.get(key)
    if ctx is None:
        ctx = ssl.create_default_context(cadata=target.ca_pem.decode() if target.ca_pem else None)
        ctx.check_hostname = False
        if not target.ca_pem:
            ctx.verify_mode = ssl.CERT_NONE
        if target.cert_file:
            ctx.load_cert_chain(target.cert_file, target.key_file)
        _SSL_CONTEXTS[key] = ctx
    return ctx


def _send_upgrade(target: KubeTarget, path: str) -> socket.socket:
    """A (TLS) socket to the API server with the exec upgrade request for ``path`` sent."""
    u = urllib.parse.urlparse(target.server)
    host = u.hostname or "127.0.0.1"
    port = u.port or (443 if u.scheme == "https" else 80)
    sock: socket.socket = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if u.scheme == "https":
        sock = _ssl_context(target).wrap_socket(sock, server_hostname=host)
    key = base64.b64encode(os.urandom(16)).decode()
    req = (
        f"GET {path} HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: v5.channel.k8s.io, v4.channel.k8s.io\r\n"
        + (f"Authorization: Bearer {target.token}\r\n" if target.token else "")
        + "\r\n"
    )
    sock.sendall(req.encode())
    return sock


def raw_exec(
    target: KubeTarget, namespace: str, pod: str, command: list[str], bufsize: int = 1 << 20
) -> RawResult:
    """Minimal WebSocket reader: TLS socket, upgrade, parse frame headers, count payload bytes.

    This is the physical limit of reading the exec output in Python on this machine: it only
    walks frame headers and counts bytes per channel (no copies, no decode).
    """
    sock = _send_upgrade(target, exec_path(namespace, pod, command))
    buf = bytearray(bufsize)
    mv = memoryview(buf)
    # read the HTTP response head
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("connection closed during the upgrade")
        head += chunk
    end = head.index(b"\r\n\r\n") + 4
    status_line = head.split(b"\r\n", 1)[0]
    if b" 101 " not in status_line + b" ":
        raise ConnectionError(f"upgrade failed: {status_line!r}")
    pending = bytearray(head[end:])  # bytes after the head, not yet parsed

    counts = [0] * 256
    status_payload = bytearray()
    frames = 0
    skip = 0  # payload bytes still to skip in the current frame
    chan = -1  # channel of the current frame (-1: channel byte not read yet)
    opcode = 0
    closed = False
    hdr = bytearray()

    def feed(data: memoryview) -> None:
        nonlocal skip, chan, opcode, closed, frames, hdr
        if hdr:  # a header was split across two reads (rare): glue it to this chunk
            data = memoryview(bytes(hdr) + bytes(data))
            hdr = bytearray()
        i, n = 0, len(data)
        while i < n:
            if skip:
                if chan < 0:
                    chan = data[i]
                    i += 1
                    skip -= 1
                    continue
                take = skip if skip < n - i else n - i
                if chan == 3:
                    status_payload.extend(data[i : i + take])
                counts[chan] += take
                i += take
                skip -= take
                continue
            if n - i < 2:
                hdr = bytearray(data[i:])
                return
            b1 = data[i + 1]
            ln = b1 & 0x7F
            need = 2 + (2 if ln == 126 else 8 if ln == 127 else 0) + (4 if b1 & 0x80 else 0)
            if n - i < need:
                hdr = bytearray(data[i:])
                return
            opcode = data[i] & 0x0F
            if ln == 126:
                ln = int.from_bytes(data[i + 2 : i + 4], "big")
            elif ln == 127:
                ln = int.from_bytes(data[i + 2 : i + 10], "big")
            i += need
            frames += 1
            if opcode == 8:
                closed = True
                return
            if opcode in (1, 2):
                chan = -1  # the first payload byte is the channel
            elif opcode != 0:
                chan = 0  # ping/pong: counted under stdin, ignored
            skip = ln

    if pending:
        feed(memoryview(pending))
    while not closed:
        n = sock.recv_into(buf)
        if n == 0:
            break
        feed(mv[:n])
    with contextlib.suppress(OSError):
        sock.close()
    status = None
    if status_payload:
        try:
            status = json.loads(bytes(status_payload))
        except ValueError:
            status = None
    return RawResult(counts[1], counts[2], status, frames=frames)


def raw_exec_stdin(
    target: KubeTarget,
    namespace: str,
    pod: str,
    command: list[str],
    source: str,
    chunk: int = 1 << 18,
) -> RawResult:
    """Minimal WebSocket writer: send the file ``source`` as stdin frames (all-zero mask key,
    so no XOR), close stdin (v5), then read until the server closes.

    The upload floor: no tar, no hashing, no masking work, one copy per frame.
    """
    sock = _upgrade(target, namespace, pod, command, stdin=True)
    zero_mask = b"\x00\x00\x00\x00"
    with open(source, "rb") as fh:
        while True:
            data = fh.read(chunk)
            if not data:
                break
            n = len(data) + 1
            if n < 126:
                head = bytes([0x82, 0x80 | n])
            elif n < 1 << 16:
                head = bytes([0x82, 0x80 | 126]) + n.to_bytes(2, "big")
            else:
                head = bytes([0x82, 0x80 | 127]) + n.to_bytes(8, "big")
            sock.sendall(head + zero_mask + b"\x00" + data)
    sock.sendall(bytes([0x82, 0x82]) + zero_mask + b"\xff\x00")  # v5: close stdin
    status = _read_until_close(sock)
    sock.sendall(bytes([0x88, 0x82]) + zero_mask + b"\x03\xe8")  # our close reply
    with contextlib.suppress(OSError):
        sock.close()
    return RawResult(0, 0, status)


def _read_until_close(sock: socket.socket) -> dict | None:
    """Walk server frames until the close frame; return the channel-3 status, if any."""
    buf = bytearray()
    status: dict | None = None
    while True:
        part = sock.recv(1 << 16)
        if not part:
            return status
        buf += part
        while len(buf) >= 2:
            ln, off = buf[1] & 0x7F, 2
            if ln == 126:
                if len(buf) < 4:
                    break
                ln, off = int.from_bytes(buf[2:4], "big"), 4
            elif ln == 127:
                if len(buf) < 10:
                    break
                ln, off = int.from_bytes(buf[2:10], "big"), 10
            if len(buf) < off + ln:
                break
            opcode, payload = buf[0] & 0x0F, bytes(buf[off : off + ln])
            del buf[: off + ln]
            if opcode == 8:
                return status
            if opcode == 2 and payload[:1] == b"\x03":
                status = json.loads(payload[1:])


def _upgrade(
    target: KubeTarget, namespace: str, pod: str, command: list[str], *, stdin: bool
) -> socket.socket:
    """A TLS socket past the pods/exec WebSocket upgrade (v5 offered first)."""
    path = exec_path(namespace, pod, command) + ("&stdin=true" if stdin else "")
    sock = _send_upgrade(target, path)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)  # byte by byte: nothing after the head is consumed
        if not chunk:
            raise ConnectionError("connection closed during the upgrade")
        head += chunk
    status_line = head.split(b"\r\n", 1)[0]
    if b" 101 " not in status_line + b" ":
        raise ConnectionError(f"upgrade failed: {status_line!r}")
    return sock


def kubectl_cp(kubeconfig: str, cache_dir: str, namespace: str, src: str, dst: str) -> None:
    """`kubectl cp SRC DST` (one side is POD:PATH) as a subprocess; raises on failure."""
    proc = subprocess.run(
        [
            *("kubectl", "--kubeconfig", kubeconfig, "--cache-dir", cache_dir, "-n", namespace),
            *("cp", "-c", "node", src, dst),
        ],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl cp failed: {proc.stderr.decode(errors='replace')[-300:]}")
