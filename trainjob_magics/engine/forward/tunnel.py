"""One forwarded connection: a local TCP socket relayed to a pod's port over one pods/portforward
WebSocket (``v4.channel.k8s.io``), in one thread.

The protocol (the kubelet's, k8s.io/cri-streaming ``pkg/streaming/portforward/websocket.go``):
for the one port asked, channel 0 carries data and channel 1 errors; the server first writes the
port number (2 bytes, little-endian) on each. A connection the pod refuses comes back as text on
channel 1, then the server closes. WebSocket port-forward has no half-close: when the local
client stops sending, the whole stream ends (``kubectl port-forward`` over SPDY can half-close).

Both sockets stay non-blocking and all I/O of the TLS connection happens in this thread
(OpenSSL allows no SSL_read and SSL_write on one connection from two threads at once). Each
direction buffers a bounded amount, so a slow reader on either side slows the other.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import struct
import time
from collections import deque
from urllib.parse import quote

from ..exec.client import ws_base
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
from ..exec.liveness import SILENT_AFTER, Liveness

log = logging.getLogger(__name__)

DATA, ERROR = 0, 1  # the channels of the first (only) port

LOCAL_READ = 1 << 18  # bytes read from the local client at once

HIGH_WATER = 4 << 20  # bytes buffered towards one side before reading from the other stops

CLOSE_WAIT = 2.0  # seconds to wait for the server's close reply once we closed

IDLE_POLL = 1.0  # the loop looks at the stop flag at least this often

# reads from the pod's side per wake-up while it has data: a TLS read returns one record (16 KiB
# at most), so one select per read cost a third of the relay's time on a 256 MB download
READS_PER_WAKE = 16


def portforward_url(host: str, namespace: str, pod: str, port: int) -> str:
    """WebSocket URL of pods/portforward for one port."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/portforward"
    return f"{ws_base(host)}{path}?ports={int(port)}"


def has_pending(sock: object) -> bool:
    """``sock`` holds received bytes ``select`` cannot see (TLS: decrypted or still to be)."""
    pending = getattr(sock, "pending", None)
    return bool(pending is not None and pending())


def wants_write(sock: object) -> bool:
    """``sock`` (a :class:`~..exec.biotls.BioSocket`) holds ciphertext the kernel did not take."""
    return bool(getattr(sock, "wants_write", False))


def flush_tls(sock: object) -> None:
    """Send the ciphertext ``sock`` still holds, as far as the kernel takes it now."""
    flush = getattr(sock, "flush", None)
    if flush is not None:
        flush()


