"""A local TCP port forwarded to a port of one of a session's pods (``session.forward()``).

Like ``kubectl port-forward``, each accepted connection gets its own stream. The forward listens,
probes and reports; a :class:`~.dialers.Dialer` carries the connections and is the only part
that knows the transport (``dialers.py``: the SPDY tunnel, one v4 WebSocket per connection,
and the fallback dialer that takes the one the server picked at start). The pod is looked up per
connection (per tunnel), so after the trainer pod is replaced new connections reach the new one.
A connection the pod refuses (nothing listens) is reset and reported, and the forward keeps
accepting.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InvalidInputError, PodNotRunningError
from ..exec.client import ExecClient
from ..exec.handshake import ExecSocket
from ..exec.liveness import SILENT_AFTER
from .dialers import V4, Dialer, FallbackDialer, TunnelDialer, Way, WebSocketDialer
from .spdy_tunnel import SUBPROTOCOL
from .tunnel import portforward_url

log = logging.getLogger(__name__)

TUNNEL, WEBSOCKET = TunnelDialer.name, WebSocketDialer.name  # Forward.mode
SUBPROTOCOL_OF = {TUNNEL: SUBPROTOCOL, WEBSOCKET: V4}  # Forward.protocol
AUTO = "auto"  # Forward(via=...): the server picks; WEBSOCKET: one v4 WebSocket per connection
VIAS = (AUTO, WEBSOCKET)

RESOURCE = "pods/portforward"

PROBE_WAIT = 3.0  # seconds the first probe listens for "nothing listens on the port"

MAX_ERRORS = 20  # distinct problems kept in ``Forward.errors``

OnProblem = Callable[[str], None]
DialerFor = Callable[[Way], Dialer]  # a forward's dialer, made from what the forward gives it


def dialer_for(via: str) -> DialerFor:
    """``auto``: the tunnel when the server serves it, else one WebSocket per connection."""
    if via == WEBSOCKET:
        return WebSocketDialer
    return lambda way: FallbackDialer(TunnelDialer, WebSocketDialer, way)


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
        dialer: DialerFor | None = None,
    ) -> None:
        """``dialer`` (tests: a stand-in) replaces the one ``via`` names."""
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
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self._last_pod = ""
        # (tests give a stand-in dialer and no client)
        silent_after = getattr(client, "silent_after", SILENT_AFTER)
        way = Way(port, self._open, pod.current, self._spawn, self._report, silent_after)
        self._dialer = (dialer or dialer_for(via))(way)
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
    def mode(self) -> str:
        """How connections go (TUNNEL or WEBSOCKET), once started: the dialer's name."""
        return self._dialer.name

    @property
    def protocol(self) -> str:
        """The WebSocket subprotocol its connections go over ("" before start)."""
        return SUBPROTOCOL_OF.get(self.mode, "")

    @property
    def active(self) -> int:
        """Connections being relayed now (the start's probe is none of them)."""
        return self._dialer.active

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
            self._dialer.start()
        except BaseException:
            self._shut_listener()
            raise
        self._spawn(self._probe)
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

    def _open(self, protocols: list[str]) -> tuple[ExecSocket, str]:
        """A WebSocket to the pod's port: the current pod, or its replacement if it refused."""
        pod = self._pod.current()
        try:
            sock = self._upgrade(pod, protocols)
        except PodNotRunningError:
            pod = self._pod.replacement(pod)
            sock = self._upgrade(pod, protocols)
        self._last_pod = pod
        return sock, pod

    # -- the probe ---------------------------------------------------------------------------
    def _probe(self) -> None:
        """The first stream, on a socket pair of our own: the pod says at once when nothing
        listens."""
        mine, theirs = socket.socketpair()
        ended = threading.Event()
        said: list[tuple[str, str]] = []

        def on_end(error: str, pod: str) -> None:
            said.append((error, pod))
            ended.set()

        cut = self._dialer.probe(theirs, on_end)
        try:
            if cut is not None and not ended.wait(PROBE_WAIT):
                cut()
                ended.wait(PROBE_WAIT)
        finally:
            mine.close()
        if said and said[0][0]:
            self._said(*said[0], probe=True)

    def _said(self, error: str, pod: str, *, probe: bool = False) -> None:
        if probe and "refused" in error.lower():
            self._report(
                f"nothing listens on port {self.port} of pod {pod} yet; the forward is ready "
                "and connections work once something does"
            )
        elif error:
            self._report(explain(error, self.port, pod))

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
                    self._dialer.dial(conn, self._said)
        finally:
            sel.close()

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
            threads = [t for t in self._threads if t is not threading.current_thread()]
        deadline = time.monotonic() + timeout
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._accepting is not None and self._accepting is not threading.current_thread():
            self._accepting.join(timeout)
        self._shut_listener()
        self._dialer.stop()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for callback in self._on_close:
            try:
                callback(self)
            except Exception:
                log.exception("port forward %s: a close callback failed", self.port)


__all__ = ["Forward", "PodChoice", "explain"]
