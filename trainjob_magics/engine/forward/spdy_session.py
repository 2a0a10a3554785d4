"""One SPDY/3.1 session, client side and without I/O: streams, their states, flow control.

The caller feeds the bytes it read (``receive``) and gets events back; what to send piles up in
``outgoing`` (a bounded queue the caller drains onto its transport). Streams the client opens
have odd ids, increasing; PINGs it sends have odd ids.

Flow control (SPDY/3.1 2.6.8): as a receiver we advertise ``recv_window`` per stream (SETTINGS)
and raise the session window to the same, then send WINDOW_UPDATE once half of a window was
consumed (``consumed``), so a peer that honours windows never sends more than that per stream.
As a sender we honour the peer's windows only once it shows it keeps them (a SETTINGS
INITIAL_WINDOW_SIZE or a WINDOW_UPDATE): moby/spdystream, which kubelets and container runtimes
serve port-forward with, ignores flow control altogether and never grants a window, so
enforcing the default 64 KiB against it would stall every upload there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from . import spdy_frames as F

RECV_WINDOW = 4 << 20  # bytes a stream may have unread here (our per-stream buffer bound)
PING_ID_LIMIT = 0x7FFFFFFF


@dataclass
class Stream:
    """One stream's state."""

    id: int
    headers: F.Headers
    replied: bool = False
    sent_fin: bool = False  # our side is closed
    got_fin: bool = False  # the peer's side is closed
    reset: bool = False
    send_window: int = F.DEFAULT_WINDOW
    unacked: int = 0  # consumed since our last WINDOW_UPDATE

    @property
    def closed(self) -> bool:
        return self.reset or (self.sent_fin and self.got_fin)


@dataclass
class Event:
    """What ``receive`` reports. ``kind``: ``reply``, ``data``, ``fin``, ``reset`` (``value``
    is the RST status), ``goaway`` (``value`` the last good id), ``window`` (a stream may send
    again), ``pong`` (``value`` the id)."""

    kind: str
    stream_id: int = 0
    data: bytes | memoryview = b""
    value: int = 0


