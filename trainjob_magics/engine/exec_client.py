"""pods/exec over WebSocket (``v5.channel.k8s.io``, ``v4.channel.k8s.io``) with our own frame loop.

websocket-client does the handshake (TLS, auth headers, proxy); after the 101 we read frames
straight from the socket: one channel byte then payload (0 stdin, 1 stdout, 2 stderr, 3 status).
Each stream is kept as byte chunks up to a memory limit, then spilled to a file
(``output.py``), and decoded only when the result is read; ``on_output`` gets text decoded
incrementally so multi-byte UTF-8 split across frames stays intact. A stream can go to a raw
sink instead (file transfers).

Exit status (channel 3): ``Success`` -> 0; ``NonZeroExitCode`` with an ``ExitCode`` cause -> N;
any other failure (``InternalError``, e.g. the runtime could not start the process) raises
:class:`ApiServerError` with the server's message and the output so far in ``.partial``.
A clean close (1000) without a status gives ``returncode=None``; a drop before the status raises
:class:`ConnectionLostError`.

stdin (bytes, str or a binary file object read in chunks): sent on channel 0 as masked client
frames, then closed with ``[255, 0]`` when v5 was negotiated. On v4 there is no way to signal
EOF: a command that reads stdin to the end waits until its timeout.

All socket I/O of one exec happens in the calling thread (OpenSSL does not allow SSL_read and
SSL_write on one connection from two threads at once): a full-duplex loop with the socket
non-blocking and one selector, reading whatever arrives and writing stdin only when the socket
takes it, so a command that stops reading stdin while its output waits never deadlocks us.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import io
import ipaddress
import json
import logging
import re
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO
from urllib.parse import quote, urlencode, urlsplit

import websocket
from kubernetes.client import ApiClient
from kubernetes.stream.ws_client import websocket_proxycare

from .apierrors import connection_failure, map_http_failure, parse_status_body
from .errors import (
    ApiServerError,
    ConnectionLostError,
    ExecTimeoutError,
    InvalidInputError,
    PodNotRunningError,
    TrainJobError,
)
from .output import (
    EMPTY,
    MAX_MEMORY_OUTPUT,
    CapturedOutput,
    OutputBuffer,
    Sink,
    SpillDir,
    sink_writer,
)
from .result import ExecResult
from .retry import with_retries

log = logging.getLogger(__name__)

PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
V5 = "v5.channel.k8s.io"
STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
STREAM_NAMES = {STDOUT: "stdout", STDERR: "stderr"}
EXEC_RBAC = "get and create"
EXEC_RESOURCE = "pods/exec"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
RECV_SIZE = 1 << 18
DIRECT_READ = 1 << 16  # payloads at least this big are read straight into their own buffer
STDIN_CHUNK = 1 << 18  # stdin payload bytes per frame
READ_BUDGET = 1 << 20  # bytes read before the loop looks at the deadline and stdin again
WRITE_BUDGET = 1 << 20  # bytes written before the loop reads again
CONNECT_TIMEOUT = 30.0
CLOSE_GRACE = 1.0  # wait this long for the close frame after the status arrived
CLOSE_FLUSH = 0.5  # at most this long to write our close reply
IDLE_WAIT = 60.0  # longest single wait for output when there is no deadline
_NOT_RUNNING = re.compile(
    r"completed pod|current phase|does not have a host|not running|is terminated|"
    r"waiting to start|being deleted|terminating",
    re.IGNORECASE,
)

LOST_HINT = "check with another command"

OnOutput = Callable[[str, str], None]
Progress = Callable[[int], None]  # bytes of stdin sent in this step
Stdin = bytes | bytearray | memoryview | str | BinaryIO


class _Lost(Exception):
    """The connection ended without a close frame."""


class FrameReader:
    """Parses WebSocket frames from a connected (TLS) socket with large reads and no copies
    beyond one per payload.

    Non-blocking use: :meth:`next_frame` returns a frame from what is buffered (None when more
    bytes are needed) and :meth:`receive` does one read (raising ``ssl.SSLWantReadError`` /
    ``BlockingIOError`` when nothing is there). :meth:`read_frame` is the blocking form.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.pos = 0
        self._head: tuple[bool, int, int, bytes | None] | None = None  # parsed, payload pending
        self._direct: bytearray | None = None  # a large payload read straight into place
        self._got = 0  # bytes of ``_direct`` filled

    def receive(self) -> int:
        """Read once from the socket; return the byte count (raises :class:`_Lost` at EOF)."""
        if self._direct is not None:
            n = self.sock.recv_into(memoryview(self._direct)[self._got :])
            if not n:
                raise _Lost("connection closed by the server")
            self._got += n
            return n
        chunk = self.sock.recv(RECV_SIZE)
        if not chunk:
            raise _Lost("connection closed by the server")
        if self.pos == len(self.buf):
            self.buf = bytearray(chunk)
            self.pos = 0
        else:
            if self.pos > RECV_SIZE:
                del self.buf[: self.pos]
                self.pos = 0
            self.buf += chunk
        return len(chunk)

    def _parse_head(self) -> tuple[bool, int, int, bytes | None] | None:
        """``(fin, opcode, length, mask)`` of the next frame, or None if its header is partial."""
        buf, pos = self.buf, self.pos
        available = len(buf) - pos
        if available < 2:
            return None
        b0, b1 = buf[pos], buf[pos + 1]
        length = b1 & 0x7F
        need = 2 + (2 if length == 126 else 8 if length == 127 else 0) + (4 if b1 & 0x80 else 0)
        if available < need:
            return None
        pos += 2
        if length == 126:
            (length,) = struct.unpack_from("!H", buf, pos)
            pos += 2
        elif length == 127:
            (length,) = struct.unpack_from("!Q", buf, pos)
            pos += 8
        mask = None
        if b1 & 0x80:  # servers must not mask, but tolerate it
            mask = bytes(buf[pos : pos + 4])
            pos += 4
        self.pos = pos
        return bool(b0 & 0x80), b0 & 0x0F, length, mask

    def next_frame(self) -> tuple[bool, int, bytearray | memoryview] | None:
        """``(fin, opcode, payload)`` of the next complete frame, or None until more arrives."""
        if self._head is None:
            self._head = self._parse_head()
            if self._head is None:
                return None
        fin, opcode, length, mask = self._head
        if self._direct is not None:
            if self._got < length:
                return None
            payload: bytearray | memoryview = self._direct
            self._direct = None
        else:
            available = len(self.buf) - self.pos
            if available < length:
                if length >= DIRECT_READ:  # read the rest straight into its own buffer
                    self._direct = bytearray(length)
                    self._direct[:available] = memoryview(self.buf)[self.pos :]
                    self._got = available
                    self.buf = bytearray()
                    self.pos = 0
                return None
            start = self.pos
            self.pos += length
            payload = self.buf[start : self.pos] if length else bytearray()
            if self.pos == len(self.buf):
                self.buf.clear()
                self.pos = 0
        self._head = None
        if mask is not None:
            payload = bytearray(websocket.ABNF.mask(mask, bytes(payload)))
        return fin, opcode, payload

    def read_frame(self) -> tuple[bool, int, bytearray | memoryview]:
        """Blocking: return ``(fin, opcode, payload)`` of the next frame."""
        while (frame := self.next_frame()) is None:
            self.receive()
        return frame


