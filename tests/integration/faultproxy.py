"""A real TCP proxy in front of the local cluster that can reset connections on demand.

Connection errors (RST, refused) cannot be produced by the API server itself, so tests put this
proxy between the client and the cluster: TLS passes through untouched.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
from pathlib import Path


class FaultProxy:
    """Forward 127.0.0.1:<port> to ``target``; ``reset_next(n)`` resets the next n connections."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._resets = 0
        self.reset_count = 0
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()

    def reset_next(self, n: int) -> None:
        with self._lock:
            self._resets = n

    def drop_established(self) -> None:
        """Reset every open connection (forces the client to reconnect)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            _rst(c)

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        self.drop_established()

    def kubeconfig(self, source: Path, dest: Path) -> Path:
        """Copy a kubeconfig, pointing it at the proxy."""
        text = re.sub(
            r"https://127\.0\.0\.1:\d+", f"https://127.0.0.1:{self.port}", source.read_text()
        )
        dest.write_text(text)
        return dest

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                reset = self._resets > 0
                if reset:
                    self._resets -= 1
                    self.reset_count += 1
            if reset:
                _rst(client)
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                _rst(client)
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _rst(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