class SpdySession:
    """The client half of a SPDY/3.1 session over any byte transport."""

    def __init__(self, recv_window: int = RECV_WINDOW) -> None:
        self.codec = F.HeaderCodec()
        self.parser = F.FrameParser(self.codec)
        self.streams: dict[int, Stream] = {}
        self.outgoing: deque[bytes] = deque()
        self.queued = 0  # bytes in ``outgoing``
        self.recv_window = recv_window
        self.peer_flow_control = False  # the peer showed it keeps windows
        self.peer_initial_window = F.DEFAULT_WINDOW
        self.session_send_window = F.DEFAULT_WINDOW
        self.session_unacked = 0
        self.gone_away = False
        self._next_id = 1
        self._next_ping = 1
        self._queue(F.settings({F.SETTINGS_INITIAL_WINDOW_SIZE: recv_window}))
        self._queue(F.window_update(0, recv_window - F.DEFAULT_WINDOW))

    # -- sending ----------------------------------------------------------------------------
    def _queue(self, frame: bytes) -> None:
        self.outgoing.append(frame)
        self.queued += len(frame)

    def take_outgoing(self) -> bytes:
        """Everything queued, as one piece, and the queue emptied."""
        out = b"".join(self.outgoing)
        self.outgoing.clear()
        self.queued = 0
        return out

    def open_stream(self, headers: F.Headers, *, fin: bool = False) -> int:
        """Send SYN_STREAM; the new stream's id."""
        if self.gone_away:
            raise F.SpdyProtocolError("the session is going away")
        sid = self._next_id
        self._next_id += 2
        stream = Stream(sid, dict(headers), send_window=self.peer_initial_window, sent_fin=fin)
        self.streams[sid] = stream
        self._queue(F.syn_stream(self.codec, sid, headers, fin=fin))
        return sid

    def send_allowance(self, sid: int) -> int:
        """Bytes ``sid`` may send now (no limit against a peer without flow control)."""
        stream = self.streams.get(sid)
        if stream is None or stream.sent_fin or stream.reset:
            return 0
        if not self.peer_flow_control:
            return F.MAX_DATA
        return max(0, min(stream.send_window, self.session_send_window, F.MAX_DATA))

    def send_data(self, sid: int, payload: bytes, *, fin: bool = False) -> None:
        """Queue DATA on ``sid`` (``payload`` within ``send_allowance``)."""
        stream = self.streams[sid]
        if stream.sent_fin or stream.reset:
            return
        if self.peer_flow_control:
            stream.send_window -= len(payload)
            self.session_send_window -= len(payload)
        stream.sent_fin = stream.sent_fin or fin
        self._queue(F.data(sid, payload, fin))
        self._forget_if_closed(stream)

    def close_stream(self, sid: int) -> None:
        """Half-close our side (an empty DATA with FIN), as spdystream's ``Stream.Close``."""
        stream = self.streams.get(sid)
        if stream is not None and not stream.sent_fin and not stream.reset:
            self.send_data(sid, b"", fin=True)

    def reset_stream(self, sid: int, status: int = F.CANCEL) -> None:
        """RST_STREAM ``sid`` (nothing if it is already over)."""
        stream = self.streams.pop(sid, None)
        if stream is not None and not stream.closed:
            stream.reset = True
            self._queue(F.rst_stream(sid, status))

    def consumed(self, sid: int, n: int) -> None:
        """``n`` bytes of ``sid`` were delivered: grant the peer as much again, in halves."""
        self.session_unacked += n
        if self.session_unacked >= self.recv_window // 2:
            self._queue(F.window_update(0, self.session_unacked))
            self.session_unacked = 0
        stream = self.streams.get(sid)
        if stream is None or stream.got_fin:
            return
        stream.unacked += n
        if stream.unacked >= self.recv_window // 2:
            self._queue(F.window_update(sid, stream.unacked))
            stream.unacked = 0

    def ping(self) -> int:
        """Send a PING; its id."""
        pid = self._next_ping
        self._next_ping = pid + 2 if pid + 2 < PING_ID_LIMIT else 1
        self._queue(F.ping(pid))
        return pid

    def goaway(self) -> None:
        """Say we open no more streams (the last one the peer opened: none)."""
        if not self.gone_away:
            self.gone_away = True
            self._queue(F.goaway(0))

    # -- receiving --------------------------------------------------------------------------
    def receive(self, chunk: bytes | bytearray | memoryview) -> list[Event]:
        """Feed bytes read from the transport; the events they make (SpdyProtocolError when
        they are not SPDY/3.1)."""
        events: list[Event] = []
        for frame in self.parser.feed(chunk):
            self._frame(frame, events)
        return events

    def _frame(self, frame: F.Frame, events: list[Event]) -> None:
        kind, sid = frame.kind, frame.stream_id
        if kind == F.DATA_KIND:
            stream = self.streams.get(sid)
            if stream is None or stream.reset:
                return  # late data of a stream we reset
            if frame.data:
                events.append(Event("data", sid, frame.data))
            if frame.fin:
                self._got_fin(stream, events)
        elif kind == F.SYN_REPLY:
            stream = self.streams.get(sid)
            if stream is not None and not stream.replied:
                stream.replied = True
                events.append(Event("reply", sid))
                if frame.fin:
                    self._got_fin(stream, events)
        elif kind == F.HEADERS:
            stream = self.streams.get(sid)
            if stream is not None and frame.fin:
                self._got_fin(stream, events)
        elif kind == F.RST_STREAM:
            stream = self.streams.pop(sid, None)
            if stream is not None:
                stream.reset = True
                events.append(Event("reset", sid, value=frame.value))
        elif kind == F.SYN_STREAM:
            self._queue(F.rst_stream(sid, F.REFUSED_STREAM))  # a client serves no streams
        elif kind == F.PING:
            if frame.value % 2 == 0:
                self._queue(F.ping(frame.value))  # the server's: echo it
            else:
                events.append(Event("pong", value=frame.value))
        elif kind == F.SETTINGS:
            self._settings(frame.settings, events)
        elif kind == F.WINDOW_UPDATE:
            self._window_update(sid, frame.value, events)
        elif kind == F.GOAWAY:
            self.gone_away = True
            events.append(Event("goaway", value=sid))

    def _got_fin(self, stream: Stream, events: list[Event]) -> None:
        if not stream.got_fin:
            stream.got_fin = True
            events.append(Event("fin", stream.id))
        self._forget_if_closed(stream)

    def _forget_if_closed(self, stream: Stream) -> None:
        if stream.closed:
            self.streams.pop(stream.id, None)

    def _settings(self, values: dict[int, int], events: list[Event]) -> None:
        size = values.get(F.SETTINGS_INITIAL_WINDOW_SIZE)
        if size is None:
            return
        self.peer_flow_control = True
        delta, self.peer_initial_window = size - self.peer_initial_window, size
        for stream in self.streams.values():
            stream.send_window += delta
            events.append(Event("window", stream.id))

    def _window_update(self, sid: int, delta: int, events: list[Event]) -> None:
        if not self.peer_flow_control:
            self.peer_flow_control = True
            # until now nothing was counted: start from full windows
            self.session_send_window = F.DEFAULT_WINDOW
            for stream in self.streams.values():
                stream.send_window = self.peer_initial_window
        if sid == 0:
            self.session_send_window += delta
            events.extend(Event("window", s) for s in self.streams)
            return
        target = self.streams.get(sid)
        if target is not None:
            target.send_window += delta
            events.append(Event("window", sid))


__all__ = ["RECV_WINDOW", "Event", "SpdySession", "Stream"]
