"""WebSocket framing for pods/exec: reading server frames from the socket and sending masked
client frames (stdin on channel 0, the v5 stdin close, pong and close replies) without blocking.

The exec channel protocol: one channel byte then payload (0 stdin, 1 stdout, 2 stderr,
3 status, 4 resize; ``[255, 0]`` closes stdin on v5).
"""

from __future__ import annotations

import collections
import io
import logging
import os
import selectors
import socket
import ssl
import struct
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

import websocket

log = logging.getLogger(__name__)


STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


RECV_SIZE = 1 << 18


DIRECT_READ = 1 << 16  # payloads at least this big are read straight into their own buffer


STDIN_CHUNK = 1 << 18  # stdin payload bytes per frame


FAST_MASK = 1 << 16  # payloads this big are masked with numpy's XOR when numpy is there
IMPORT_NUMPY_AFTER = 64 << 20  # bytes masked by translate before numpy is imported for it

_numpy_state: dict[str, Any] = {"module": None, "translated": 0}


def _numpy() -> Any:
    """numpy for masking large payloads (optional: 256 MB take ~0.2 s of ``bytes.translate``,
    ~0.02 s of numpy's XOR, which releases the GIL too): when already loaded, or installed and
    imported once translate has masked ``IMPORT_NUMPY_AFTER`` bytes (the import, ~0.1 s, then
    pays off); else None."""
    module = _numpy_state["module"]
    if module is None:
        module = sys.modules.get("numpy")
        if module is None and _numpy_state["translated"] >= IMPORT_NUMPY_AFTER:
            try:
                import numpy as module
            except Exception:  # not installed, or broken: translate it is
                module = False
        _numpy_state["module"] = module
    return module


Progress = Callable[[int], None]  # bytes of stdin sent in this step


Stdin = bytes | bytearray | memoryview | str | BinaryIO


class ConnectionDropped(Exception):
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
        """Read once from the socket; return the byte count (:class:`ConnectionDropped` at EOF)."""
        if self._direct is not None:
            n = self.sock.recv_into(memoryview(self._direct)[self._got :])
            if not n:
                raise ConnectionDropped("connection closed by the server")
            self._got += n
            return n
        chunk = self.sock.recv(RECV_SIZE)
        if not chunk:
            raise ConnectionDropped("connection closed by the server")
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


_XOR = [bytes(b ^ k for b in range(256)) for k in range(256)]  # byte -> byte ^ k, per k
_KEYS: collections.deque[int] = collections.deque()


def _mask_byte() -> int:
    """A fresh random byte (from the OS, drawn 4096 at a time: one getrandom per 4096 frames)."""
    try:
        return _KEYS.popleft()
    except IndexError:
        _KEYS.extend(os.urandom(4096))
        return _KEYS.popleft()


def client_frame(payload: bytes | memoryview, opcode: int = OP_BINARY) -> bytes | bytearray:
    """A masked client frame (RFC 6455 5.3: every client frame masked, with a fresh key).

    The key is one random byte repeated, so the XOR is a single ``bytes.translate`` (C speed,
    about 8x websocket-client's big-integer XOR, which capped uploads near 200 MB/s). Masking
    exists to keep browser-crafted payloads from poisoning intermediaries (RFC 6455 10.3); it
    is no secrecy (TLS is), and 8 random bits per frame leave nothing to predict here."""
    k = _mask_byte()
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    np = _numpy() if n >= FAST_MASK else None
    if not np:
        _numpy_state["translated"] += n
        return head + bytes((k, k, k, k)) + bytes(payload).translate(_XOR[k])
    frame = bytearray(len(head) + 4 + n)  # numpy's XOR: ~10x bytes.translate
    frame[: len(head)] = head
    frame[len(head) : len(head) + 4] = bytes((k, k, k, k))
    out = np.frombuffer(frame, np.uint8, n, len(head) + 4)
    np.bitwise_xor(np.frombuffer(payload, np.uint8), k, out=out)
    return frame


class StdinError(Exception):
    """Reading the stdin source failed (a local error, not a connection problem); ``error`` is
    the ``OSError`` it raised."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class StdinSender:
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
        self.control: collections.deque[bytes | bytearray] = collections.deque()
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

    def queue_control(self, frame: bytes | bytearray) -> None:
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
        frame: bytes | bytearray
        if self.control:
            stdin_frame = False
            frame = self.control.popleft()
        elif self.source is not None:
            framed = getattr(self.source, "read_frame", None)  # frames built ahead
            try:
                if framed is not None:
                    frame, payload = framed()
                else:
                    chunk = self.source.read(STDIN_CHUNK)
                    frame, payload = client_frame(b"\x00" + bytes(chunk)), len(chunk)
            except OSError as exc:
                raise StdinError(exc) from exc
            if not payload:
                self.source = None
                return self._load()
        elif self.close_stdin:
            self.close_stdin = False
            frame = client_frame(bytes([CLOSE, STDIN]))
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
