"""The ways a forward carries a local connection to the pod's port, behind one interface.

After client-go's port-forwarder, which takes a dialer and does not know the transport: a
:class:`Dialer` opens its first pods/portforward WebSocket at ``start()`` (the one-line errors:
permission, pod not running), ``probe()`` carries the forward's first stream on it, and
``dial()`` each local connection. Two transports:

- :class:`TunnelDialer` (kube-apiserver 1.30+ with PortForwardWebsockets): one WebSocket
  carrying SPDY, every connection a stream pair in it (``spdy_tunnel.py``), opened again when it
  drops or its pod was replaced; a connection the pod had not answered moves to the next one.
- :class:`WebSocketDialer` (older servers, or the gate off): each connection its own
  ``v4.channel.k8s.io`` WebSocket and thread (``tunnel.py``).

:class:`FallbackDialer` offers both subprotocols in its one upgrade and takes the one the server
picked: the first when the server serves it, else the second. The first's later upgrades offer
both again: a server that stopped serving the tunnel (restarted with its gates off; a replaced
pod on a node that does not serve it) answers with the second's, and that connection and every
later one go over the second (a refused tunnel-only upgrade is a bare 403 from the node's stream
server, which read as a missing permission).
"""

from __future__ import annotations

import dataclasses
import functools
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..errors import TrainJobError
from ..exec.handshake import ExecSocket
from ..exec.liveness import SILENT_AFTER
from .spdy_tunnel import SUBPROTOCOL, Connection, SpdyTunnel
from .tunnel import Tunnel, reset

V4 = "v4.channel.k8s.io"  # the kubelet's WebSocket port-forward protocol

OnEnd = Callable[[str, str], None]  # (what the pod's side said or "", the pod): a stream ended
Cut = Callable[[], None]  # ends one stream now (its client sees it end)
# a connection whose upgrade failed with this error, and the bytes it sent into a tunnel that
# dropped: True when another dialer took it (else it is reset and the problem reported)
Handoff = Callable[[socket.socket, OnEnd, bytes, Exception], bool]


@dataclass
class Way:
    """What a dialer gets from its forward: the upgrade, the pod, threads, the problems."""

    port: int
    open: Callable[[list[str]], tuple[ExecSocket, str]]  # a WebSocket offering these, its pod
    current_pod: Callable[[], str]
    spawn: Callable[..., threading.Thread]  # a thread the forward joins when it closes
    report: Callable[[str], None]  # a problem, in one line (said once)
    silent_after: float = SILENT_AFTER  # no byte (pongs included) this long: the stream is dead
    handoff: Handoff | None = None  # who takes a connection this dialer could not carry


class Dialer(Protocol):
    """Carries a forward's local connections to the pod's port."""

    protocols: list[str]  # the WebSocket subprotocols its upgrade offers

    @property
    def name(self) -> str:
        """Forward.mode: "tunnel" or "websocket" ("" before start)."""
        ...

    def start(self) -> str:
        """Open the first WebSocket (raises the usual one-line errors); its pod."""
        ...

    def take(self, ws: ExecSocket, pod: str) -> None:
        """Use ``ws``, an upgrade to ``pod`` already made, as the first WebSocket."""
        ...

    def dial(self, local: socket.socket, on_end: OnEnd) -> None:
        """Carry ``local`` to the pod's port, without blocking; ``on_end`` once it ended. One
        that cannot be carried is reset and its problem reported (``on_end`` is not called)."""
        ...

    def probe(self, local: socket.socket, on_end: OnEnd) -> Cut | None:
        """Carry ``local`` on the first WebSocket, counted in no ``active``; its cut, or None
        when it could not be carried."""
        ...

    @property
    def active(self) -> int:
        """Connections being carried now (the probe is none of them)."""
        ...

    def stop(self) -> None:
        """Carry nothing more, and end every connection now."""
        ...


