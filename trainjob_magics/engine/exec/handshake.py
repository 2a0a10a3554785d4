"""The WebSocket opening handshake of one exec, reading the response in whole chunks.

websocket-client opens the socket (TCP, proxy tunnel, TLS); the upgrade request and the 101
response are ours: websocket-client reads the response one byte per ``recv`` (about 200
``SSL_read`` calls per exec, each a GIL release and retake, which dominated a fan-out to
hundreds of pods). Bytes that arrive after the response head (the first frames) are handed to
the frame reader. A refused upgrade raises websocket-client's
``WebSocketBadStatusException`` (status, headers, body), as before.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import websocket
from websocket._http import _get_addrinfo_list, _open_socket, _tunnel, proxy_info
from websocket._http import connect as open_socket  # TCP, proxy tunnel and TLS
from websocket._socket import sock_opt
from websocket._url import parse_url

from .biotls import BioSocket

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_HEAD = 64 * 1024  # a response head larger than this is not an API server's


@dataclass
class ExecSocket:
    """An upgraded exec connection: the socket, the negotiated subprotocol, and the bytes
    already read past the response head."""

    sock: socket.socket
    subprotocol: str | None
    leftover: bytes

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def request_bytes(url: str, headers: Sequence[str], protocols: Sequence[str], key: str) -> bytes:
    parts = urlsplit(url)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    default = 443 if parts.scheme == "wss" else 80
    if parts.port and parts.port != default:
        host = f"{host}:{parts.port}"
    lines = [
        f"GET {resource} HTTP/1.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Host: {host}",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        f"Sec-WebSocket-Protocol: {','.join(protocols)}",
        *headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(16384)
        if not chunk:
            raise websocket.WebSocketConnectionClosedException(
                "the connection closed during the WebSocket upgrade"
            )
        buf += chunk
        if len(buf) > MAX_HEAD:
            raise websocket.WebSocketException("the upgrade response head is too large")
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    status_line, *lines = head.decode("latin-1").split("\r\n")
    fields = status_line.split(" ", 2)
    if len(fields) < 2 or not fields[1].isdigit():
        raise websocket.WebSocketException(f"bad upgrade response: {status_line[:100]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(fields[1]), fields[2] if len(fields) > 2 else "", headers


def _body(sock: socket.socket, rest: bytes, headers: dict[str, str]) -> bytes | None:
    try:
        length = int(headers.get("content-length", ""))
    except ValueError:
        return rest or None
    body = rest
    while len(body) < min(length, MAX_HEAD):
        chunk = sock.recv(16384)
        if not chunk:
            break
        body += chunk
    return body[:length]


def new_key() -> str:
    """A fresh ``Sec-WebSocket-Key``."""
    return base64.b64encode(os.urandom(16)).decode()


def accepted(resp: dict[str, str], key: str, protocols: Sequence[str]) -> str | None:
    """The subprotocol of a valid 101 response to ``key`` (``WebSocketException`` if invalid)."""
    accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
    if resp.get("upgrade", "").lower() != "websocket" or resp.get("sec-websocket-accept") != accept:
        raise websocket.WebSocketException("Invalid WebSocket Header")
    chosen = resp.get("sec-websocket-protocol") or None
    if chosen is not None and chosen not in protocols:
        raise websocket.WebSocketException(f"the server chose subprotocol {chosen!r}")
    return chosen


def _open_bio(url: str, options: Any, info: Any, sslopt: dict[str, Any]) -> BioSocket:
    """TCP (through an HTTP proxy's CONNECT if one is set), then TLS over memory BIOs, as
    websocket-client's ``connect`` does with an ``SSLSocket``."""
    hostname, port, _resource, is_secure = parse_url(url)
    addrinfo, need_tunnel, auth = _get_addrinfo_list(hostname, port, is_secure, info)
    if not addrinfo:
        raise websocket.WebSocketException(f"Host not found.: {hostname}:{port}")
    raw = _open_socket(addrinfo, options.sockopt, options.timeout)
    try:
        if need_tunnel:
            raw = _tunnel(raw, hostname, port, auth)
        sock = BioSocket(raw, sslopt["context"], sslopt.get("server_hostname") or hostname)
        sock.handshake()
        return sock
    except BaseException:
        with contextlib.suppress(OSError):
            raw.close()
        raise


def connect(
    url: str,
    *,
    headers: Sequence[str],
    protocols: Sequence[str],
    sslopt: dict[str, Any],
    timeout: float,
    proxy: dict[str, Any] | None = None,
    bio: bool = False,
) -> ExecSocket:
    """Open ``url`` (``ws://`` or ``wss://``) and upgrade it, offering ``protocols``. With
    ``bio`` and a ``wss://`` URL with ``sslopt["context"]``, TLS runs over memory BIOs
    (:class:`~.biotls.BioSocket`: many records per system call, for bulk streams)."""
    options = sock_opt(None, sslopt)
    options.timeout = timeout
    info = proxy_info(**(proxy or {}))
    socks = bool(info.proxy_host) and info.proxy_protocol != "http"
    if bio and url.startswith("wss://") and sslopt.get("context") is not None and not socks:
        sock: Any = _open_bio(url, options, info, sslopt)
    else:
        sock, _addrs = open_socket(url, options, info, None)
    try:
        key = new_key()
        sock.sendall(request_bytes(url, headers, protocols, key))
        head, rest = _read_head(sock)
        status, reason, resp = parse_head(head)
        if status != 101:
            body = _body(sock, rest, resp)
            raise websocket.WebSocketBadStatusException(
                f"Handshake status {status} {reason}", status, reason, resp, body
            )
        return ExecSocket(sock, accepted(resp, key, protocols), rest)
    except BaseException:
        with contextlib.suppress(OSError):
            sock.close()
        raise


__all__ = ["ExecSocket", "accepted", "connect", "new_key", "parse_head", "request_bytes"]
