"""BioSocket (TLS over memory BIOs): many records per recv, pending only for whole records,
BlockingIOError when nothing is there, the end of the stream, and writes that the kernel takes
in pieces."""

from __future__ import annotations

import contextlib
import hashlib
import os
import selectors
import socket
import ssl
import threading
from pathlib import Path

import pytest

from trainjob_magics.engine.exec.biotls import BioSocket
from trainjob_magics.localcluster.tls import make_tls

RECORD = 16 * 1024


@pytest.fixture()
def pair(tmp_path: Path):
    """(client BioSocket, server SSLSocket), connected over loopback."""
    tls = make_tls(tmp_path)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    got: list[ssl.SSLSocket] = []

    def accept() -> None:
        conn, _ = listener.accept()
        got.append(tls.server_context().wrap_socket(conn, server_side=True))

    t = threading.Thread(target=accept)
    t.start()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=tls.ca_pem.decode())
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    client = BioSocket(raw, ctx, "127.0.0.1")
    client.handshake()
    t.join(10)
    listener.close()
    server = got[0]
    yield client, server
    client.close()
    server.close()


def test_many_records_per_recv_and_the_end(pair) -> None:
    client, server = pair
    data = os.urandom(4 << 20)

    def serve() -> None:
        for i in range(0, len(data), RECORD):  # one TLS record per send
            server.sendall(data[i : i + RECORD])
        server.close()

    t = threading.Thread(target=serve)
    t.start()
    client.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(client, selectors.EVENT_READ)
    out = bytearray()
    calls = 0
    while True:
        if not client.pending():
            sel.select(5)
        try:
            chunk = client.recv(1 << 18)
        except BlockingIOError:
            continue
        calls += 1
        if not chunk:
            break
        out += chunk
    t.join(10)
    assert hashlib.sha256(out).digest() == hashlib.sha256(data).digest()
    assert calls < len(data) // RECORD  # whole records batched into one recv
    assert client.recv(10) == b""  # the end stays the end


def test_nothing_there_is_blocking_io_and_not_pending(pair) -> None:
    client, server = pair
    client.setblocking(False)
    with pytest.raises(BlockingIOError):
        client.recv(100)
    assert not client.pending()
    server.sendall(b"x" * 1000)
    client.setblocking(True)
    assert client.recv(10) == b"x" * 10
    assert client.pending()  # the rest of the record is decrypted and waiting
    assert client.recv(5000) == b"x" * 990
    assert not client.pending()


def test_large_writes_the_kernel_takes_in_pieces(pair) -> None:
    client, server = pair
    data = os.urandom(8 << 20)
    received = bytearray()

    def drain() -> None:
        while len(received) < len(data):
            chunk = server.recv(1 << 16)
            if not chunk:
                return
            received.extend(chunk)

    client.setblocking(False)
    i = 0
    sel = selectors.DefaultSelector()
    sel.register(client, selectors.EVENT_WRITE)
    t = threading.Thread(target=drain)
    t.start()
    while i < len(data) or client.wants_write:
        sel.select(5)
        if i < len(data):
            with contextlib.suppress(BlockingIOError):
                i += client.send(data[i : i + (1 << 18)])
        else:
            client.flush()
    t.join(20)
    assert bytes(received) == data