def _problem(exc: Exception) -> str:
    """Each one a one-line TrainJobError, unless something broke."""
    return str(exc) if isinstance(exc, TrainJobError) else f"{type(exc).__name__}: {exc}"


class WebSocketDialer:
    """Each connection its own ``v4.channel.k8s.io`` WebSocket, relayed in its own thread."""

    name = "websocket"
    protocols = [V4]

    def __init__(self, way: Way) -> None:
        self.way = way
        self._lock = threading.Lock()
        self._tunnels: set[Tunnel] = set()
        self._probing: Tunnel | None = None
        self._first: tuple[ExecSocket, str] | None = None  # the start's, for the probe
        self._stopped = False

    def start(self) -> str:
        ws, pod = self.way.open(self.protocols)
        self.take(ws, pod)
        return pod

    def take(self, ws: ExecSocket, pod: str) -> None:
        self._first = (ws, pod)

    @property
    def active(self) -> int:
        with self._lock:
            return sum(1 for t in self._tunnels if t is not self._probing)

    def dial(self, local: socket.socket, on_end: OnEnd) -> None:
        self.way.spawn(self._open_and_relay, local, on_end)

    def probe(self, local: socket.socket, on_end: OnEnd) -> Cut | None:
        first, self._first = self._first, None
        if first is None:
            return None
        tunnel = self._add(Tunnel(local, first[0], self.way.silent_after), probe=True)
        self.way.spawn(self._relay, tunnel, first[1], on_end)
        return tunnel.stop

    def carry(
        self, local: socket.socket, ws: ExecSocket, pod: str, on_end: OnEnd, sent: bytes = b""
    ) -> None:
        """Carry ``local`` on ``ws``, an upgrade to ``pod`` already made, sending ``sent``
        (what it sent into a tunnel that dropped) first."""
        tunnel = self._add(Tunnel(local, ws, self.way.silent_after, first=sent))
        self.way.spawn(self._relay, tunnel, pod, on_end)

    def _open_and_relay(self, local: socket.socket, on_end: OnEnd) -> None:
        try:
            ws, pod = self.way.open(self.protocols)
        except Exception as exc:
            self.way.report(_problem(exc))
            reset(local)
            return
        self._relay(self._add(Tunnel(local, ws, self.way.silent_after)), pod, on_end)

    def _add(self, tunnel: Tunnel, probe: bool = False) -> Tunnel:
        with self._lock:
            if self._stopped:
                tunnel.stop()
            self._tunnels.add(tunnel)
            if probe:
                self._probing = tunnel
        return tunnel

    def _relay(self, tunnel: Tunnel, pod: str, on_end: OnEnd) -> None:
        try:
            tunnel.run()
        finally:
            with self._lock:
                self._tunnels.discard(tunnel)
        on_end(tunnel.error, pod)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            tunnels = list(self._tunnels)
        for tunnel in tunnels:
            tunnel.stop()


