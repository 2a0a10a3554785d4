"""How the port-forward tunnel reads the node's reason for a failed connection when the reason
and the resets come in separate reads.

The node writes why, resets the data stream, then resets the error stream
(cri-streaming portforward/httpstream.go). A CI run on the real stack had the data stream's
reset in one read and the error stream's in the next: the connection to a deleted pod was
ended with "network namespace ... is closed" instead of moving to the pod in its place. Here a
socket pair plays the API server, so the reads are split on purpose.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.helpers.polling import wait_until
from trainjob_magics.engine.exec.handshake import ExecSocket
from trainjob_magics.engine.forward import spdy_frames as F
from trainjob_magics.engine.forward.spdy_tunnel import Connection, SpdyTunnel

SANDBOX = "50ab39931bf6676545403cad057eaa395be762e653a20685e0d99746bf56a6b0"
GONE = (
    f"error forwarding port 8000 to pod {SANDBOX}, uid : network namespace for sandbox "
    f'"{SANDBOX}" is closed'
).encode()
REFUSED = (
    f"error forwarding port 8000 to pod {SANDBOX}, uid : failed to execute portforward in "
    'network namespace "/var/run/netns/cni-1": failed to connect to localhost:8000 inside '
    f'namespace "{SANDBOX}", IPv4: dial tcp4 127.0.0.1:8000: connect: connection refused'
).encode()
WAIT = 30.0


class FakeServer:
    """The API server's end of the tunnel's WebSocket: reads the client's masked frames as
    SPDY, writes unmasked binary frames."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(WAIT)
        self.parser = F.FrameParser(F.HeaderCodec())
        self.buf = b""
        self.seen: list[F.Frame] = []

    def send(self, spdy: bytes) -> None:
        head = struct.pack("!BB", 0x82, 126) + struct.pack("!H", len(spdy))
        self.sock.sendall(head + spdy)

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the tunnel closed its WebSocket")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _message(self) -> tuple[int, bytes]:
        b0, b1 = self._read(2)
        length = b1 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._read(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._read(8))
        mask = self._read(4) if b1 & 0x80 else b"\0\0\0\0"
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self._read(length)))
        return b0 & 0x0F, payload

    def until(self, wanted: str, match: object) -> F.Frame:
        """Read the client's frames until one matches ``match(frame)``."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for frame in self.seen:
                if match(frame):  # type: ignore[operator]
                    self.seen.remove(frame)
                    return frame
            opcode, payload = self._message()
            if opcode == 0x2:
                self.seen.extend(self.parser.feed(payload))
        raise AssertionError(f"the tunnel never sent {wanted}")

    def synced(self, ping_id: int) -> None:
        """Our PING answered: the tunnel has read everything sent before it."""
        self.send(F.ping(ping_id))
        self.until("the pong", lambda f: f.kind == F.PING and f.value == ping_id)


@pytest.fixture
def tunnel() -> Iterator[tuple[SpdyTunnel, FakeServer, list[Connection]]]:
    ours, theirs = socket.socketpair()
    moved: list[Connection] = []
    tun = SpdyTunnel(
        ExecSocket(ours, "SPDY/3.1+portforward.k8s.io", b""),
        "trainer-0",
        8000,
        on_retry=lambda conn: moved.append(conn) is None,
    )
    thread = threading.Thread(target=tun.run, daemon=True)
    thread.start()
    try:
        yield tun, FakeServer(theirs), moved
    finally:
        tun.stop()
        thread.join(WAIT)
        theirs.close()


def _connection(
    tun: SpdyTunnel, server: FakeServer, ended: list[str]
) -> tuple[socket.socket, int, int]:
    with socket.create_server(("127.0.0.1", 0)) as listener:  # TCP: a reset is seen as one
        client = socket.create_connection(listener.getsockname(), timeout=WAIT)
        local, _ = listener.accept()
    tun.add(local, lambda conn: ended.append(conn.error))
    client.sendall(b"GET / HTTP/1.0\r\n\r\n")
    error = server.until("the error stream", lambda f: f.kind == F.SYN_STREAM)
    data = server.until("the data stream", lambda f: f.kind == F.SYN_STREAM)
    server.until("the request", lambda f: f.kind == F.DATA_KIND and f.stream_id == data.stream_id)
    return client, error.stream_id, data.stream_id


def test_a_gone_pods_reason_after_the_data_reset_still_moves_the_connection(
    tunnel: tuple[SpdyTunnel, FakeServer, list[Connection]],
) -> None:
    tun, server, moved = tunnel
    ended: list[str] = []
    client, error_sid, data_sid = _connection(tun, server, ended)
    # the data stream's reset alone first: the reason has not come
    server.send(F.rst_stream(data_sid))
    server.synced(2)
    assert not ended and not moved
    server.send(F.data(error_sid, GONE) + F.rst_stream(error_sid))
    wait_until(lambda: moved, timeout=WAIT)
    assert not ended
    assert [bytes(conn.replay or b"") for conn in moved] == [b"GET / HTTP/1.0\r\n\r\n"]
    assert not tun.alive  # retired: the next connection looks for the pod again
    client.close()


def test_a_gone_pods_reason_with_the_data_reset_moves_the_connection(
    tunnel: tuple[SpdyTunnel, FakeServer, list[Connection]],
) -> None:
    """What CI saw: the reason and the data stream's reset in one read (the error stream's
    reset would come in the next); the reason is enough."""
    tun, server, moved = tunnel
    ended: list[str] = []
    client, error_sid, data_sid = _connection(tun, server, ended)
    server.send(F.data(error_sid, GONE) + F.rst_stream(data_sid))
    wait_until(lambda: moved, timeout=WAIT)
    assert not ended
    assert len(moved) == 1
    client.close()


def test_a_refusal_after_the_data_reset_is_said_and_resets_the_client(
    tunnel: tuple[SpdyTunnel, FakeServer, list[Connection]],
) -> None:
    tun, server, moved = tunnel
    ended: list[str] = []
    client, error_sid, data_sid = _connection(tun, server, ended)
    server.send(F.rst_stream(data_sid))
    server.synced(2)
    server.send(F.data(error_sid, REFUSED) + F.rst_stream(error_sid))
    wait_until(lambda: ended, timeout=WAIT)
    assert not moved
    assert ended and "connection refused" in ended[0]
    with pytest.raises(ConnectionResetError):
        while client.recv(1024):
            pass
    client.close()