def reset(sock: socket.socket) -> None:
    """Close with an RST, so the local client sees the connection fail (not a clean end)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class Tunnel:
    """Relays one local connection to one pod port until either side ends or :meth:`stop`."""

    def __init__(
        self,
        local: socket.socket,
        remote: ExecSocket,
        silent_after: float = SILENT_AFTER,
        first: bytes = b"",
    ) -> None:
        """``first``: the local client's bytes already read (sent to the pod before any)."""
        self.local = local
        # pings while the pod's side sends nothing; silent past the bound: the client gets a
        # reset (an SSH session or a dashboard's idle keep-alive answers the pings meanwhile)
        self._alive = Liveness(silent_after)
        self.remote = remote.sock
        self.reader = FrameReader(remote.sock)
        self.reader.buf = bytearray(remote.leftover)
        self.error = ""  # what the server said on the error channel
        self.sent = 0  # bytes delivered to the local client
        self.received = 0  # bytes of the local client sent on to the pod
        self._preamble = {DATA: 2, ERROR: 2}  # port-number bytes still to skip per channel
        self._channel = DATA  # the channel of a fragmented message's continuation frames
        self._to_local = bytearray()
        self._to_local_pos = 0
        self._to_remote: deque[bytes | bytearray] = deque()
        self._frame: memoryview | None = None  # being written (TLS retries need the same bytes)
        self._frame_pos = 0
        self._queued = 0  # bytes in _to_remote and _frame
        self._local_eof = False
        self._remote_done = False  # the server closed (or dropped)
        self._closing_at: float | None = None  # when we sent our close frame
        self._stopped = False
        self._dropped = False
        if first:
            self.received += len(first)
            self._queue(client_frame(b"\x00" + first))

    def stop(self) -> None:
        """End the relay soon (the local socket's shutdown wakes the loop)."""
        self._stopped = True
        with contextlib.suppress(OSError):
            self.local.shutdown(socket.SHUT_RDWR)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        """Relay until the stream ends; then close both sockets."""
        self.local.setblocking(False)
        self.remote.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(self.remote, selectors.EVENT_READ)
        sel.register(self.local, selectors.EVENT_READ)
        watching = {self.remote: selectors.EVENT_READ, self.local: selectors.EVENT_READ}
        try:
            self._take_frames()
            while not self._finished():
                if self._stopped:
                    with contextlib.suppress(OSError):
                        self._send_close()
                    self._dropped = True  # cut short: the local client sees a reset
                    break
                if len(self._to_local) - self._to_local_pos >= HIGH_WATER:
                    self._alive.heard()  # not reading the pod's side (a slow client): no wait
                ping = self._alive.check(time.monotonic()) if not self._remote_done else None
                if ping is not None:
                    self._queue(ping)
                    self._send_remote()
                self._watch(sel, watching)
                ready: list[object]  # compared by identity only
                if watching[self.remote] & selectors.EVENT_READ and has_pending(self.remote):
                    ready = [self.remote]
                else:
                    ready = [key.fileobj for key, _ in sel.select(IDLE_POLL)]
                for sock in ready:
                    if sock is self.remote:
                        self._remote_io()
                    else:
                        self._local_io()
                self._flush_local()
        except (OSError, ConnectionDropped) as exc:
            log.debug("forwarded connection ended: %s", exc)
            self._dropped = True
        finally:
            sel.close()
            self._close()

    def _finished(self) -> bool:
        if self._dropped:
            return True
        if self._remote_done:
            return self._to_local_pos >= len(self._to_local) or self._local_eof
        if self._closing_at is not None:
            return time.monotonic() - self._closing_at > CLOSE_WAIT
        return False

    def _watch(self, sel: selectors.BaseSelector, watching: dict[socket.socket, int]) -> None:
        remote = 0
        if not self._remote_done and len(self._to_local) - self._to_local_pos < HIGH_WATER:
            remote |= selectors.EVENT_READ
        if self._frame is not None or self._to_remote or wants_write(self.remote):
            remote |= selectors.EVENT_WRITE
        local = 0
        if not self._local_eof and self._closing_at is None and self._queued < HIGH_WATER:
            local |= selectors.EVENT_READ
        if self._to_local_pos < len(self._to_local):
            local |= selectors.EVENT_WRITE
        for sock, events in ((self.remote, remote), (self.local, local)):
            if watching[sock] == events:
                continue
            if not watching[sock]:
                sel.register(sock, events)
            elif not events:
                sel.unregister(sock)
            else:
                sel.modify(sock, events)
            watching[sock] = events

    # -- the pod's side ---------------------------------------------------------------------
    def _remote_io(self) -> None:
        for _ in range(READS_PER_WAKE):
            if self._remote_done or len(self._to_local) - self._to_local_pos >= HIGH_WATER:
                break
            try:
                self.reader.receive()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                self._take_frames()
                break
            except ConnectionDropped:
                if self._closing_at is None:
                    raise
                self._remote_done = True  # closed after our close frame: done
            self._alive.heard()
            self._take_frames()
            self._flush_local()
        self._send_remote()

    def _take_frames(self) -> None:
        while len(self._to_local) - self._to_local_pos < HIGH_WATER:
            frame = self.reader.next_frame()
            if frame is None:
                return
            _fin, opcode, payload = frame
            if opcode in (OP_BINARY, OP_CONT):
                if opcode == OP_BINARY:
                    if not payload:
                        continue
                    self._channel, payload = payload[0], memoryview(payload)[1:]
                self._channel_data(self._channel, payload)
            elif opcode == OP_CLOSE:
                self._remote_done = True
                if self._closing_at is None:
                    self._queue(client_frame(bytes(payload[:2]), OP_CLOSE))
                    self._send_remote()
                return
            elif opcode == OP_PING:
                self._queue(client_frame(bytes(payload), OP_PONG))

    def _channel_data(self, channel: int, payload: memoryview | bytearray) -> None:
        skip = self._preamble.get(channel, 0)
        if skip:
            taken = min(skip, len(payload))
            self._preamble[channel] = skip - taken
            payload = payload[taken:]
        if not payload:
            return
        if channel == DATA:
            if self._to_local_pos >= len(self._to_local) and not self._local_eof:
                payload = payload[self._send_local(payload) :]  # nothing queued: no copy
            if payload:
                self._to_local += payload
        elif channel == ERROR:
            self.error += bytes(payload).decode("utf-8", "replace")

    def _queue(self, frame: bytes | bytearray) -> None:
        self._to_remote.append(frame)
        self._queued += len(frame)

    def _send_remote(self) -> None:
        while True:
            if self._frame is None:
                if not self._to_remote:
                    flush_tls(self.remote)
                    return
                self._frame, self._frame_pos = memoryview(self._to_remote.popleft()), 0
            try:
                n = self.remote.send(self._frame[self._frame_pos :])
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return
            self._frame_pos += n
            self._queued -= n
            if self._frame_pos < len(self._frame):
                return
            self._frame = None

    def _send_close(self) -> None:
        self._closing_at = time.monotonic()
        self._queue(client_frame(struct.pack("!H", 1000), OP_CLOSE))
        with contextlib.suppress(OSError):
            self._send_remote()

    # -- the local client's side ------------------------------------------------------------
    def _local_io(self) -> None:
        if not self._local_eof and self._closing_at is None and self._queued < HIGH_WATER:
            try:
                data = self.local.recv(LOCAL_READ)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:  # reset by the client
                data = b""
            if data == b"":
                self._local_eof = True
                self._send_close()
            elif data:
                self.received += len(data)
                self._queue(client_frame(b"\x00" + data))
                self._send_remote()
        self._flush_local()

    def _send_local(self, data: memoryview | bytearray) -> int:
        """Send what the local client takes now; the bytes done with (all when it went away)."""
        try:
            n = self.local.send(data)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:  # the client went away
            self._local_eof = True
            if self._closing_at is None:
                self._send_close()
            return len(data)
        self.sent += n
        return n

    def _flush_local(self) -> None:
        pending = len(self._to_local) - self._to_local_pos
        if not pending or self._local_eof:
            return
        n = self._send_local(memoryview(self._to_local)[self._to_local_pos :])
        if self._local_eof:
            return
        self._to_local_pos += n
        if self._to_local_pos >= len(self._to_local):
            self._to_local.clear()
            self._to_local_pos = 0
        elif self._to_local_pos > HIGH_WATER:
            del self._to_local[: self._to_local_pos]
            self._to_local_pos = 0

    def _close(self) -> None:
        with contextlib.suppress(OSError):
            self.remote.close()
        if self.error or self._dropped:
            reset(self.local)  # the pod refused, or the stream broke: not a clean end
            return
        with contextlib.suppress(OSError):
            self.local.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.local.close()


__all__ = ["Tunnel", "portforward_url", "reset"]
