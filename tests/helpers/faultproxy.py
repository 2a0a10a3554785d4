"""A real TCP proxy in front of an API server that can reset connections on demand.

Connection errors (RST, refused) cannot be produced by the API server itself, so tests put this
proxy between the client and the cluster: TLS passes through untouched. ``for_kubeconfig``
serves any cluster (the local one, the real stack, a user's): the copied kubeconfig names the
proxy and keeps the server's own name for TLS (``tls-server-name``).
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
from pathlib import Path
from urllib.parse import urlsplit

import yaml


class FaultProxy:
    """Forward 127.0.0.1:<port> to ``target``; ``reset_next(n)`` resets the next n connections.
    ``bytes_up`` / ``bytes_down`` count what went through it to the server and back."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._resets = 0
        self.reset_count = 0
        self._conns: list[socket.socket] = []
        self._frozen: set[socket.socket] = set()
        self._stop = threading.Event()
        self._moved = [0, 0]  # to the server, to the client
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()

    @property
    def bytes_up(self) -> int:
        return self._moved[0]

    @property
    def bytes_down(self) -> int:
        return self._moved[1]

    def reset_next(self, n: int) -> None:
        with self._lock:
            self._resets = n

    def drop_established(self) -> None:
        """Reset every open connection (forces the client to reconnect)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            _rst(c)

    def freeze_established(self) -> None:
        """Every open connection stops passing bytes, both ways, and is never closed: what a
        dead node or a NAT that dropped the flow looks like to the client. New connections
        pass as before."""
        with self._lock:
            self._frozen.update(self._conns)

    def freeze_when(self, event: threading.Event, timeout: float = 120.0) -> None:
        """In the background: :meth:`freeze_established` once ``event`` is set."""

        def run() -> None:
            event.wait(timeout)
            self.freeze_established()

        threading.Thread(target=run, daemon=True, name="fault-proxy-freeze").start()

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

    @classmethod
    def for_kubeconfig(cls, source: Path, dest: Path) -> FaultProxy:
        """A proxy in front of ``source``'s current cluster; ``dest`` is written as a copy of
        ``source`` that reaches the cluster through it."""
        config = yaml.safe_load(source.read_text())
        context_name = config.get("current-context")
        context = next(c for c in config["contexts"] if c["name"] == context_name)["context"]
        cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
        server = urlsplit(cluster["server"])
        proxy = cls(server.port or 443, server.hostname or "127.0.0.1")
        cluster["server"] = f"https://127.0.0.1:{proxy.port}{server.path}"
        if server.hostname not in ("127.0.0.1", None):
            cluster.setdefault("tls-server-name", server.hostname)
        _absolute_files(config, source.parent)
        dest.write_text(yaml.safe_dump(config))
        return proxy

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
            for way, (a, b) in enumerate(((client, upstream), (upstream, client))):
                threading.Thread(target=self._pipe, args=(a, b, way), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, way: int = 0) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if src in self._frozen:  # swallow it, and everything after, and never close
                    self._stop.wait()
                    return
                dst.sendall(data)
                with self._lock:
                    self._moved[way] += len(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)


FILE_KEYS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")


def _absolute_files(config: dict, base: Path) -> None:
    """Relative file names in a kubeconfig are relative to its own directory: keep them so."""
    for section, key in (("clusters", "cluster"), ("users", "user")):
        for entry in config.get(section) or []:
            body = entry.get(key) or {}
            for name in FILE_KEYS:
                if body.get(name) and not Path(body[name]).is_absolute():
                    body[name] = str(base / body[name])


def _rst(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # A pipe thread blocked in recv() holds the socket: closing it alone sends nothing until
    # that recv returns (a download's client side sends nothing, so it never would). SHUT_RD
    # wakes it without a FIN; the last close then sends the RST at once.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()
