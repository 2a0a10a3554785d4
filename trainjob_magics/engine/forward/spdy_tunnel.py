"""Many local TCP connections over ONE pods/portforward WebSocket carrying SPDY/3.1
(subprotocol ``SPDY/3.1+portforward.k8s.io``, kube-apiserver 1.30+), all in one thread.

As client-go's ``tools/portforward`` does (``tunneling_dialer.go``, ``portforward.go``
``handleConnection``): each connection is a pair of streams with headers ``streamType``
(``error``, then ``data``), ``port`` and ``requestID``; the error stream is half-closed at
once and carries the pod side's complaint (e.g. nothing listens), the data stream the bytes
both ways. Unlike kubectl we do not wait for each SYN_REPLY before the next frame: the server
handles a stream's frames in order, so the first bytes go with the SYN_STREAMs. Every
WebSocket binary message carries SPDY bytes, split anywhere.

Bounds: each connection buffers at most ``HIGH_WATER`` bytes towards its local client (the
WebSocket is not read while one is full, as kubectl's unbuffered streams do: the peers
kubelets run do no flow control); towards the pod at most ``HIGH_WATER`` bytes are queued for
the WebSocket before local reads stop. A dropped WebSocket resets every local connection; the
tunnel is then dead and the forward opens another for the next connection.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..exec.frames import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    ConnectionDropped,
    FrameReader,
    client_frame,
)
from ..exec.handshake import ExecSocket
from . import spdy_frames as F
from .spdy_session import Event, SpdySession
from .tunnel import flush_tls, has_pending, reset, wants_write

log = logging.getLogger(__name__)

SUBPROTOCOL = "SPDY/3.1+portforward.k8s.io"

LOCAL_READ = 1 << 18  # bytes read from a local client at once (one DATA frame)
HIGH_WATER = 4 << 20  # bytes buffered per direction before reading the other side stops
IOV_MAX = 512  # buffers per sendmsg (Linux allows 1024)
READS_PER_WAKE = 16  # WebSocket reads per wake-up while it has data (TLS: 16 KiB records)
IDLE_POLL = 1.0
PING_PERIOD = 10.0  # as kubectl (client-go portforward.PingPeriod)
PONG_WAIT = 30.0  # no pong this long after a ping: the tunnel is dead
MAX_ERROR_TEXT = 4096
# What the node says on a stream's error stream when the pod's sandbox is gone (deleted, being
# replaced) while the tunnel, which the API server keeps open, still names it: containerd v2.2
# internal/cri/server/sandbox_portforward.go and sandbox_portforward_linux.go. The connection
# never reached the pod, so it may go to the pod now in its place. (Nothing listening reads
# `failed to execute portforward in network namespace ...: failed to connect to localhost:P
# inside namespace ...: connection refused`: the pod is there.)
POD_GONE = re.compile(
    r"failed to find sandbox|sandbox container is not running|network namespace for sandbox "
    r".* is closed",
    re.IGNORECASE,
)

# The node writes why a connection failed, then resets the data stream, then the error stream
# (kubelet/cri-streaming portforward/httpstream.go, httpStreamHandler.portForward); the resets
# may come in separate reads. A data stream reset before the error stream ended waits this long
# for the reason, which decides whether the connection may move to the pod in its place.
ERROR_WAIT = 5.0
REPLAY_MAX = 64 * 1024  # bytes kept of an unanswered connection, to send again elsewhere
CLOSE_WAIT = 1.0  # seconds to let our close frame out once stopping


@dataclass(eq=False)
class Connection:
    """One local client's stream pair and the bytes on their way to it."""

    sock: socket.socket
    request_id: int
    on_end: Callable[[Connection], None] | None
    error_sid: int = 0
    data_sid: int = 0
    to_local: deque[memoryview] = field(default_factory=deque)  # views of received frames
    pending: int = 0  # bytes in ``to_local``
    local_eof: bool = False  # the client sent all it will send
    remote_fin: bool = False  # the pod's side sent all it will send
    error_done: bool = False
    error: str = ""  # what the pod's side said on the error stream
    broken: bool = False  # reset, cut, or the tunnel dropped: the client sees a reset
    reset_at: float | None = None  # when the pod's side reset the data stream
    sent: int = 0  # bytes delivered to the local client
    replay: bytearray | None = field(default_factory=bytearray)  # its bytes, while unanswered
    retried: bool = False  # already moved to another tunnel once
    first: bytes = b""  # sent into a tunnel that dropped: goes first on this one
    received: int = 0  # bytes of the client sent on to the pod
    events: int = 0  # what the selector watches now