def parse_exec_status(payload: bytes | bytearray | memoryview) -> tuple[int | None, str]:
    """``(returncode, message)`` from a channel-3 metav1.Status; returncode None = no exit code."""
    try:
        data = json.loads(bytes(payload).decode("utf-8", "replace"))
    except ValueError:
        return None, bytes(payload).decode("utf-8", "replace").strip()[:300]
    if not isinstance(data, dict):
        return None, str(data)[:300]
    if data.get("status") == "Success":
        return 0, ""
    message = str(data.get("message") or data.get("reason") or "command failed")
    for cause in (data.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(str(cause.get("message")).strip()), message
            except ValueError:
                break
    return None, message


def exec_url(
    host: str,
    namespace: str,
    pod: str,
    argv: Sequence[str],
    *,
    container: str | None,
    stdin: bool,
) -> str:
    """WebSocket URL of pods/exec; one ``command=`` per argv element, percent-encoded."""
    query: list[tuple[str, str]] = [("command", arg) for arg in argv]
    if container:
        query.append(("container", container))
    query += [
        ("stdin", "true" if stdin else "false"),
        ("stdout", "true"),
        ("stderr", "true"),
        ("tty", "false"),
    ]
    base = host.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
    return f"{base}{path}?{urlencode(query, quote_via=quote, safe='')}"


def _is_loopback(host: str) -> bool:
    hostname = urlsplit(host).hostname or ""
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


class _Collector:
    """Routes each output frame: to the stream's sink when it has one, else into a bounded
    :class:`OutputBuffer`; feeds ``on_output`` with incrementally decoded text (collected
    streams only). Nothing else is decoded while the command runs."""

    def __init__(
        self,
        on_output: OnOutput | None,
        *,
        pod: str = "",
        limit: int | None = MAX_MEMORY_OUTPUT,
        spill_dir: SpillDir | None = None,
        sinks: dict[int, Sink | None] | None = None,
    ) -> None:
        self.on_output = on_output
        self.sinks = {ch: sink_writer(s) for ch, s in (sinks or {}).items() if s is not None}
        self.buffers = {
            ch: OutputBuffer(limit, spill_dir, f"{pod or 'exec'}-{STREAM_NAMES[ch]}-")
            for ch in (STDOUT, STDERR)
            if ch not in self.sinks
        }
        self.decoders = (
            {ch: codecs.getincrementaldecoder("utf-8")(errors="replace") for ch in self.buffers}
            if on_output is not None
            else {}
        )

    def add(self, channel: int, data: memoryview) -> None:
        sink = self.sinks.get(channel)
        if sink is not None:
            sink(data)
            return
        self.buffers[channel].add(data)
        if self.on_output is not None:
            text = self.decoders[channel].decode(data)
            if text:
                self.on_output(STREAM_NAMES[channel], text)

    def flush(self) -> None:
        """Emit what the decoders still hold (a truncated multi-byte sequence)."""
        if self.on_output is None:
            return
        for channel, decoder in self.decoders.items():
            text = decoder.decode(b"", final=True)
            if text:
                self.on_output(STREAM_NAMES[channel], text)

    def result(self, returncode: int | None, started: float, pod: str) -> ExecResult:
        def captured(channel: int) -> CapturedOutput:
            buffer = self.buffers.get(channel)
            return buffer.freeze() if buffer is not None else EMPTY

        return ExecResult.from_captured(
            captured(STDOUT), captured(STDERR), returncode, time.monotonic() - started, pod
        )


def _client_frame(payload: bytes, opcode: int = OP_BINARY) -> bytes:
    """A masked client frame (RFC 6455: clients must mask, with a fresh random key)."""
    return websocket.ABNF.create_frame(payload, opcode).format()


class _StdinError(Exception):
    """Reading the stdin source failed (a local error, not a connection problem)."""


class _Sender:
    """The outgoing side of one exec: stdin on channel 0, then the v5 stdin close, plus control
    replies (pong, close), written from the exec's own loop without ever blocking.

    OpenSSL requires a write that could not finish (``SSLWantWriteError``) to be retried with
    the same buffer, so a frame stays current until it is fully sent and control frames go
    between frames only."""

    def __init__(
        self,
        sock: socket.socket,
        stdin: Stdin | None,
        *,
        v5: bool,
        on_stdin: Progress | None,
    ) -> None:
        self.sock = sock
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8")
        self.source: Any = (
            io.BytesIO(stdin) if isinstance(stdin, (bytes, bytearray, memoryview)) else stdin
        )
        self.close_stdin = v5 and stdin is not None
        if stdin is not None and not v5:
            log.debug("v4.channel.k8s.io negotiated: stdin cannot be closed")
        self.on_stdin = on_stdin
        self.control: collections.deque[bytes] = collections.deque()
        self.frame: memoryview | None = None  # being written
        self.offset = 0  # bytes of ``frame`` written
        self.started = False  # a write of ``frame`` was attempted (TLS may hold part of it)
        self.payload = 0  # stdin bytes in ``frame``, reported once it is sent
        self.stdin_frame = False  # ``frame`` is stdin data or the stdin close
        self.waits_for = 0  # selectors event the last write attempt is waiting for
        self.failed = False

    @property
    def busy(self) -> bool:
        """Something is left to send."""
        return not self.failed and (
            self.frame is not None
            or bool(self.control)
            or self.source is not None
            or self.close_stdin
        )

    def queue_control(self, frame: bytes) -> None:
        self.control.append(frame)

    def abandon_stdin(self) -> None:
        """Stop sending stdin (the command ended); a frame already started is finished."""
        self.source = None
        self.close_stdin = False
        if self.frame is not None and self.stdin_frame and not self.started:
            self.frame = None

    def _load(self) -> bool:
        """Make the next frame current; False when there is nothing to send."""
        payload, stdin_frame = 0, True
        if self.control:
            stdin_frame = False
            frame = self.control.popleft()
        elif self.source is not None:
            try:
                chunk = self.source.read(STDIN_CHUNK)
            except OSError as exc:
                raise _StdinError(exc) from exc
            if not chunk:
                self.source = None
                return self._load()
            frame = _client_frame(b"\x00" + bytes(chunk))
            payload = len(chunk)
        elif self.close_stdin:
            self.close_stdin = False
            frame = _client_frame(bytes([CLOSE, STDIN]))
        else:
            return False
        self.frame, self.offset, self.started = memoryview(frame), 0, False
        self.payload, self.stdin_frame = payload, stdin_frame
        return True

    def send(self, budget: int) -> None:
        """Write frames until the socket would block, nothing is left or ``budget`` bytes went
        out; ``waits_for`` says which readiness a blocked write needs."""
        self.waits_for = 0
        sent = 0
        while sent < budget and not self.failed:
            if self.frame is None and not self._load():
                return
            assert self.frame is not None
            self.started = True
            try:
                n = self.sock.send(self.frame[self.offset :])  # same bytes on every retry
            except ssl.SSLWantReadError:
                self.waits_for = selectors.EVENT_READ
                return
            except (ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
                self.waits_for = selectors.EVENT_WRITE
                return
            except (ssl.SSLError, OSError) as exc:
                # The read side reports what happened to the connection.
                log.debug("sending to the exec stopped: %s", exc)
                self.failed = True
                return
            if not n:
                self.waits_for = selectors.EVENT_WRITE
                return
            self.offset += n
            sent += n
            if self.offset >= len(self.frame):
                self.frame = None
                if self.payload and self.on_stdin is not None:
                    self.on_stdin(self.payload)


class ExecClient:
    """Runs commands in pods through pods/exec; safe to use from several threads."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        spill_dir: SpillDir | None = None,
        max_memory_output: int = MAX_MEMORY_OUTPUT,
    ) -> None:
        self.configuration = api_client.configuration
        self.spill_dir = spill_dir  # None: the process-wide default directory
        self.max_memory_output = max_memory_output  # bytes per stream kept in memory
        self._ssl_context: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    # -- connection setup -------------------------------------------------------------------
    def _context(self) -> ssl.SSLContext:
        with self._lock:
            if self._ssl_context is None:
                self._ssl_context = self._build_context()
            return self._ssl_context

    def _build_context(self) -> ssl.SSLContext:
        cfg = self.configuration
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if cfg.verify_ssl:
            if cfg.ssl_ca_cert:
                ctx.load_verify_locations(cafile=cfg.ssl_ca_cert)
            elif getattr(cfg, "ca_cert_data", None):
                data = cfg.ca_cert_data
                ctx.load_verify_locations(cadata=data if isinstance(data, str) else data.decode())
            else:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
            if cfg.assert_hostname is False:
                ctx.check_hostname = False
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
        return ctx

    def _headers(self) -> list[str]:
        cfg = self.configuration
        if not (cfg.host.startswith("https://") or _is_loopback(cfg.host)):
            return []  # like client-go: no credentials over plain http to another host
        headers = []
        for setting in cfg.auth_settings().values():  # runs refresh_api_key_hook if set
            if setting.get("in") == "header" and setting.get("value"):
                headers.append(f"{setting['key']}: {setting['value']}")
        if not headers and cfg.username and cfg.password:
            headers.append(f"authorization: {cfg.get_basic_auth_token()}")
        return headers

    def _connect(self, url: str, namespace: str, pod: str) -> websocket.WebSocket:
        cfg = self.configuration
        sslopt: dict[str, Any] = {}
        if url.startswith("wss://"):
            sslopt["context"] = self._context()
            if cfg.tls_server_name:
                sslopt["server_hostname"] = cfg.tls_server_name
        options: dict[str, Any] = {"header": self._headers(), "subprotocols": PROTOCOLS}
        if cfg.proxy or cfg.proxy_headers:
            options = websocket_proxycare(options, cfg, url, None)
            options.setdefault("proxy_type", "http")
        ws = websocket.WebSocket(sslopt=sslopt, skip_utf8_validation=True, enable_multithread=True)
        try:
            ws.connect(url, timeout=CONNECT_TIMEOUT, **options)
        except websocket.WebSocketBadStatusException as exc:
            raise self._handshake_error(exc, namespace, pod) from None
        except (websocket.WebSocketException, OSError) as exc:
            raise connection_failure(exc, cfg.host) from None
        return ws

    def _handshake_error(
        self, exc: websocket.WebSocketBadStatusException, namespace: str, pod: str
    ) -> TrainJobError:
        status = int(exc.status_code or 0)
        body = exc.resp_body
        message, _reason, _details = parse_status_body(body)
        if status == 404:
            return PodNotRunningError(
                f"pod {pod} is gone from namespace {namespace}"
                + (f" ({message})" if message else "")
                + "; check the TrainJob with session.status()",
                status=404,
                reason="NotFound",
            )
        if status == 400 and _NOT_RUNNING.search(message):
            return PodNotRunningError(
                f"pod {pod} cannot run commands: {message}; check the TrainJob with "
                "session.status()",
                status=400,
                reason="BadRequest",
            )
        if status == 400:
            return InvalidInputError(
                f"the API server refused to exec in pod {pod}: {message or 'bad request'}; "
                "check the container name",
                status=400,
                reason="BadRequest",
            )
        return map_http_failure(
            status,
            body,
            verb=EXEC_RBAC,
            resource=EXEC_RESOURCE,
            namespace=namespace,
            name=pod,
            host=self.configuration.host,
            http_reason=str(exc.status_message or ""),
        )

    # -- running a command ------------------------------------------------------------------
    def run(
        self,
        namespace: str,
        pod: str,
        argv: Sequence[str],
        *,
        container: str | None = None,
        stdin: Stdin | None = None,
        timeout: float | None = None,
        on_output: OnOutput | None = None,
        on_stdin: Progress | None = None,
        stdout_sink: Sink | None = None,
        stderr_sink: Sink | None = None,
        max_memory_output: int | None = None,
    ) -> ExecResult:
        """Run ``argv`` in ``pod`` and return its output and exit status.

        ``stdin``: bytes, str (UTF-8) or a binary file object read to EOF in chunks (then
        half-closed on v5); ``on_stdin(n)`` is called after each chunk sent. A
        ``stdout_sink``/``stderr_sink`` (callable taking bytes, or a binary file) receives that
        stream's raw bytes instead of the result (no decode, no ``on_output``). Each collected
        stream keeps at most ``max_memory_output`` bytes in memory (default: the client's
        :attr:`max_memory_output`), the rest goes to a spill file (``ExecResult.stdout_path``).
        """
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        url = exec_url(
            self.configuration.host,
            namespace,
            pod,
            argv,
            container=container,
            stdin=stdin is not None,
        )
        # A handshake that failed (5xx, connection error) started nothing: safe to retry.
        ws = with_retries(lambda: self._connect(url, namespace, pod), what=f"exec in pod {pod}")
        collector = _Collector(
            on_output,
            pod=pod,
            limit=self.max_memory_output if max_memory_output is None else max_memory_output,
            spill_dir=self.spill_dir,
            sinks={STDOUT: stdout_sink, STDERR: stderr_sink},
        )
        sender = _Sender(ws.sock, stdin, v5=ws.getsubprotocol() == V5, on_stdin=on_stdin)
        try:
            returncode, message, got_status = self._io_loop(ws, sender, collector, deadline)
        except KeyboardInterrupt as exc:
            collector.flush()
            exc.partial = collector.result(None, started, pod)  # type: ignore[attr-defined]
            raise
        except _StdinError as exc:
            raise exc.__cause__ from None  # type: ignore[misc]
        except TimeoutError:
            collector.flush()
            raise ExecTimeoutError(
                f"the command did not finish within {timeout:g}s; it may still be running in pod "
                f"{pod} (closing the connection does not stop it)",
                partial=collector.result(None, started, pod),
            ) from None
        except (_Lost, OSError) as exc:  # ssl.SSLError is an OSError
            collector.flush()
            raise ConnectionLostError(
                f"the connection to pod {pod} was lost before the command finished ({exc}); "
                f"the command may still be running in the pod: {LOST_HINT}",
                partial=collector.result(None, started, pod),
            ) from None
        finally:
            ws.shutdown()
        collector.flush()
        if got_status and returncode is None:
            raise ApiServerError(
                f"the command could not run in pod {pod}: {message}",
                reason="InternalError",
                partial=collector.result(None, started, pod),
            )
        return collector.result(returncode, started, pod)

    def _io_loop(
        self,
        ws: websocket.WebSocket,
        sender: _Sender,
        collector: _Collector,
        deadline: float | None,
    ) -> tuple[int | None, str, bool]:
        """All socket I/O of one exec, in this thread, until the close frame: read frames and
        write stdin as the socket allows. The socket stays non-blocking; while something is
        left to send, one selector waits for readable or writable, else the read itself waits
        (socket timeout, inside the ssl module: no exception and no select per TLS record).

        Returns ``(returncode, status message, got_status)``; raises ``TimeoutError`` past
        ``deadline`` and :class:`_Lost` / ``OSError`` when the connection breaks."""
        sock = ws.sock
        reader = FrameReader(sock)
        frames = _FrameHandler(collector, sender)
        pending = getattr(sock, "pending", None)  # TLS bytes already decrypted (no select)
        sock.settimeout(0.0)
        selector = selectors.DefaultSelector()
        registered = selectors.EVENT_READ
        selector.register(sock, registered)
        try:
            while True:
                limit = frames.close_by if frames.got_status else deadline
                now = time.monotonic()
                if limit is not None and now >= limit:
                    if frames.got_status:
                        return frames.outcome()
                    raise TimeoutError
                if sender.busy and not sender.waits_for:
                    sender.send(WRITE_BUDGET)
                idle = not sender.busy  # only reading: let the read wait
                status_known = frames.got_status
                wait = (IDLE_WAIT if limit is None else limit - now) if idle else 0.0
                sock.settimeout(wait)
                read_waits_for = 0
                got = 0
                while got < READ_BUDGET:
                    frame = reader.next_frame()
                    if frame is None:
                        try:
                            got += reader.receive()
                        except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                            read_waits_for = selectors.EVENT_READ
                            break
                        except ssl.SSLWantWriteError:
                            read_waits_for = selectors.EVENT_WRITE
                            break
                        except TimeoutError:  # the idle wait ended: look at the clock
                            break
                        if idle and limit is not None:  # output trickling in: keep the limit
                            wait = limit - time.monotonic()
                            if wait <= 0:
                                break
                            sock.settimeout(wait)
                        continue
                    if frames.handle(*frame):  # the close frame
                        self._reply_close(sender, selector)
                        return frames.outcome()
                    if idle and (sender.busy or frames.got_status != status_known):
                        break  # a pong to send, or the status came: stop waiting in reads
                if idle or not read_waits_for or (pending is not None and pending()):
                    continue
                if sender.busy and not sender.waits_for:
                    continue  # more to write right now
                events = read_waits_for | (sender.waits_for if sender.busy else 0)
                if events != registered:
                    selector.modify(sock, events)
                    registered = events
                wait = None if limit is None else max(0.0, limit - time.monotonic())
                ready = 0
                for _key, mask in selector.select(wait):
                    ready |= mask
                if ready & sender.waits_for:
                    sender.waits_for = 0  # retry the blocked write (with the same buffer)
        except (_Lost, OSError):
            if frames.got_status:  # the command's end is known: a broken close does not matter
                return frames.outcome()
            raise
        finally:
            selector.close()

    @staticmethod
    def _reply_close(sender: _Sender, selector: selectors.BaseSelector) -> None:
        """Answer the server's close frame (best effort, briefly): finish a stdin frame that
        is partly written, then send the close."""
        sender.abandon_stdin()
        sender.queue_control(_client_frame(struct.pack("!H", 1000), OP_CLOSE))
        give_up = time.monotonic() + CLOSE_FLUSH
        with contextlib.suppress(OSError, ValueError, KeyError):
            sender.sock.settimeout(0.0)
            selector.modify(sender.sock, selectors.EVENT_WRITE)
            while sender.busy:
                sender.send(WRITE_BUDGET)
                if not sender.busy or sender.waits_for != selectors.EVENT_WRITE:
                    return
                remaining = give_up - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    return
                sender.waits_for = 0


class _FrameHandler:
    """What the frames of one exec mean: output to the collector, the channel-3 status,
    fragments reassembled, pings answered."""

    def __init__(self, collector: _Collector, sender: _Sender) -> None:
        self.collector = collector
        self.sender = sender
        self.returncode: int | None = None
        self.message = ""
        self.got_status = False
        self.close_by = 0.0  # after the status: wait until then for the close frame
        self.fragments: list[Any] = []
        self.fragment_op = OP_BINARY

    def outcome(self) -> tuple[int | None, str, bool]:
        return self.returncode, self.message, self.got_status

    def handle(self, fin: bool, opcode: int, payload: bytes | bytearray | memoryview) -> bool:
        """Act on one frame; True for the close frame (raises :class:`_Lost` when it closes
        abnormally before the status)."""
        if opcode == OP_CONT:
            self.fragments.append(payload)
            if not fin:
                return False
            payload, opcode = b"".join(self.fragments), self.fragment_op
            self.fragments = []
        elif opcode in (OP_TEXT, OP_BINARY) and not fin:
            self.fragments, self.fragment_op = [payload], opcode
            return False
        if opcode in (OP_TEXT, OP_BINARY):
            if not payload:
                return False
            channel = payload[0]
            data = memoryview(payload)[1:]
            if channel in (STDOUT, STDERR):
                if data:
                    self.collector.add(channel, data)
            elif channel == STATUS:
                self.returncode, self.message = parse_exec_status(data)
                self.got_status = True
                self.close_by = time.monotonic() + CLOSE_GRACE
                self.sender.abandon_stdin()  # the command has ended
        elif opcode == OP_CLOSE:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            if not self.got_status and code not in (1000, 1005):
                reason = bytes(payload[2:]).decode("utf-8", "replace")
                self.sender.abandon_stdin()
                raise _Lost(f"WebSocket closed with code {code} {reason}".strip())
            return True
        elif opcode == OP_PING:
            self.sender.queue_control(_client_frame(bytes(payload), OP_PONG))
        return False


__all__ = ["ExecClient", "FrameReader", "exec_url", "parse_exec_status"]