class TunnelDialer:
    """Every connection a stream pair in one SPDY-carrying WebSocket to the current pod."""

    name = "tunnel"
    protocols = [SUBPROTOCOL]

    def __init__(self, way: Way) -> None:
        self.way = way
        self._lock = threading.Lock()
        self._tunnel_lock = threading.Lock()  # one opening of the shared tunnel at a time
        self._tunnels: set[SpdyTunnel] = set()
        self._current: SpdyTunnel | None = None  # the tunnel new connections go into
        self._conns = 0  # connections carried by tunnels now (not the probe)
        self._stopped = False

    def start(self) -> str:
        ws, pod = self.way.open(self.protocols)
        self.take(ws, pod)
        return pod

    def take(self, ws: ExecSocket, pod: str) -> None:
        self._current = self._start_tunnel(ws, pod)

    @property
    def active(self) -> int:
        with self._lock:
            return self._conns

    def dial(self, local: socket.socket, on_end: OnEnd) -> None:
        if not self._into_open_tunnel(local, on_end):
            self.way.spawn(self._into_a_tunnel, local, on_end)

    def probe(self, local: socket.socket, on_end: OnEnd) -> Cut | None:
        """The first tunnel's first stream pair: never moved, not counted."""
        tunnel = self._current
        if tunnel is None:
            return None
        conn = tunnel.add(local, _Ended(None, tunnel, on_end), retried=True)
        return None if conn is None else functools.partial(tunnel.cut, conn)

    def _start_tunnel(self, ws: ExecSocket, pod: str) -> SpdyTunnel:
        tunnel = SpdyTunnel(
            ws, pod, self.way.port, on_retry=self._move, silent_after=self.way.silent_after
        )
        with self._lock:  # checked and added at once: stop() stops every tunnel it sees
            if self._stopped:
                ws.shutdown()
                raise TrainJobError("the forward is closed")
            self._tunnels.add(tunnel)
        self.way.spawn(self._run_tunnel, tunnel)
        return tunnel

    def _run_tunnel(self, tunnel: SpdyTunnel) -> None:
        try:
            tunnel.run()
        finally:
            with self._lock:
                self._tunnels.discard(tunnel)

    def _tunnel(self) -> SpdyTunnel:
        """The open tunnel to the current pod, opened (again) if it dropped or retired."""
        with self._tunnel_lock:
            tunnel = self._current
            if tunnel is not None and tunnel.alive and tunnel.pod == self.way.current_pod():
                return tunnel
            if tunnel is not None:
                tunnel.retire()
            ws, pod = self.way.open(self.protocols)
            self._current = self._start_tunnel(ws, pod)
            return self._current

    def _into_open_tunnel(self, local: socket.socket, on_end: OnEnd) -> bool:
        """The common case, without a thread: the tunnel to the current pod is open."""
        tunnel = self._current
        if tunnel is None or not tunnel.alive or tunnel.pod != self.way.current_pod():
            return False
        return self._add(tunnel, local, on_end)

    def _add(
        self,
        tunnel: SpdyTunnel,
        local: socket.socket,
        on_end: OnEnd,
        first: bytes = b"",
        moved: bool = False,
    ) -> bool:
        with self._lock:
            self._conns += 1
        ended = _Ended(self, tunnel, on_end)
        if tunnel.add(local, ended, first=first, retried=moved) is not None:
            return True
        with self._lock:
            self._conns -= 1
        return False

    def _into_a_tunnel(
        self, local: socket.socket, on_end: OnEnd, first: bytes = b"", moved: bool = False
    ) -> None:
        """Hand ``local`` to the tunnel (opening one if needed): a new stream pair."""
        for _attempt in range(2):  # a tunnel that dropped just now: once more on a new one
            try:
                tunnel = self._tunnel()
            except Exception as exc:
                if self.way.handoff is not None and self.way.handoff(local, on_end, first, exc):
                    return
                self.way.report(_problem(exc))
                reset(local)
                return
            if self._add(tunnel, local, on_end, first, moved):
                return
        reset(local)

    def _move(self, conn: Connection) -> bool:
        """A tunnel dropped before the pod answered ``conn``: carry it on the next tunnel
        (which finds a replaced pod), sending again what it sent."""
        with self._lock:
            if self._stopped:
                return False
            self._conns -= 1
        on_end = conn.on_end.on_end if isinstance(conn.on_end, _Ended) else _ignore
        first = bytes(conn.replay or b"")
        self.way.spawn(self._into_a_tunnel, conn.sock, on_end, first, True)
        return True

    def ended(self) -> None:
        """One of its connections ended."""
        with self._lock:
            self._conns -= 1

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            tunnels = list(self._tunnels)
        for tunnel in tunnels:
            tunnel.stop()


@dataclass
class _Ended:
    """A stream pair's end, told to its dial's ``on_end`` (kept when it moves on)."""

    dialer: TunnelDialer | None  # None: the probe, neither counted nor moved
    tunnel: SpdyTunnel
    on_end: OnEnd

    def __call__(self, conn: Connection) -> None:
        if self.dialer is not None:
            self.dialer.ended()
        self.on_end(conn.error, self.tunnel.pod)
        if self.dialer is not None and conn.error and "refused" not in conn.error.lower():
            self.tunnel.retire()  # the pod may be gone: the next connection looks again


