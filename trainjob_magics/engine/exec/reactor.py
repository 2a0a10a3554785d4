"""Many execs on one thread: the fan-out's I/O multiplexed over one selector.

A thread per pod costs little while it waits, but hundreds of threads that all want the GIL at
once (connecting, reading the answer) spend more time handing it over than working: a fan-out
to 256 pods took 1.2 ms of CPU per pod that way, against 0.35 ms for one exec alone. Here every
exec of a fan-out is a small state machine (TCP connect, TLS handshake, upgrade request,
response head, frames) driven by one thread that waits on all the sockets at once.

Only the plain way is done here: a direct connection (no proxy) answered with 101. Anything
else (a proxy, a refused connection, a TLS error, a non-101 answer, a status saying the command
never started) ends the job with :class:`Fallback` *before* the command ran, and the caller runs
that pod the usual way (:meth:`ExecClient.run`), which has the retries, the credential refresh
and the error messages. After the upgrade, the frames are read and stdin written exactly as
``ExecClient._io_loop`` does, and the outcome goes through the same mapping
(:func:`exec_outcome`, :func:`exec_failure`).
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import logging
import resource
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import websocket

from ..errors import ConnectionLostError, PodNotRunningError
from ..kube.requests import connection_failure
from ..result import ExecResult
from . import handshake
from .client import (
    PROTOCOLS,
    READ_BUDGET,
    V5,
    WRITE_BUDGET,
    ExecClient,
    exec_failure,
    exec_outcome,
    exec_url,
)
from .frames import OP_CLOSE, ConnectionDropped, FrameReader, StdinSender, client_frame
from .liveness import ConnectionSilent, Liveness
from .scripts import end_mark_of
from .streams import Collector, FrameHandler, OnOutput

log = logging.getLogger(__name__)

Done = Callable[[ExecResult | None, "BaseException | None"], None]  # (result, error)

READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
CONNECT_TIMEOUT = 30.0  # connect, TLS and the upgrade answer together
CLOSE_FLUSH = 0.5  # at most this long for our close reply
# From this many execs on, the first TLS one runs alone and the others resume its session (no
# certificate checks, about a third of a full handshake's CPU, on both sides).
RESUME_FROM = 8


class Fallback(Exception):
    """The job did not get to run its command here: run it the usual way."""


@dataclass(frozen=True)
class DirectTarget:
    """Where every exec of a batch connects: one resolved address, TLS or not, the headers."""

    host: str  # the configured server URL
    address: tuple[Any, ...]
    family: int
    tls: ssl.SSLContext | None
    server_hostname: str | None
    headers: tuple[str, ...]


def direct_target(client: ExecClient) -> DirectTarget | None:
    """How the execs of one batch reach the API server directly; None when they cannot (a
    proxy, an address that does not resolve): the caller then uses the usual path."""
    cfg = client.configuration
    parts = urlsplit(cfg.host)
    secure = parts.scheme == "https"
    if cfg.proxy or cfg.proxy_headers or not parts.hostname:
        return None
    try:
        from websocket._url import get_proxy_info

        if get_proxy_info(parts.hostname, secure)[0]:  # http(s)_proxy in the environment
            return None
        port = parts.port or (443 if secure else 80)
        infos = socket.getaddrinfo(parts.hostname, port, 0, socket.SOCK_STREAM, socket.SOL_TCP)
        headers = tuple(client.headers())
    except (OSError, TypeError, ValueError):
        return None
    if not infos:
        return None
    family, _type, _proto, _name, address = infos[0]
    return DirectTarget(
        host=cfg.host,
        address=address,
        family=family,
        tls=client.ssl_context() if secure else None,
        server_hostname=(cfg.tls_server_name or parts.hostname) if secure else None,
        headers=headers,
    )


@dataclass
class ExecJob:
    """One exec of a batch: what to run where, and where its end goes (``done``, called once
    from the reactor's thread)."""

    namespace: str
    pod: str
    argv: Sequence[str]
    done: Done
    container: str | None = None
    stdin: bytes | None = None
    timeout: float | None = None
    on_output: OnOutput | None = None
    max_memory_output: int | None = None
    on_start: Callable[[Callable[[], ExecResult]], None] | None = None
    # state (the reactor's)
    sock: Any = None
    phase: str = "new"
    started: float = 0.0
    deadline: float | None = None
    out: memoryview = field(default_factory=lambda: memoryview(b""))
    head: bytes = b""
    key: str = ""
    reader: FrameReader | None = None
    frames: FrameHandler | None = None
    sender: StdinSender | None = None
    collector: Collector | None = None
    events: int = 0
    closing_by: float = 0.0
    alive: Liveness | None = None  # pings while nothing arrives; silent past the bound
    alive_at: float = 0.0  # when its (one) liveness timer fires


def _open_files_budget() -> int:
    """How many execs may have a socket at once (half the soft file limit, at least 64)."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 512
    return max(64, (soft if soft > 0 else 1024) // 2)


class Reactor:
    """Runs a batch of :class:`ExecJob` on one thread (at most ``max_open`` connected at a
    time); :meth:`start` returns at once, each job's ``done`` reports its end."""

    def __init__(
        self,
        client: ExecClient,
        target: DirectTarget,
        jobs: Sequence[ExecJob],
        *,
        max_open: int | None = None,
        name: str = "trainjob-reactor",
    ) -> None:
        self.client = client
        self.target = target
        self._waiting = list(reversed(jobs))  # pop() takes them in order
        self._max_open = max_open or _open_files_budget()
        self._open: dict[int, ExecJob] = {}
        self._selector = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, ExecJob]] = []
        self._count = itertools.count()
        self._ready: list[ExecJob] = []  # read budget spent: go on without waiting
        self._session: ssl.SSLSession | None = None  # TLS session the others resume
        self._probe: ExecJob | None = None  # the first TLS exec, run alone for its session
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self) -> Reactor:
        self._thread.start()
        return self

    # -- the loop ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while self._waiting or self._open:
                self._admit()
                wait = 0.0 if self._ready else self._next_timer()
                for key, _events in self._selector.select(wait):
                    self._step(key.data)
                ready, self._ready = self._ready, []
                for job in ready:
                    if job.phase != "done":
                        self._step(job)
                self._expire()
        except BaseException as exc:  # a bug here must not leave the caller waiting
            log.exception("the exec reactor stopped")
            for job in list(self._open.values()):
                lost = ConnectionLostError(f"the exec in pod {job.pod} stopped: {exc}")
                self._finish(job, None, lost)
            for job in self._waiting:  # never started: the usual way
                self._finish(job, None, Fallback(f"the reactor stopped: {exc}"))
        finally:
            self._selector.close()

    def _admit(self) -> None:
        while self._waiting and len(self._open) < self._max_open:
            probe = self._probe
            if probe is not None and probe.phase in ("connect", "tls", "request", "head"):
                return  # the others wait for its TLS session
            job = self._waiting.pop()
            alone = len(self._waiting) >= RESUME_FROM and probe is None
            if alone and self.target.tls is not None and self._session is None:
                self._probe = job
            self._begin(job)

    def _next_timer(self) -> float | None:
        while self._timers and self._timers[0][2].phase == "done":
            heapq.heappop(self._timers)
        if not self._timers:
            return None
        return max(0.0, self._timers[0][0] - time.monotonic())

    def _timer(self, job: ExecJob, when: float | None) -> None:
        if when is not None:
            heapq.heappush(self._timers, (when, next(self._count), job))

    def _expire(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            when, _n, job = heapq.heappop(self._timers)
            if job.phase != "done":
                self._on_timer(job, when)

    # -- one job -----------------------------------------------------------------------------
    def _begin(self, job: ExecJob) -> None:
        job.started = time.monotonic()
        job.deadline = None if job.timeout is None else job.started + job.timeout
        url = exec_url(
            self.target.host,
            job.namespace,
            job.pod,
            job.argv,
            container=job.container,
            stdin=job.stdin is not None,
        )
        job.key = handshake.new_key()
        job.out = memoryview(handshake.request_bytes(url, self.target.headers, PROTOCOLS, job.key))
        try:
            sock = socket.socket(self.target.family, socket.SOCK_STREAM)
        except OSError:
            self._finish(job, None, Fallback("no socket"))
            return
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        job.sock = sock
        self._open[id(job)] = job
        job.phase = "connect"
        self._timer(job, job.started + CONNECT_TIMEOUT)
        err = sock.connect_ex(self.target.address)
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            self._finish(job, None, Fallback(f"connect: {errno.errorcode.get(err, err)}"))
            return
        self._watch(job, WRITE)

    def _watch(self, job: ExecJob, events: int) -> None:
        if events == job.events:
            return
        if job.events == 0:
            self._selector.register(job.sock, events, job)
        elif events == 0:
            self._selector.unregister(job.sock)
        else:
            self._selector.modify(job.sock, events, job)
        job.events = events

    def _step(self, job: ExecJob) -> None:
        try:
            if job.phase == "connect":
                self._connected(job)
            elif job.phase == "tls":
                self._tls(job)
            elif job.phase == "request":
                self._send_request(job)
            elif job.phase == "head":
                self._read_head(job)
            elif job.phase == "frames":
                self._pump(job)
            elif job.phase == "closing":
                self._flush_close(job)
        except Fallback as exc:
            self._finish(job, None, exc)
        except Exception as exc:  # a callback's error ends only its own job
            self._finish(job, None, exc)

    def _connected(self, job: ExecJob) -> None:
        err = job.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise Fallback(f"connect: {errno.errorcode.get(err, err)}")
        if self.target.tls is not None:
            self._watch(job, 0)  # the wrapped socket takes over the descriptor
            try:
                job.sock = self.target.tls.wrap_socket(
                    job.sock,
                    server_hostname=self.target.server_hostname,
                    do_handshake_on_connect=False,
                    session=self._session,
                )
            except (ssl.SSLError, OSError, ValueError) as exc:
                raise Fallback(f"TLS: {exc}") from None
            job.phase = "tls"
            self._tls(job)
            return
        job.phase = "request"
        self._send_request(job)

    def _tls(self, job: ExecJob) -> None:
        try:
            job.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(job, READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(job, WRITE)
            return
        except (ssl.SSLError, OSError) as exc:
            raise Fallback(f"TLS: {exc}") from None
        job.phase = "request"
        self._send_request(job)

    def _send_request(self, job: ExecJob) -> None:
        while job.out:
            try:
                n = job.sock.send(job.out)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                self._watch(job, WRITE)
                return
            except ssl.SSLWantReadError:
                self._watch(job, READ)
                return
            except OSError as exc:
                raise Fallback(f"send: {exc}") from None
            job.out = job.out[n:]
        job.phase = "head"
        self._watch(job, READ)
        self._read_head(job)

    def _read_head(self, job: ExecJob) -> None:
        while b"\r\n\r\n" not in job.head:
            try:
                chunk = job.sock.recv(16384)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                self._watch(job, READ)
                return
            except ssl.SSLWantWriteError:
                self._watch(job, WRITE)
                return
            except OSError as exc:
                raise Fallback(f"upgrade: {exc}") from None
            if not chunk:
                raise Fallback("the connection closed during the upgrade")
            job.head += chunk
            if len(job.head) > handshake.MAX_HEAD:
                raise Fallback("the upgrade response head is too large")
        head, _, rest = job.head.partition(b"\r\n\r\n")
        try:
            status, _reason, resp = handshake.parse_head(head)
        except websocket.WebSocketException as exc:
            raise Fallback(str(exc)) from None
        if status != 101:
            raise Fallback(f"upgrade answered {status}")  # the usual path maps it
        try:
            subprotocol = handshake.accepted(resp, job.key, PROTOCOLS)
        except websocket.WebSocketException as exc:  # upgraded: the command may have started
            self._finish(job, None, connection_failure(exc, self.target.host))
            return
        self._upgraded(job, subprotocol, rest)

    def _upgraded(self, job: ExecJob, subprotocol: str | None, rest: bytes) -> None:
        job.phase = "frames"
        self.client.protocol = subprotocol or ""
        if self.target.tls is not None and self._session is None:
            self._session = getattr(job.sock, "session", None)  # the ticket came by now
        job.head = b""
        collector = self.client.collector(job.on_output, job.pod, job.max_memory_output)
        collector.expect_end(end_mark_of(job.argv))
        job.collector = collector
        job.sender = StdinSender(job.sock, job.stdin, v5=subprotocol == V5, on_stdin=None)
        job.reader = FrameReader(job.sock)
        job.reader.buf += rest
        job.frames = FrameHandler(collector, job.sender)
        job.alive = Liveness(self.client.silent_after)
        self._timer(job, job.deadline)
        job.alive_at = job.alive.next_due()
        self._timer(job, job.alive_at)
        if job.on_start is not None:
            started = job.started
            job.on_start(lambda: collector.snapshot(started, job.pod))
        self._pump(job)

    def _pump(self, job: ExecJob) -> None:
        """Read what arrived, write what the socket takes (as ``ExecClient._io_loop``)."""
        sender, reader, frames = job.sender, job.reader, job.frames
        assert sender is not None and reader is not None and frames is not None
        try:
            if sender.busy:
                sender.send(WRITE_BUDGET)  # a write that would block just waits for WRITE
            got = 0
            read_waits = READ
            while got < READ_BUDGET:
                frame = reader.next_frame()
                if frame is None:
                    try:
                        got += reader.receive()
                    except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                        break
                    except ssl.SSLWantWriteError:
                        read_waits = WRITE
                        break
                    if job.alive is not None:
                        job.alive.heard()
                    continue
                status_known = frames.got_status
                if frames.handle(*frame):  # the close frame
                    self._close(job)
                    return
                if frames.got_status and not status_known:
                    self._timer(job, frames.close_by)
            else:
                self._ready.append(job)  # the budget is spent: come back without waiting
            if sender.busy and not sender.waits_for:
                sender.send(WRITE_BUDGET)
        except (ConnectionDropped, OSError) as exc:
            if frames.got_status:  # the command's end is known: a broken close does not matter
                self._end(job)
                return
            self._fail(job, exc)
            return
        wants = read_waits | (sender.waits_for if sender.busy else 0)
        if sender.busy and not sender.waits_for:
            wants |= WRITE
        self._watch(job, wants)

    def _on_timer(self, job: ExecJob, when: float) -> None:
        now = time.monotonic()
        if job.phase in ("connect", "tls", "request", "head"):
            if now >= job.started + CONNECT_TIMEOUT:
                self._finish(job, None, Fallback("the upgrade took too long"))
            return
        if job.phase == "closing":
            if now >= job.closing_by:
                self._end(job)
            return
        frames = job.frames
        if frames is None:
            return
        if frames.got_status:
            if now >= frames.close_by:
                self._end(job)
        elif job.deadline is not None and now >= job.deadline:
            self._fail(job, TimeoutError())
        elif job.alive is not None and now >= job.alive_at:  # its liveness timer
            self._keep_alive(job, job.alive, now)

    def _keep_alive(self, job: ExecJob, alive: Liveness, now: float) -> None:
        """Ping a connection that sent nothing for a while; fail one silent past the bound;
        then arm the next liveness timer (bytes that came since moved it later)."""
        try:
            ping = alive.check(now)
        except ConnectionSilent as exc:
            self._fail(job, exc)
            return
        if ping is not None and job.sender is not None:
            job.sender.queue_control(ping)
            self._ready.append(job)  # _pump writes it
        job.alive_at = alive.next_due()
        self._timer(job, job.alive_at)

    def _close(self, job: ExecJob) -> None:
        """Answer the close frame (best effort, briefly), then end the job."""
        sender = job.sender
        assert sender is not None
        sender.abandon_stdin()
        sender.queue_control(client_frame(struct.pack("!H", 1000), OP_CLOSE))
        job.phase = "closing"
        job.closing_by = time.monotonic() + CLOSE_FLUSH
        self._timer(job, job.closing_by)
        self._flush_close(job)

    def _flush_close(self, job: ExecJob) -> None:
        sender = job.sender
        assert sender is not None
        with contextlib.suppress(OSError, ValueError):
            sender.send(WRITE_BUDGET)
        if sender.busy and sender.waits_for and time.monotonic() < job.closing_by:
            self._watch(job, sender.waits_for)
            return
        self._end(job)

    def _end(self, job: ExecJob) -> None:
        """The exec ended with its status: its result (or the error the status means)."""
        assert job.frames is not None and job.collector is not None
        try:
            result = exec_outcome(job.frames.outcome(), job.collector, job.started, job.pod)
        except PodNotRunningError as exc:  # never started: the usual path re-resolves the pod
            self._finish(job, None, Fallback(str(exc)))
            return
        except Exception as exc:
            self._finish(job, None, exc)
            return
        self._finish(job, result, None)

    def _fail(self, job: ExecJob, exc: BaseException) -> None:
        assert job.collector is not None
        self._finish(job, None, exec_failure(exc, job.collector, job.started, job.pod, job.timeout))

    def _finish(self, job: ExecJob, result: ExecResult | None, error: BaseException | None) -> None:
        if job.phase == "done":
            return
        job.phase = "done"
        if job.sock is not None:
            if job.events:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self._selector.unregister(job.sock)
            with contextlib.suppress(OSError):
                job.sock.close()
        self._open.pop(id(job), None)
        try:
            job.done(result, error)
        except Exception:  # the caller's bug: the other jobs go on
            log.exception("handling the end of the exec in pod %s failed", job.pod)


__all__ = ["DirectTarget", "ExecJob", "Fallback", "Reactor", "direct_target"]
