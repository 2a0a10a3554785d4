"""A local TCP port forwarded to a port of one of a session's pods (``session.forward()``).

Like ``kubectl port-forward``, each accepted connection gets its own stream. The way is chosen
once, at start, by the API server: the first upgrade offers both subprotocols, and the server
picks. ``tunnel`` (kube-apiserver 1.30+ with PortForwardWebsockets): one WebSocket carrying
SPDY, every connection a stream pair in it (``spdy_tunnel.py``), opened again when it drops.
``websocket`` (older servers, or the gate off): each connection its own ``v4.channel.k8s.io``
WebSocket and thread (``tunnel.py``). The pod is looked up per connection (per tunnel), so after
the trainer pod is replaced new connections reach the new one. A connection the pod refuses
(nothing listens) is reset and reported, and the forward keeps accepting.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InvalidInputError, PodNotRunningError, TrainJobError
from ..exec.client import ExecClient
from ..exec.handshake import ExecSocket
from .spdy_tunnel import SUBPROTOCOL, Connection, SpdyTunnel
from .tunnel import Tunnel, portforward_url, reset

log = logging.getLogger(__name__)

V4 = "v4.channel.k8s.io"  # the kubelet's WebSocket port-forward protocol
PROTOCOLS = [V4]
OFFERED = [SUBPROTOCOL, V4]  # at start: the server picks the tunnel if it serves one

TUNNEL, WEBSOCKET = "tunnel", "websocket"  # Forward.mode
AUTO = "auto"  # Forward(via=...): the server picks; WEBSOCKET: one v4 WebSocket per connection
VIAS = (AUTO, WEBSOCKET)

RESOURCE = "pods/portforward"

PROBE_WAIT = 3.0  # seconds the first probe listens for "nothing listens on the port"

MAX_ERRORS = 20  # distinct problems kept in ``Forward.errors``

OnProblem = Callable[[str], None]


@dataclass
class PodChoice:
    """Which pod a forward reaches: ``current()`` now, ``replacement(failed)`` after the
    named pod refused (waits, bounded, for the job's new pod; raises TrainJobError)."""

    current: Callable[[], str]
    replacement: Callable[[str], str]


def _host_for_url(address: str) -> str:
    if address in ("", "0.0.0.0"):
        return "127.0.0.1"
    if address == "::":
        return "[::1]"
    return f"[{address}]" if ":" in address else address


def _listen(address: str, local_port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        return socket.create_server((address, local_port), family=family, backlog=128)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise InvalidInputError(
                f"local port {local_port} is already in use on this host; pick another one "
                "or leave it out to get a free one"
            ) from None
        raise InvalidInputError(
            f"cannot listen on {address}:{local_port} ({exc.strerror or exc}); use an "
            "address of this host, such as 127.0.0.1"
        ) from None


def explain(error: str, port: int, pod: str) -> str:
    """One line for what the pod's side said about a forwarded connection."""
    text = error.strip()
    if "refused" in text.lower():
        return (
            f"nothing accepts connections on port {port} of pod {pod} ({text}); start the "
            "server in the pod: the forward stays up and the next connection tries again"
        )
    return f"a connection to port {port} of pod {pod} failed: {text}"


class Forward:
    """``local_port`` on this host forwarded to ``port`` of a pod; a context manager.

    ``url`` is the link to open; ``close()`` (idempotent) stops listening, so the local port is
    free again, and ends the connections. ``errors`` holds each distinct problem once;
    ``on_error`` is called with each new one (from a background thread).
    """

    def __init__(
        self,
        client: ExecClient,
        namespace: str,
        port: int,
        pod: PodChoice,
        *,
        local_port: int = 0,
        address: str = "127.0.0.1",
        on_error: OnProblem | None = None,
        on_close: Callable[[Forward], None] | None = None,
        via: str = AUTO,
    ) -> None:
        if via not in VIAS:
            raise InvalidInputError(f"via must be one of {', '.join(VIAS)}, not {via!r}")
        self.port = port
        self.via = via
        self.address = address
        self.namespace = namespace
        self.on_error = on_error
        self.errors: list[str] = []
        self.connections = 0  # accepted so far
        self.upgrades = 0  # pods/portforward WebSockets opened so far (the start's included)
        self._client = client
        self._pod = pod
        self._on_close: list[Callable[[Forward], None]] = [on_close] if on_close else []
        self.closed_reason = ""  # why it was closed ("" while open, or when not said)
        self._lock = threading.Lock()
        self._tunnels: set[Tunnel] = set()
        self._probing: Tunnel | None = None  # the start's probe: in _tunnels, no connection
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self._last_pod = ""
        self.mode = ""  # TUNNEL or WEBSOCKET, once started
        self._tunnel_lock = threading.Lock()  # one opening of the shared tunnel at a time
        self._spdy: SpdyTunnel | None = None  # the tunnel new connections go into
        self._spdy_conns = 0  # connections carried by tunnels now (not the probe)
        self._listener = _listen(address, local_port)
        self.local_port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._accepting: threading.Thread | None = None

    # -- what it is -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://HOST:LOCAL_PORT/`` on this host."""
        return f"http://{_host_for_url(self.address)}:{self.local_port}/"

    @property
    def pod(self) -> str:
        """The pod the latest connection went to (the current pod before any)."""
        return self._last_pod or self._pod.current()

    @property
    def active(self) -> int:
        """Connections being relayed now (the start's probe is none of them)."""
        with self._lock:
            alone = sum(
                1 for t in self._tunnels if isinstance(t, Tunnel) and t is not self._probing
            )
            return alone + self._spdy_conns

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"url={self.url!r}"
        mode = f", {self.mode}" if self.mode else ""
        return f"Forward(port={self.port}, pod={self._last_pod or '?'!r}{mode}, {state})"

    def __enter__(self) -> Forward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- starting ---------------------------------------------------------------------------
    def start(self) -> Forward:
        """Check the way to the pod once (permission, pod running), then accept connections.
        Raises the usual one-line errors (e.g. a missing ``pods/portforward`` permission)."""
        try:
            ws, pod = self._open(OFFERED if self.via == AUTO else PROTOCOLS)
        except BaseException:
            self._shut_listener()
            raise
        self.mode = TUNNEL if ws.subprotocol == SUBPROTOCOL else WEBSOCKET
        if self.mode == TUNNEL:
            self._spdy = self._start_tunnel(ws, pod)
            self._spawn(self._probe_tunnel, self._spdy, pod)
        else:
            self._spawn(self._probe, ws, pod)
        self._accepting = self._spawn(self._accept_loop)
        return self

    def _spawn(self, target: Callable[..., None], *args: object) -> threading.Thread:
        thread = threading.Thread(
            target=self._run_tracked, args=(target, *args), daemon=True, name="trainjob-forward"
        )
        with self._lock:
            self._threads.add(thread)
        thread.start()
        return thread

    def _run_tracked(self, target: Callable[..., None], *args: object) -> None:
        try:
            target(*args)
        except Exception:  # a bug here must not kill the kernel's other work
            log.exception("port forward %s: unexpected failure", self.port)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _upgrade(self, pod: str, protocols: list[str]) -> ExecSocket:
        url = portforward_url(self._client.configuration.host, self.namespace, pod, self.port)
        with self._lock:
            self.upgrades += 1
        return self._client.upgrade(
            url,
            self.namespace,
            pod,
            protocols=protocols,
            resource=RESOURCE,
            bio=SUBPROTOCOL in protocols,  # the one tunnel: TLS over memory BIOs (bulk reads)
        )

    def _open(self, protocols: list[str] | None = None) -> tuple[ExecSocket, str]:
        """A WebSocket to the pod's port: the current pod, or its replacement if it refused."""
        if protocols is None:
            protocols = [SUBPROTOCOL] if self.mode == TUNNEL else PROTOCOLS
        pod = self._pod.current()
        try:
            sock = self._upgrade(pod, protocols)
        except PodNotRunningError:
            pod = self._pod.replacement(pod)
            sock = self._upgrade(pod, protocols)
        self._last_pod = pod
        return sock, pod

    # -- the one tunnel ---------------------------------------------------------------------
    def _start_tunnel(self, ws: ExecSocket, pod: str) -> SpdyTunnel:
        tunnel = SpdyTunnel(ws, pod, self.port, on_retry=self._move)
        with self._lock:  # checked and added at once: close() stops every tunnel it sees
            if self._closed:
                ws.shutdown()
                raise TrainJobError("the forward is closed")
            self._tunnels.add(tunnel)
        self._spawn(self._run_tunnel, tunnel)
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
            tunnel = self._spdy
            if tunnel is not None and tunnel.alive and tunnel.pod == self._pod.current():
                return tunnel
            if tunnel is not None:
                tunnel.retire()
            ws, pod = self._open()
            self._spdy = self._start_tunnel(ws, pod)
            return self._spdy

    def _probe_tunnel(self, tunnel: SpdyTunnel, pod: str) -> None:
        """The tunnel's first stream pair, on a socket pair of our own: the pod says at once
        when nothing listens."""
        mine, theirs = socket.socketpair()
        ended = threading.Event()
        conn = tunnel.add(theirs, lambda _conn: ended.set(), retried=True)  # never moved
        try:
            if conn is not None and not ended.wait(PROBE_WAIT):
                tunnel.cut(conn)
                ended.wait(PROBE_WAIT)
        finally:
            mine.close()
        if conn is not None and conn.error:
            self._said(conn.error, pod, probe=True)

    def _said(self, error: str, pod: str, *, probe: bool = False) -> None:
        if probe and "refused" in error.lower():
            self._report(
                f"nothing listens on port {self.port} of pod {pod} yet; the forward is ready "
                "and connections work once something does"
            )
        else:
            self._report(explain(error, self.port, pod))

    def _probe(self, ws: ExecSocket, pod: str) -> None:
        """Listen briefly on the first stream: the pod says at once when nothing listens."""
        mine, theirs = socket.socketpair()
        tunnel = Tunnel(theirs, ws)
        with self._lock:
            self._tunnels.add(tunnel)
            self._probing = tunnel
        timer = threading.Timer(PROBE_WAIT, tunnel.stop)
        timer.daemon = True
        timer.start()
        try:
            tunnel.run()
        finally:
            timer.cancel()
            mine.close()
            with self._lock:
                self._tunnels.discard(tunnel)
        if tunnel.error and "refused" in tunnel.error.lower():
            self._report(
                f"nothing listens on port {self.port} of pod {pod} yet; the forward is ready "
                "and connections work once something does"
            )
        elif tunnel.error:
            self._report(explain(tunnel.error, self.port, pod))

    # -- serving ----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._closed:
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r or self._closed:
                        return
                    try:
                        conn, _peer = self._listener.accept()
                    except OSError:
                        continue
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    self.connections += 1
                    if not self._into_open_tunnel(conn):
                        self._spawn(self._serve, conn)
        finally:
            sel.close()

    def _serve(self, conn: socket.socket) -> None:
        if self.mode == TUNNEL:
            self._serve_in_tunnel(conn)
            return
        try:
            ws, pod = self._open()
        except Exception as exc:  # each one a one-line TrainJobError, unless something broke
            text = str(exc) if isinstance(exc, TrainJobError) else f"{type(exc).__name__}: {exc}"
            self._report(text)
            reset(conn)
            return
        tunnel = Tunnel(conn, ws)
        with self._lock:
            if self._closed:
                tunnel.stop()
            self._tunnels.add(tunnel)
        try:
            tunnel.run()
        finally:
            with self._lock:
                self._tunnels.discard(tunnel)
        if tunnel.error:
            self._report(explain(tunnel.error, self.port, pod))

    def _move(self, conn: Connection) -> bool:
        """A tunnel dropped before the pod answered ``conn``: carry it on the next tunnel
        (which finds a replaced pod), sending again what it sent."""
        with self._lock:
            if self._closed:
                return False
            self._spdy_conns -= 1
        first = bytes(conn.replay or b"")
        self._spawn(self._serve_in_tunnel, conn.sock, first, True)
        return True

    def _into_open_tunnel(self, conn: socket.socket) -> bool:
        """The common case, without a thread: the tunnel to the current pod is open."""
        tunnel = self._spdy
        if self.mode != TUNNEL or tunnel is None or not tunnel.alive:
            return False
        if tunnel.pod != self._pod.current():
            return False
        with self._lock:
            self._spdy_conns += 1
        if tunnel.add(conn, functools.partial(self._tunnel_conn_ended, tunnel)) is not None:
            return True
        with self._lock:
            self._spdy_conns -= 1
        return False

    def _serve_in_tunnel(
        self, conn: socket.socket, first: bytes = b"", moved: bool = False
    ) -> None:
        """Hand ``conn`` to the tunnel (opening one if needed): a new stream pair."""
        for _attempt in range(2):  # a tunnel that dropped just now: once more on a new one
            try:
                tunnel = self._tunnel()
            except Exception as exc:  # each one a one-line TrainJobError, unless something broke
                text = (
                    str(exc) if isinstance(exc, TrainJobError) else f"{type(exc).__name__}: {exc}"
                )
                self._report(text)
                reset(conn)
                return
            with self._lock:
                self._spdy_conns += 1
            ended = functools.partial(self._tunnel_conn_ended, tunnel)
            if tunnel.add(conn, ended, first=first, retried=moved) is not None:
                return
            with self._lock:
                self._spdy_conns -= 1
        reset(conn)

    def _tunnel_conn_ended(self, tunnel: SpdyTunnel, conn: Connection) -> None:
        with self._lock:
            self._spdy_conns -= 1
        if conn.error:
            self._said(conn.error, tunnel.pod)
            if "refused" not in conn.error.lower():
                tunnel.retire()  # the pod may be gone: the next connection looks again

    def _report(self, message: str) -> None:
        with self._lock:
            if message in self.errors or self._closed:
                return
            if len(self.errors) >= MAX_ERRORS:
                return
            self.errors.append(message)
        if self.on_error is None:  # else the callback shows it: said once, not twice
            log.warning("port forward %s: %s", self.port, message)
        else:
            try:
                self.on_error(message)
            except Exception:
                log.exception("port forward %s: the error callback failed", self.port)

    # -- closing ----------------------------------------------------------------------------
    def _shut_listener(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()

    def when_closed(self, callback: Callable[[Forward], None]) -> None:
        """Call ``callback(forward)`` once it is closed (at once if it already is)."""
        with self._lock:
            if not self._closed:
                self._on_close.append(callback)
                return
        callback(self)

    def close(self, timeout: float = 5.0, *, reason: str = "") -> None:
        """Stop listening (the local port is free at return) and end every connection;
        ``reason`` (e.g. "session closed") is kept in ``closed_reason``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.closed_reason = reason
            tunnels = list(self._tunnels)
            threads = [t for t in self._threads if t is not threading.current_thread()]
        deadline = time.monotonic() + timeout
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._accepting is not None and self._accepting is not threading.current_thread():
            self._accepting.join(timeout)
        self._shut_listener()
        for tunnel in tunnels:
            tunnel.stop()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for callback in self._on_close:
            try:
                callback(self)
            except Exception:
                log.exception("port forward %s: a close callback failed", self.port)


__all__ = ["Forward", "PodChoice", "explain"]
