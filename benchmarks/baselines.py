"""The baselines: the stock kubernetes client WSClient loop and port-forward, kubectl exec, cp
and port-forward, the raw socket readers and writer."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from kubernetes.stream import portforward, stream

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


# the kubectl the baselines run: `python -m benchmarks --kubectl PATH` sets it; default PATH's
KUBECTL_ENV = "TRAINJOB_MAGICS_KUBECTL"


def kubectl() -> str:
    """The kubectl to compare with: ``$TRAINJOB_MAGICS_KUBECTL``, else ``kubectl`` on PATH."""
    return os.environ.get(KUBECTL_ENV) or "kubectl"


def kubectl_available() -> bool:
    """Whether that kubectl exists (a path, or a name on PATH)."""
    return shutil.which(kubectl()) is not None


@contextlib.contextmanager
def using_kubectl(path: str) -> Iterator[None]:
    """The baselines run ``path`` inside the block (``$TRAINJOB_MAGICS_KUBECTL``)."""
    before = os.environ.get(KUBECTL_ENV)
    os.environ[KUBECTL_ENV] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(KUBECTL_ENV, None)
        else:
            os.environ[KUBECTL_ENV] = before


@functools.lru_cache(maxsize=16)
def _client_version(path: str) -> str:
    argv = [path, "version", "--client", "-o", "json"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        return json.loads(proc.stdout)["clientVersion"]["gitVersion"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
        return "unknown version"


def kubectl_version(path: str | None = None) -> str:
    """``kubectl version --client``'s gitVersion of ``path`` (default: ``kubectl()``), or a
    short reason it has none."""
    return _client_version(path or kubectl())


def kubectl_label(path: str | None = None) -> str:
    """``kubectl v1.31.0 (/path/to/kubectl)``: what the results name as the baseline."""
    path = path or kubectl()
    return f"kubectl {kubectl_version(path)} ({shutil.which(path) or path})"


def kubectl_exec(
    kubeconfig: str,
    cache_dir: str,
    pod: str,
    namespace: str,
    command: list[str],
    flags: tuple[str, ...] = (),
):
    """`kubectl [FLAGS] exec POD -- CMD` as a subprocess; returns the CompletedProcess."""
    return subprocess.run(
        [
            kubectl(),
            *flags,
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


EXEC_PROTOCOLS = "v5.channel.k8s.io, v4.channel.k8s.io"
PORTFORWARD_PROTOCOL = "v4.channel.k8s.io"


def _send_upgrade(target: KubeTarget, path: str, protocols: str = EXEC_PROTOCOLS) -> socket.socket:
    """A (TLS) socket to the API server with the WebSocket upgrade request for ``path`` sent."""
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
        f"Sec-WebSocket-Protocol: {protocols}\r\n"
        + (f"Authorization: Bearer {target.token}\r\n" if target.token else "")
        + "\r\n"
    )
    sock.sendall(req.encode())
    return sock


class FrameCounter:
    """Walks server WebSocket frames of the k8s channel protocol and counts payload bytes per
    channel (no copies, no decode); keeps the payload of one channel (``keep``: exec's status
    channel 3, port-forward's error channel 1)."""

    def __init__(self, keep: int) -> None:
        self.counts = [0] * 256
        self.kept = bytearray()
        self.frames = 0
        self.closed = False
        self._keep = keep
        self._skip = 0  # payload bytes still to skip in the current frame
        self._chan = -1  # channel of the current frame (-1: channel byte not read yet)
        self._hdr = bytearray()  # a header split across two reads

    def feed(self, data: memoryview) -> None:
        """Account for one chunk read from the socket."""
        if self._hdr:  # a header was split across two reads (rare): glue it to this chunk
            data = memoryview(bytes(self._hdr) + bytes(data))
            self._hdr = bytearray()
        skip, chan, counts = self._skip, self._chan, self.counts
        i, n = 0, len(data)
        while i < n:
            if skip:
                if chan < 0:
                    chan = data[i]
                    i += 1
                    skip -= 1
                    continue
                take = skip if skip < n - i else n - i
                if chan == self._keep:
                    self.kept.extend(data[i : i + take])
                counts[chan] += take
                i += take
                skip -= take
                continue
            if n - i < 2:
                self._hdr = bytearray(data[i:])
                break
            b1 = data[i + 1]
            ln = b1 & 0x7F
            need = 2 + (2 if ln == 126 else 8 if ln == 127 else 0) + (4 if b1 & 0x80 else 0)
            if n - i < need:
                self._hdr = bytearray(data[i:])
                break
            opcode = data[i] & 0x0F
            if ln == 126:
                ln = int.from_bytes(data[i + 2 : i + 4], "big")
            elif ln == 127:
                ln = int.from_bytes(data[i + 2 : i + 10], "big")
            i += need
            self.frames += 1
            if opcode == 8:
                self.closed = True
                break
            if opcode in (1, 2):
                chan = -1  # the first payload byte is the channel
            elif opcode != 0:
                chan = 255  # ping/pong: counted apart, ignored
            skip = ln
        self._skip, self._chan = skip, chan


def _read_head(sock: socket.socket) -> bytes:
    """Read the upgrade answer's head; return the bytes after it (raise unless a 101)."""
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
    return head[end:]


def exec_subprotocol(target: KubeTarget, namespace: str, pod: str) -> str:
    """The subprotocol the API server picks from ``EXEC_PROTOCOLS`` for an exec of ``true`` on
    ``pod`` ("" when its 101 names none)."""
    sock = _send_upgrade(target, exec_path(namespace, pod, ["true"]))
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError("connection closed during the upgrade")
            head += chunk
    finally:
        sock.close()
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-protocol":
            return value.strip().decode()
    return ""


def _count_until_close(
    sock: socket.socket, walk: FrameCounter, pending: bytes, bufsize: int
) -> None:
    """Feed ``pending``, then everything the socket reads, to ``walk`` until the close frame
    or EOF; close the socket."""
    buf = bytearray(bufsize)
    mv = memoryview(buf)
    if pending:
        walk.feed(memoryview(pending))
    while not walk.closed:
        n = sock.recv_into(buf)
        if n == 0:
            break
        walk.feed(mv[:n])
    with contextlib.suppress(OSError):
        sock.close()


def raw_exec(
    target: KubeTarget, namespace: str, pod: str, command: list[str], bufsize: int = 1 << 20
) -> RawResult:
    """Minimal WebSocket reader: TLS socket, upgrade, parse frame headers, count payload bytes.

    This is the physical limit of reading the exec output in Python on this machine: it only
    walks frame headers and counts bytes per channel (no copies, no decode).
    """
    sock = _send_upgrade(target, exec_path(namespace, pod, command))
    pending = _read_head(sock)
    walk = FrameCounter(keep=3)
    _count_until_close(sock, walk, pending, bufsize)
    status = None
    if walk.kept:
        try:
            status = json.loads(bytes(walk.kept))
        except ValueError:
            status = None
    return RawResult(walk.counts[1], walk.counts[2], status, frames=walk.frames)


def portforward_path(namespace: str, pod: str, port: int) -> str:
    """The pods/portforward request path for one port."""
    return f"/api/v1/namespaces/{namespace}/pods/{pod}/portforward?ports={int(port)}"


def masked_frame(payload: bytes) -> bytes:
    """One binary client frame with an all-zero mask key (masking is then a no-op)."""
    n = len(payload)
    if n < 126:
        head = bytes([0x82, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x82, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x82, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\x00\x00\x00\x00" + payload


def raw_portforward(
    target: KubeTarget,
    namespace: str,
    pod: str,
    port: int,
    request: bytes,
    bufsize: int = 1 << 20,
) -> RawResult:
    """Minimal pods/portforward reader (``v4.channel.k8s.io``): upgrade, ``request`` as one
    masked frame on channel 0, then count channel-0 bytes until the server closes.

    The floor of a forwarded download: one stream, no local socket, no relay, no copies.
    ``stdout_len`` is the data the pod's port sent (the 2-byte port preamble taken off),
    ``stdout`` the error channel's text, if any.
    """
    sock = _send_upgrade(target, portforward_path(namespace, pod, port), PORTFORWARD_PROTOCOL)
    pending = _read_head(sock)
    sock.sendall(masked_frame(b"\x00" + request))
    walk = FrameCounter(keep=1)
    _count_until_close(sock, walk, pending, bufsize)
    error = bytes(walk.kept[2:]).decode(errors="replace")
    return RawResult(max(0, walk.counts[0] - 2), 0, None, frames=walk.frames, stdout=error or None)


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
            *(kubectl(), "--kubeconfig", kubeconfig, "--cache-dir", cache_dir, "-n", namespace),
            *("cp", "-c", "node", src, dst),
        ],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl cp failed: {proc.stderr.decode(errors='replace')[-300:]}")


def stock_portforward(core: client.CoreV1Api, pod: str, namespace: str, port: int) -> socket.socket:
    """A connected socket to ``port`` of ``pod`` through the stock client's
    ``kubernetes.stream.portforward`` (its own WebSocket and relay thread)."""
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port))
    return pf.socket(port)


@contextlib.contextmanager
def kubectl_port_forward(
    kubeconfig: str,
    cache_dir: str,
    namespace: str,
    pod: str,
    port: int,
    local_port: int,
    flags: tuple[str, ...] = (),
) -> Iterator[subprocess.Popen]:
    """``kubectl [FLAGS] port-forward pod/POD LOCAL:PORT`` running until the block ends (its
    output goes to files, ``CACHE_DIR/port-forward-LOCAL/std{out,err}``: it prints a line per
    connection, which a pipe nobody reads would block on)."""
    logs = Path(cache_dir) / f"port-forward-{local_port}"
    logs.mkdir(parents=True, exist_ok=True)
    out, err = logs / "stdout", logs / "stderr"
    argv = [kubectl(), *flags, "--kubeconfig", kubeconfig, "--cache-dir", cache_dir]
    argv += ["-n", namespace]
    argv += ["port-forward", "--address", "127.0.0.1", f"pod/{pod}", f"{local_port}:{port}"]
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while b"Forwarding from" not in out.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"kubectl port-forward did not start: {err.read_text(errors='replace')[-300:]}"
                )
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
