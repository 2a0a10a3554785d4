"""Local ports and HTTP fetches for the port-forward tests."""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request
from typing import Any

from tests.helpers.polling import wait_until

FETCH_FAILED = (ConnectionError, urllib.error.URLError, http.client.HTTPException)


def free_port() -> int:
    """A TCP port nobody listens on now (on 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Nothing listens on ``port`` and a server may listen there again (as servers do, with
    SO_REUSEADDR: connections the forward ended may sit in TIME_WAIT)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        pass
    else:
        return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def fetch(url: str, timeout: float = 30) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


def serving(url: str) -> bool:
    """Whether ``url`` answers."""
    try:
        fetch(url, timeout=5)
    except FETCH_FAILED:
        return False
    return True


def serve_http(session: Any, port: int, pod: str | None = None, wait: float = 0.0) -> None:
    """``python3 -m http.server PORT`` in a pod's working directory, in the background (the
    session's trainer pod, or ``pod``); with ``wait``, for up to that many seconds until it
    accepts connections (checked in the pod)."""
    res = session.execute(
        f"nohup python3 -m http.server {port} --bind 127.0.0.1 > http.log 2>&1 < /dev/null &",
        pods=pod,
    )
    assert res.ok, res.stderr
    if wait:
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2).close()"
        wait_until(lambda: session.execute(["python3", "-c", probe], pods=pod).ok, timeout=wait)
