"""A small HTTP CONNECT proxy (threads) that counts the tunnels it served.

Only ``CONNECT host:port`` is served, as an HTTPS proxy does for TLS traffic; anything else gets
405. ``tunnels`` lists the ``host:port`` of every tunnel opened, so a test can prove that its
traffic went through the proxy.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class ConnectProxy:
    """Listens on 127.0.0.1; use as a context manager."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)  # accept() wakes up to see stop()
        self.port = self._server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.tunnels: list[str] = []
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="connect-proxy")

    def __enter__(self) -> ConnectProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def count(self) -> int:
        with self._lock:
            return len(self.tunnels)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _addr = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _track(self, *socks: socket.socket) -> None:
        with self._lock:
            self._open.update(socks)

    def _serve(self, client: socket.socket) -> None:
        self._track(client)
        upstream: socket.socket | None = None
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            request, _, rest = head.partition(b"\r\n\r\n")
            method, target, _version = request.split(b"\r\n")[0].decode().split(" ", 2)
            if method != "CONNECT":
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host, int(port)), timeout=10)
            upstream.settimeout(None)
            self._track(upstream)
            with self._lock:
                self.tunnels.append(target)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
            self._pipe(client, upstream)
        except (OSError, ValueError):
            return
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
                    with self._lock:
                        self._open.discard(sock)

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        """Copy bytes both ways until one side closes."""
        peers = {a: b, b: a}
        while not self._stopped.is_set():
            readable, _, _ = select.select(list(peers), [], [], 1.0)
            for sock in readable:
                data = sock.recv(65536)
                if not data:
                    return
                peers[sock].sendall(data)
