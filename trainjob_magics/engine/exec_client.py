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

stdin (bytes, str or a binary file object read in chunks): sent on channel 0, then closed with
``[255, 0]`` when v5 was negotiated. On v4 there is no way to signal EOF: a command that reads
stdin to the end waits until its timeout.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import ipaddress
import json
import logging
import re
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
INLINE_STDIN = 1 << 16  # larger stdin is sent from a helper thread so output keeps flowing
CONNECT_TIMEOUT = 30.0
CLOSE_GRACE = 1.0  # wait this long for the close frame after the status arrived
_NOT_RUNNING = re.compile(
    r"completed pod|current phase|does not have a host|not running|is terminated|"
    r"waiting to start|being deleted|terminating",
    re.IGNORECASE,
)

LOST_HINT = "check with another command"
STDIN_JOIN = 5.0  # seconds to wait for the stdin sender after the command ended

OnOutput = Callable[[str, str], None]
Progress = Callable[[int], None]  # bytes of stdin sent in this step
Stdin = bytes | bytearray | memoryview | str | BinaryIO


class _Lost(Exception):
    """The connection ended without a close frame."""


class FrameReader:
    """Reads WebSocket frames from a connected (TLS) socket with large reads and no copies
    beyond one per payload."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.pos = 0

    def _fill(self, need: int) -> None:
        """Make sure at least ``need`` unread bytes are buffered."""
        while len(self.buf) - self.pos < need:
            chunk = self.sock.recv(RECV_SIZE)
            if not chunk:
                raise _Lost("connection closed by the server")
            if self.pos and self.pos == len(self.buf):
                self.buf = bytearray(chunk)
                self.pos = 0
            else:
                self.buf += chunk

    def _take(self, size: int) -> bytearray | memoryview:
        """Return the next ``size`` payload bytes."""
        available = len(self.buf) - self.pos
        if size >= DIRECT_READ and available < size:
            out = bytearray(size)
            view = memoryview(out)
            view[:available] = self.buf[self.pos :]
            self.buf = bytearray()
            self.pos = 0
            got = available
            while got < size:
                n = self.sock.recv_into(view[got:], size - got)
                if not n:
                    raise _Lost("connection closed by the server")
                got += n
            return out
        self._fill(size)
        start = self.pos
        self.pos += size
        out = self.buf[start : self.pos]
        if self.pos == len(self.buf):
            self.buf.clear()
            self.pos = 0
        elif self.pos > RECV_SIZE:
            del self.buf[: self.pos]
            self.pos = 0
        return out

    def read_frame(self) -> tuple[bool, int, bytearray | memoryview]:
        """Return ``(fin, opcode, payload)`` of the next frame."""
        self._fill(2)
        b0 = self.buf[self.pos]
        b1 = self.buf[self.pos + 1]
        self.pos += 2
        length = b1 & 0x7F
        if length == 126:
            self._fill(2)
            (length,) = struct.unpack_from("!H", self.buf, self.pos)
            self.pos += 2
        elif length == 127:
            self._fill(8)
            (length,) = struct.unpack_from("!Q", self.buf, self.pos)
            self.pos += 8
        mask = None
        if b1 & 0x80:  # servers must not mask, but tolerate it
            self._fill(4)
            mask = bytes(self.buf[self.pos : self.pos + 4])
            self.pos += 4
        payload = self._take(length) if length else bytearray()
        if mask is not None:
            payload = bytearray(websocket.ABNF.mask(mask, bytes(payload)))
        return bool(b0 & 0x80), b0 & 0x0F, payload


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
        sender: threading.Thread | None = None
        try:
            if stdin is not None:
                sender = self._send_stdin(ws, stdin, on_stdin)
            returncode, message, got_status = self._read_loop(
                ws, collector, deadline, pod, started, timeout
            )
        except KeyboardInterrupt as exc:
            collector.flush()
            exc.partial = collector.result(None, started, pod)  # type: ignore[attr-defined]
            raise
        finally:
            ws.shutdown()
            if sender is not None:
                sender.join(timeout=STDIN_JOIN)
        collector.flush()
        if got_status and returncode is None:
            raise ApiServerError(
                f"the command could not run in pod {pod}: {message}",
                reason="InternalError",
                partial=collector.result(None, started, pod),
            )
        return collector.result(returncode, started, pod)

    @staticmethod
    def _send_stdin(
        ws: websocket.WebSocket, stdin: Stdin, on_stdin: Progress | None
    ) -> threading.Thread | None:
        """Send ``stdin`` on channel 0 then half-close it (v5): inline when it is small bytes,
        else from a helper thread so output keeps flowing."""
        v5 = ws.getsubprotocol() == V5
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8")
        inline = isinstance(stdin, (bytes, bytearray, memoryview)) and len(stdin) <= INLINE_STDIN
        source: Any = (
            io.BytesIO(stdin) if isinstance(stdin, (bytes, bytearray, memoryview)) else stdin
        )

        def send() -> None:
            try:
                while chunk := source.read(RECV_SIZE):
                    ws.send_binary(b"\x00" + chunk)
                    if on_stdin is not None:
                        on_stdin(len(chunk))
                if v5:
                    ws.send_binary(bytes([CLOSE, STDIN]))
            except (websocket.WebSocketException, OSError) as exc:
                log.debug("sending stdin stopped: %s", exc)

        if not v5:
            log.debug("v4.channel.k8s.io negotiated: stdin cannot be closed")
        if inline:
            send()
            return None
        thread = threading.Thread(target=send, name="trainjob-exec-stdin", daemon=True)
        thread.start()
        return thread

    def _read_loop(
        self,
        ws: websocket.WebSocket,
        collector: _Collector,
        deadline: float | None,
        pod: str,
        started: float,
        timeout: float | None,
    ) -> tuple[int | None, str, bool]:
        """Read frames until the close frame: ``(returncode, status message, got_status)``."""
        sock = ws.sock
        reader = FrameReader(sock)
        sock.settimeout(None if deadline is None else max(0.001, deadline - time.monotonic()))
        returncode: int | None = None
        message = ""
        got_status = False
        fragments: list[Any] = []
        fragment_op = OP_BINARY
        try:
            while True:
                if deadline is not None and not got_status:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError
                    sock.settimeout(remaining)
                fin, opcode, payload = reader.read_frame()
                if opcode == OP_CONT:
                    fragments.append(payload)
                    if not fin:
                        continue
                    payload, opcode, fragments = b"".join(fragments), fragment_op, []
                elif opcode in (OP_TEXT, OP_BINARY) and not fin:
                    fragments, fragment_op = [payload], opcode
                    continue
                if opcode in (OP_TEXT, OP_BINARY):
                    if not payload:
                        continue
                    channel = payload[0]
                    data = memoryview(payload)[1:]
                    if channel in (STDOUT, STDERR):
                        if data:
                            collector.add(channel, data)
                    elif channel == STATUS:
                        returncode, message = parse_exec_status(data)
                        got_status = True
                        sock.settimeout(CLOSE_GRACE)
                elif opcode == OP_CLOSE:
                    code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                    reason = bytes(payload[2:]).decode("utf-8", "replace")
                    self._reply_close(ws)
                    if not got_status and code not in (1000, 1005):
                        raise _Lost(f"WebSocket closed with code {code} {reason}".strip())
                    return returncode, message, got_status
                elif opcode == OP_PING:
                    ws.pong(bytes(payload))
        except TimeoutError:
            if got_status:
                return returncode, message, got_status
            collector.flush()
            partial = collector.result(None, started, pod)
            raise ExecTimeoutError(
                f"the command did not finish within {timeout:g}s; it may still be running in pod "
                f"{pod} (closing the connection does not stop it)",
                partial=partial,
            ) from None
        except (_Lost, OSError, ssl.SSLError) as exc:
            if got_status:
                return returncode, message, got_status
            collector.flush()
            raise ConnectionLostError(
                f"the connection to pod {pod} was lost before the command finished ({exc}); "
                f"the command may still be running in the pod: {LOST_HINT}",
                partial=collector.result(None, started, pod),
            ) from None

    @staticmethod
    def _reply_close(ws: websocket.WebSocket) -> None:
        with contextlib.suppress(websocket.WebSocketException, OSError):
            ws.send_close()
        ws.shutdown()


__all__ = ["ExecClient", "FrameReader", "exec_url", "parse_exec_status"]