class SpdyTunnel:
    """One tunnel to ``port`` of ``pod``; :meth:`run` is its thread."""

    def __init__(
        self,
        ws: ExecSocket,
        pod: str,
        port: int,
        on_retry: Callable[[Connection], bool] | None = None,
        silent_after: float = PONG_WAIT,
    ) -> None:
        self.pod = pod
        self._pong_wait = silent_after
        self._ping_period = min(PING_PERIOD, silent_after / 3)
        self.on_retry = on_retry  # takes over an unanswered connection when the tunnel drops
        self.port = port
        self.sock = ws.sock
        self.reader = FrameReader(ws.sock)
        self.reader.buf = bytearray(ws.leftover)
        self.session = SpdySession()
        self.conns: dict[int, Connection] = {}  # by data stream id
        self.by_error: dict[int, Connection] = {}  # by error stream id
        self.alive = True  # takes new connections
        self.dropped = ""  # why the WebSocket went, if it did
        self._lock = threading.Lock()
        self._new: deque[Connection] = deque()
        self._cuts: deque[Connection] = deque()
        self._retired = False
        self._stopped = False
        self._next_request = 0
        self._out: deque[memoryview] = deque()  # WebSocket frames being written
        self._out_bytes = 0
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._ws_closed = False  # the server's close frame came
        self._ping_due = time.monotonic() + self._ping_period
        self._pong_deadline: float | None = None
        self._sel = selectors.DefaultSelector()
        self._unsent: set[Connection] = set()  # got data this wake-up, not sent on yet

    # -- from other threads -----------------------------------------------------------------
    @property
    def active(self) -> int:
        with self._lock:
            return len(self.conns) + len(self._new)

    def add(
        self,
        sock: socket.socket,
        on_end: Callable[[Connection], None] | None = None,
        *,
        first: bytes = b"",
        retried: bool = False,
    ) -> Connection | None:
        """Carry ``sock`` as a new stream pair, sending ``first`` (what it sent into a tunnel
        that dropped) before anything it sends; None when this tunnel takes no more."""
        with self._lock:
            if not self.alive:
                return None
            conn = Connection(sock, self._next_request, on_end, retried=retried, first=first)
            conn.replay = None if retried else bytearray()
            conn.received = len(first)
            self._next_request += 1
            self._new.append(conn)
        self._wake()
        return conn

    def cut(self, conn: Connection) -> None:
        """End one connection now (its client sees a reset)."""
        with self._lock:
            self._cuts.append(conn)
        self._wake()

    def retire(self) -> None:
        """Take no new connections; end once the current ones have."""
        with self._lock:
            self.alive = False
            self._retired = True
        self._wake()

    def stop(self) -> None:
        """End every connection now and close the WebSocket."""
        with self._lock:
            self.alive = False
            self._stopped = True
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        """Relay until stopped, retired and idle, or dropped; then close every socket."""
        self.sock.setblocking(False)
        sel = self._sel
        sel.register(self._wake_r, selectors.EVENT_READ)
        sel.register(self.sock, selectors.EVENT_READ)
        ws_events = selectors.EVENT_READ
        try:
            self._take_frames()
            while True:
                self._admit()
                if self._stopped or (self._retired and not self.conns):
                    self._say_goodbye()
                    break
                self._keepalive()
                self._flush_session()
                want = self._ws_events()
                if want != ws_events:
                    if not ws_events:
                        sel.register(self.sock, want)
                    elif not want:
                        sel.unregister(self.sock)
                    else:
                        sel.modify(self.sock, want)
                    ws_events = want
                for conn in list(self.conns.values()):
                    self._watch(conn)
                ready: list[tuple[object, object, int]]  # (file object, its data, events)
                if ws_events & selectors.EVENT_READ and has_pending(self.sock):
                    ready = [(self.sock, None, selectors.EVENT_READ)]
                else:
                    ready = [(k.fileobj, k.data, ev) for k, ev in sel.select(IDLE_POLL)]
                for obj, data, ev in ready:
                    if obj is self._wake_r:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif obj is self.sock:
                        if ev & selectors.EVENT_WRITE:
                            self._send_ws()
                        if ev & selectors.EVENT_READ:
                            self._read_ws()
                    elif isinstance(data, Connection) and self.conns.get(data.data_sid) is data:
                        self._local_io(data, ev)
                self._flush_unsent()
                self._finish_done()
        except (OSError, ConnectionDropped, F.SpdyProtocolError) as exc:
            self.dropped = str(exc) or type(exc).__name__
            log.debug("port-forward tunnel to %s ended: %s", self.pod, exc)
        finally:
            with self._lock:
                self.alive = False
                pending = list(self._new)
                self._new.clear()
            for conn in [*self.conns.values(), *pending]:
                if self.dropped and self._hand_over(conn):
                    continue
                conn.broken = True
                self._end(conn)
            sel.close()
            for s in (self.sock, self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    s.close()

    def _admit(self) -> None:
        with self._lock:
            new, self._new = list(self._new), deque()
            cuts, self._cuts = list(self._cuts), deque()
        for conn in new:
            if self.session.gone_away:  # the server said GOAWAY: to the next tunnel
                if not self._hand_over(conn):
                    conn.broken = True
                    self._end(conn)
                continue
            headers = {"streamType": "error", "port": str(self.port)}
            headers["requestID"] = str(conn.request_id)
            conn.error_sid = self.session.open_stream(headers)
            self.session.close_stream(conn.error_sid)  # we never write to it
            conn.data_sid = self.session.open_stream({**headers, "streamType": "data"})
            if conn.first:  # the bytes it sent into a tunnel that dropped
                self.session.send_data(conn.data_sid, conn.first)
                conn.first = b""
            conn.sock.setblocking(False)
            self.conns[conn.data_sid] = conn
            self.by_error[conn.error_sid] = conn
            self._local_io(conn, selectors.EVENT_READ)  # a request already sent: same message
        for conn in cuts:
            if self.conns.get(conn.data_sid) is conn:
                conn.broken = True
                self._end(conn)

    def _keepalive(self) -> None:
        now = time.monotonic()
        if not self._ws_events() & selectors.EVENT_READ:
            self._pong_deadline = None  # not reading (a full client buffer): no answer to wait
        if self._pong_deadline is not None and now > self._pong_deadline:
            raise ConnectionDropped(f"no answer to a ping for {self._pong_wait:g} s")
        if now >= self._ping_due:
            self.session.ping()
            self._ping_due = now + self._ping_period
            if self._pong_deadline is None:
                self._pong_deadline = now + self._pong_wait

    def _ws_events(self) -> int:
        events = 0
        if not self._ws_closed and not any(c.pending >= HIGH_WATER for c in self.conns.values()):
            events |= selectors.EVENT_READ
        if self._out or wants_write(self.sock):
            events |= selectors.EVENT_WRITE
        return events

    def _watch(self, conn: Connection) -> None:
        events = 0
        if (
            not conn.local_eof
            and not conn.broken
            and self._out_bytes < HIGH_WATER
            and self.session.send_allowance(conn.data_sid) > 0
        ):
            events |= selectors.EVENT_READ
        if conn.pending:
            events |= selectors.EVENT_WRITE
        if events == conn.events:
            return
        if not conn.events:
            self._sel.register(conn.sock, events, conn)
        elif not events:
            self._sel.unregister(conn.sock)
        else:
            self._sel.modify(conn.sock, events, conn)
        conn.events = events

    # -- the WebSocket ----------------------------------------------------------------------
    def _flush_session(self) -> None:
        if self.session.queued:
            frame = client_frame(self.session.take_outgoing())
            self._out.append(memoryview(frame))
            self._out_bytes += len(frame)
            self._send_ws()

    def _send_ws(self) -> None:
        if not self._out:
            flush_tls(self.sock)
        while self._out:
            head = self._out[0]
            try:
                n = self.sock.send(head)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return
            self._out_bytes -= n
            if n < len(head):
                self._out[0] = head[n:]
                return
            self._out.popleft()
        if not self._out:
            flush_tls(self.sock)

    def _read_ws(self) -> None:
        for _ in range(READS_PER_WAKE):
            if self._ws_closed or any(c.pending >= HIGH_WATER for c in self.conns.values()):
                return
            try:
                self.reader.receive()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                self._take_frames()
                return
            self._take_frames()

    def _flush_unsent(self) -> None:
        for conn in self._unsent:
            self._flush_local(conn)
        self._unsent.clear()

    def _take_frames(self) -> None:
        while not self._ws_closed:
            frame = self.reader.next_frame()
            if frame is None:
                return
            _fin, opcode, payload = frame
            if opcode in (OP_BINARY, OP_CONT):
                for event in self.session.receive(payload):
                    self._event(event)
            elif opcode == OP_CLOSE:
                self._ws_closed = True
                raise ConnectionDropped("the API server closed the tunnel")
            elif opcode == OP_PING:
                self._out.append(memoryview(client_frame(bytes(payload), OP_PONG)))

    def _event(self, event: Event) -> None:
        sid = event.stream_id
        if event.kind == "pong":
            self._pong_deadline = None
        elif event.kind == "goaway":
            with self._lock:
                self.alive = False
                self._retired = True
        conn = self.conns.get(sid)
        if conn is not None:
            if event.kind == "data":
                self._to_local(conn, event.data)
            elif event.kind == "fin":
                conn.remote_fin = True
            elif event.kind == "reset":
                conn.broken = True
                conn.reset_at = time.monotonic()
            return
        conn = self.by_error.get(sid)
        if conn is None:
            return
        if event.kind == "data":
            self.session.consumed(sid, len(event.data))
            if len(conn.error) < MAX_ERROR_TEXT:
                conn.error += bytes(event.data).decode("utf-8", "replace")[:MAX_ERROR_TEXT]
        elif event.kind in ("fin", "reset"):
            conn.error_done = True

    # -- local clients ----------------------------------------------------------------------
    def _to_local(self, conn: Connection, data: bytes | memoryview) -> None:
        """Queue ``data`` (a view, no copy); it goes out in one ``sendmsg`` per wake-up."""
        if conn.broken or not data:
            return
        conn.to_local.append(memoryview(data))
        conn.pending += len(data)
        self._unsent.add(conn)

    def _flush_local(self, conn: Connection) -> None:
        """Send what ``conn``'s client takes now, as few system calls as it takes."""
        while conn.to_local and not conn.broken:
            views = list(itertools.islice(conn.to_local, IOV_MAX))
            n = self._send_local(conn, views)
            if not n:
                return
            conn.pending -= n
            while n:
                head = conn.to_local[0]
                if n < len(head):
                    conn.to_local[0] = head[n:]
                    return
                n -= len(head)
                conn.to_local.popleft()
        if conn.broken:
            conn.to_local.clear()
            conn.pending = 0

    def _send_local(self, conn: Connection, views: list[memoryview]) -> int:
        try:
            n = conn.sock.sendmsg(views)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:  # the client went away
            conn.broken = True
            return 0
        conn.sent += n
        conn.replay = None  # answered: no longer movable
        self.session.consumed(conn.data_sid, n)
        return n

    def _local_io(self, conn: Connection, events: int) -> None:
        if events & selectors.EVENT_WRITE and conn.pending:
            self._flush_local(conn)
        if events & selectors.EVENT_READ and not conn.local_eof:
            budget = min(LOCAL_READ, self.session.send_allowance(conn.data_sid))
            if budget <= 0:
                return
            try:
                data = conn.sock.recv(budget)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # reset by the client
                conn.local_eof = conn.broken = True
                return
            if data:
                conn.received += len(data)
                if conn.replay is not None:
                    if conn.received <= REPLAY_MAX:
                        conn.replay += data
                    else:
                        conn.replay = None
                self.session.send_data(conn.data_sid, data)
            else:
                conn.local_eof = True
                conn.replay = None
                self.session.close_stream(conn.data_sid)  # half-close, as kubectl

    def _hand_over(self, conn: Connection) -> bool:
        """Give a connection the pod never answered to ``on_retry`` (another tunnel) with
        what it sent so far; False when it cannot move (answered, or moved once already)."""
        if self.on_retry is None or conn.replay is None or conn.retried or conn.error:
            return False
        if conn.events:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(conn.sock)
            conn.events = 0
        self.conns.pop(conn.data_sid, None)
        self.by_error.pop(conn.error_sid, None)
        conn.sock.setblocking(True)
        try:
            return self.on_retry(conn)
        except Exception:
            log.exception("port forward %s: moving a connection failed", self.port)
            return False

    def _finish_done(self) -> None:
        for conn in list(self.conns.values()):
            said = conn.error_done or conn.reset_at is not None
            if said and POD_GONE.search(conn.error) and not conn.sent:
                self.retire()  # it leads to a pod that is gone: new connections look again
                failed, conn.error = conn.error, ""
                if self._hand_over(conn):
                    continue
                conn.error = failed
            if self._awaits_reason(conn):
                continue
            if conn.broken or (conn.remote_fin and conn.error_done and not conn.pending):
                self._end(conn)

    @staticmethod
    def _awaits_reason(conn: Connection) -> bool:
        """The pod's side reset the data stream of an unanswered connection and has not yet
        said why on the error stream: wait (ERROR_WAIT at most) for it."""
        return (
            conn.reset_at is not None
            and not conn.error_done
            and not conn.sent
            and conn.replay is not None
            and time.monotonic() - conn.reset_at < ERROR_WAIT
        )

    def _end(self, conn: Connection) -> None:
        """Forget ``conn``: reset its streams and close its socket (with an RST when it broke
        or the pod's side complained)."""
        self.conns.pop(conn.data_sid, None)
        self.by_error.pop(conn.error_sid, None)
        if conn.events:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(conn.sock)
        conn.events = 0
        if conn.data_sid:
            self.session.reset_stream(conn.data_sid)
            self.session.reset_stream(conn.error_sid)
        if conn.broken or conn.error:
            reset(conn.sock)
        else:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.sock.close()
        if conn.on_end is not None:
            try:
                conn.on_end(conn)
            except Exception:
                log.exception("port forward %s: a connection callback failed", self.port)

    def _say_goodbye(self) -> None:
        """GOAWAY and a WebSocket close, sent for at most CLOSE_WAIT seconds."""
        with contextlib.suppress(F.SpdyProtocolError):
            self.session.goaway()
        self._flush_session()
        self._out.append(memoryview(client_frame(struct.pack("!H", 1000), OP_CLOSE)))
        deadline = time.monotonic() + CLOSE_WAIT
        while (self._out or wants_write(self.sock)) and time.monotonic() < deadline:
            self._send_ws()
            if self._out or wants_write(self.sock):
                time.sleep(0.01)


__all__ = ["SUBPROTOCOL", "Connection", "SpdyTunnel"]