def _ignore(error: str, pod: str) -> None:
    pass


class ServerFellBack(TrainJobError):
    """A primary's upgrade that the server answered with the secondary's subprotocol."""

    def __init__(self, message: str, ws: ExecSocket, pod: str) -> None:
        super().__init__(message)
        self.ws = ws
        self.pod = pod


class FallbackDialer:
    """``primary`` while the server serves it, else ``secondary``: every upgrade of the
    primary offers both dialers' subprotocols, and the one the server picked chooses
    (client-go's ``FallbackDialer``, with the server's answer as the probe). One the server
    answers with the secondary's later on goes to the secondary, and so does every later
    connection. ``primary`` and ``secondary`` make the dialers from the way they get."""

    def __init__(
        self,
        primary: Callable[[Way], Dialer],
        secondary: Callable[[Way], Dialer],
        way: Way,
    ) -> None:
        self.way = way
        self.secondary = secondary(way)
        self.primary = primary(
            dataclasses.replace(way, open=self._open_primary, handoff=self._handoff)
        )
        self.protocols = [*self.primary.protocols, *self.secondary.protocols]
        self.chosen: Dialer | None = None

    @property
    def name(self) -> str:
        return self.chosen.name if self.chosen is not None else ""

    def start(self) -> str:
        ws, pod = self.way.open(self.protocols)
        self.take(ws, pod)
        return pod

    def take(self, ws: ExecSocket, pod: str) -> None:
        served = ws.subprotocol in self.primary.protocols
        self.chosen = self.primary if served else self.secondary
        self.chosen.take(ws, pod)

    def _open_primary(self, protocols: list[str]) -> tuple[ExecSocket, str]:
        """The primary's upgrade, offering the secondary's subprotocols too."""
        ws, pod = self.way.open([*protocols, *self.secondary.protocols])
        if ws.subprotocol in self.secondary.protocols and ws.subprotocol not in protocols:
            self.chosen = self.secondary
            raise ServerFellBack(
                f"the API server no longer serves {'/'.join(protocols)} for pod {pod} (it "
                f"answered {ws.subprotocol}): the forward goes via {self.secondary.name} "
                "from now on",
                ws,
                pod,
            )
        return ws, pod

    def _handoff(self, local: socket.socket, on_end: OnEnd, sent: bytes, exc: Exception) -> bool:
        """A connection whose upgrade the server answered with the secondary's subprotocol:
        the secondary carries it on that upgrade (said once)."""
        if not isinstance(exc, ServerFellBack):
            return False
        self.way.report(str(exc))
        carry = getattr(self.secondary, "carry", None)
        if carry is None:  # a secondary that cannot take an upgrade made: it dials anew
            exc.ws.shutdown()
            self.secondary.dial(local, on_end)
        else:
            carry(local, exc.ws, exc.pod, on_end, sent)
        return True

    def _picked(self) -> Dialer:
        if self.chosen is None:
            raise TrainJobError("the forward has not started")
        return self.chosen

    def dial(self, local: socket.socket, on_end: OnEnd) -> None:
        self._picked().dial(local, on_end)

    def probe(self, local: socket.socket, on_end: OnEnd) -> Cut | None:
        return self._picked().probe(local, on_end)

    @property
    def active(self) -> int:
        if self.chosen is None:
            return 0
        return self.primary.active + self.secondary.active  # both after a fall back

    def stop(self) -> None:
        if self.chosen is not None:
            self.primary.stop()
            self.secondary.stop()


__all__ = [
    "V4",
    "Cut",
    "Dialer",
    "FallbackDialer",
    "Handoff",
    "OnEnd",
    "ServerFellBack",
    "TunnelDialer",
    "Way",
    "WebSocketDialer",
]
