"""Forward knows its transport only through the Dialer interface (engine/forward/dialers.py).

A stand-in dialer carries each connection over plain TCP to a local server standing in for the
pod's port: the forward listens, probes, counts and reports through it alone. The fallback
dialer offers both dialers' subprotocols in one upgrade and takes the one the server picked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.helpers.polling import wait_until
from tests.helpers.ports import port_is_free
from trainjob_magics.engine.forward.dialers import FallbackDialer, OnEnd, Way
from trainjob_magics.engine.forward.forward import Forward, PodChoice

pytestmark = pytest.mark.timeout(60)

POD = "pod-a"


class StandInDialer:
    """A stand-in transport: each connection relayed over TCP to ``target`` on this host."""

    def __init__(self, way: Way, target: int, name: str = "stand-in") -> None:
        self.way = way
        self.target = target
        self.name = name
        self.protocols = [name]
        self.taken: list[tuple[Any, str]] = []  # the upgrades it was handed
        self.dialed = 0
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._active = 0

    def start(self) -> str:
        ws, pod = self.way.open(self.protocols)
        self.take(ws, pod)
        return pod

    def take(self, ws: Any, pod: str) -> None:
        self.taken.append((ws, pod))

    @property
    def active(self) -> int:
        with self._lock:
            return self._active

    def dial(self, local: socket.socket, on_end: OnEnd) -> None:
        self.dialed += 1
        self.way.spawn(self._relay, local, on_end, True)

    def probe(self, local: socket.socket, on_end: OnEnd) -> Any:
        self.way.spawn(self._relay, local, on_end, False)
        return lambda: _shut(local)

    def _relay(self, local: socket.socket, on_end: OnEnd, counted: bool) -> None:
        with self._lock:
            self._active += counted
            self._socks.add(local)
        try:
            try:
                remote = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except ConnectionRefusedError:
                on_end("connection refused", POD)
                return
            with self._lock:
                self._socks.add(remote)
            pump = threading.Thread(target=_copy, args=(remote, local), daemon=True)
            pump.start()
            _copy(local, remote)
            pump.join()
            remote.close()
            on_end("", POD)
        finally:
            local.close()
            with self._lock:
                self._active -= counted

    def stop(self) -> None:
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _copy(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A TCP server standing in for the pod's: echoes each connection until it ends."""
    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_copy, args=(conn, conn), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    done.set()
    server.close()


def stand_in_upgrade(protocols: list[str]) -> tuple[Any, str]:
    """What the API server answers to an upgrade offering ``protocols``: the first one."""
    return SimpleNamespace(subprotocol=protocols[0], offered=protocols), POD


def forward_with(make: Any) -> Forward:
    pods = PodChoice(current=lambda: POD, replacement=lambda failed: POD)
    # no API server here: the upgrade is a stand-in too
    return Forward(
        None,  # type: ignore[arg-type]
        "ns",
        8080,
        pods,
        dialer=lambda way: make(dataclasses.replace(way, open=stand_in_upgrade)),
    )


def echo(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
        return got


def test_forward_carries_connections_through_a_stand_in_dialer(echo_port: int) -> None:
    dialers: list[StandInDialer] = []

    def make(way: Way) -> StandInDialer:
        dialers.append(StandInDialer(way, echo_port))
        return dialers[-1]

    fwd = forward_with(make).start()
    try:
        assert fwd.mode == "stand-in" and dialers[0].taken[0][1] == POD
        assert [echo(fwd.local_port, b"hello %d" % i) for i in range(3)] == [
            b"hello 0",
            b"hello 1",
            b"hello 2",
        ]
        assert fwd.connections == 3 and dialers[0].dialed == 3  # the probe is none of them
        wait_until(lambda: fwd.active == 0, timeout=10)
        assert fwd.errors == []
    finally:
        fwd.close()
    assert port_is_free(fwd.local_port)


def test_what_the_stand_in_pod_refuses_is_reported_once(echo_port: int) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    nothing = closed.getsockname()[1]
    closed.close()  # nothing listens there
    fwd = forward_with(lambda way: StandInDialer(way, nothing)).start()
    try:
        wait_until(lambda: fwd.errors, timeout=10)  # the probe
        assert fwd.errors == [
            f"nothing listens on port 8080 of pod {POD} yet; the forward is ready and "
            "connections work once something does"
        ]
        for _ in range(2):
            with contextlib.suppress(OSError):  # closed before or after it sent: no answer
                assert echo(fwd.local_port, b"x") == b""
        wait_until(lambda: len(fwd.errors) == 2, timeout=10)
        assert "nothing accepts connections on port 8080 of pod pod-a" in fwd.errors[1]
    finally:
        fwd.close()


def test_the_fallback_dialer_takes_the_second_when_the_server_refuses_the_first(
    echo_port: int,
) -> None:
    made: dict[str, StandInDialer] = {}
    offered: list[list[str]] = []

    def server_without_first(protocols: list[str]) -> tuple[Any, str]:
        offered.append(protocols)
        return SimpleNamespace(subprotocol="second"), POD  # it serves only the second

    def make(way: Way) -> FallbackDialer:
        way.open = server_without_first

        def dialer(name: str) -> Callable[[Way], StandInDialer]:
            return lambda w: made.setdefault(name, StandInDialer(w, echo_port, name))

        return FallbackDialer(dialer("first"), dialer("second"), way)

    fwd = forward_with(make).start()
    try:
        assert offered == [["first", "second"]]  # one upgrade offered both
        assert fwd.mode == "second"
        assert made["first"].taken == [] and made["second"].taken[0][1] == POD
        assert echo(fwd.local_port, b"via the second") == b"via the second"
        assert (made["first"].dialed, made["second"].dialed) == (0, 1)
    finally:
        fwd.close()


def test_the_fallback_dialer_takes_the_first_when_the_server_serves_it(echo_port: int) -> None:
    way = Way(8080, stand_in_upgrade, lambda: POD, threading.Thread, print)
    dialer = FallbackDialer(
        lambda w: StandInDialer(w, echo_port, "first"),
        lambda w: StandInDialer(w, echo_port, "second"),
        way,
    )
    first, second = dialer.primary, dialer.secondary
    assert isinstance(first, StandInDialer) and isinstance(second, StandInDialer)
    assert dialer.name == "" and dialer.active == 0  # nothing picked before the start
    assert dialer.start() == POD
    assert dialer.name == "first" and len(first.taken) == 1 and second.taken == []
    assert first.taken[0][0].offered == ["first", "second"]
