"""SPDY/3.1 framing: encoding and parsing frames, and the zlib-compressed header blocks.

What ``kubectl port-forward`` speaks inside its one connection (client-go
``tools/portforward``, apimachinery ``util/httpstream/spdy``, framed by moby/spdystream's
``spdy`` package). A control frame is ``0x8003`` (control bit, version 3), the type, then flags
(8 bits) and length (24 bits); a data frame is the stream id (31 bits), then flags and length.
Header blocks (SYN_STREAM, SYN_REPLY, HEADERS) are ``uint32`` counted name/value pairs, names
lower-case, values of one name joined by NUL, compressed by one zlib stream per direction and
session with SPDY/3's dictionary (each block ends with a sync flush).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

VERSION = 3

DATA_KIND = 0  # Frame.kind of a DATA frame
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS = 1, 2, 3, 4
PING, GOAWAY, HEADERS, WINDOW_UPDATE = 6, 7, 8, 9

FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02

# RST_STREAM status codes
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, UNSUPPORTED_VERSION = 1, 2, 3, 4
CANCEL, INTERNAL_ERROR, FLOW_CONTROL_ERROR, STREAM_IN_USE = 5, 6, 7, 8
STREAM_ALREADY_CLOSED = 9

SETTINGS_INITIAL_WINDOW_SIZE = 7

DEFAULT_WINDOW = 64 * 1024  # SPDY/3.1's initial stream and session window
MAX_DATA = (1 << 24) - 1  # a frame's length field
MAX_CONTROL = 1 << 20  # larger control frames are refused (no real peer sends them)
MAX_HEADER_BYTES = 1 << 20  # a decompressed header block

_WORDS = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
]
_TAIL = (
    "origin100101201202205206300302303304305306307402405406407408409410411412413414415416417"
    "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
    "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
    "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec"
    " 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,"
    "image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,public"
    "privatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
# SPDY/3 section 2.6.10.1: length-prefixed words, then "origin" (also length-prefixed) and text
DICTIONARY = (
    b"".join(struct.pack("!I", len(w)) + w.encode() for w in _WORDS)
    + struct.pack("!I", 6)
    + _TAIL.encode()
)

Headers = dict[str, str]


class SpdyProtocolError(Exception):
    """The peer sent something that is not SPDY/3.1 (the session cannot go on)."""


@dataclass
class Frame:
    """One parsed frame. ``kind`` is 0 for DATA, else the control type; ``value`` is the
    RST/GOAWAY status, PING id or WINDOW_UPDATE delta; ``last_good`` GOAWAY's stream id."""

    kind: int
    flags: int = 0
    stream_id: int = 0
    data: bytes | memoryview = b""
    headers: Headers = field(default_factory=dict)
    value: int = 0
    settings: dict[int, int] = field(default_factory=dict)

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


class HeaderCodec:
    """The two zlib streams of one session's header blocks (ours out, the peer's in)."""

    def __init__(self) -> None:
        self._out = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, DICTIONARY)
        self._in = zlib.decompressobj(zdict=DICTIONARY)

    def encode(self, headers: Headers) -> bytes:
        raw = [struct.pack("!I", len(headers))]
        for name, value in headers.items():
            n, v = name.lower().encode(), value.encode()
            raw += [struct.pack("!I", len(n)), n, struct.pack("!I", len(v)), v]
        return self._out.compress(b"".join(raw)) + self._out.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, block: bytes) -> Headers:
        try:
            raw = self._in.decompress(block, MAX_HEADER_BYTES)
        except zlib.error as exc:
            raise SpdyProtocolError(f"bad header block: {exc}") from None
        if self._in.unconsumed_tail:
            raise SpdyProtocolError("header block too large")
        return parse_header_block(raw)


def parse_header_block(raw: bytes) -> Headers:
    """A decompressed header block as a dict (values of one name stay NUL-joined)."""
    try:
        (count,) = struct.unpack_from("!I", raw, 0)
        pos, headers = 4, {}
        for _ in range(count):
            (n,) = struct.unpack_from("!I", raw, pos)
            name = raw[pos + 4 : pos + 4 + n].decode()
            pos += 4 + n
            (n,) = struct.unpack_from("!I", raw, pos)
            headers[name] = raw[pos + 4 : pos + 4 + n].decode()
            pos += 4 + n
    except (struct.error, UnicodeDecodeError) as exc:
        raise SpdyProtocolError(f"bad header block: {exc}") from None
    if pos != len(raw):
        raise SpdyProtocolError("bad header block: trailing bytes")
    return headers


# -- encoding -------------------------------------------------------------------------------
def control(kind: int, flags: int, payload: bytes) -> bytes:
    """A control frame of ``kind`` around ``payload``."""
    return struct.pack("!HHI", 0x8000 | VERSION, kind, flags << 24 | len(payload)) + payload


def data_head(stream_id: int, length: int, fin: bool = False) -> bytes:
    """The 8 bytes before ``length`` bytes of data on ``stream_id``."""
    return struct.pack("!II", stream_id & 0x7FFFFFFF, (FLAG_FIN if fin else 0) << 24 | length)


def data(stream_id: int, payload: bytes = b"", fin: bool = False) -> bytes:
    """A whole DATA frame (``payload`` at most MAX_DATA bytes)."""
    return data_head(stream_id, len(payload), fin) + payload


def syn_stream(
    codec: HeaderCodec, stream_id: int, headers: Headers, *, fin: bool = False, priority: int = 0
) -> bytes:
    """Open ``stream_id`` (no associated stream, slot 0)."""
    head = struct.pack("!IIBB", stream_id, 0, (priority & 7) << 5, 0)
    return control(SYN_STREAM, FLAG_FIN if fin else 0, head + codec.encode(headers))


def syn_reply(codec: HeaderCodec, stream_id: int, headers: Headers, *, fin: bool = False) -> bytes:
    """Accept the peer's ``stream_id``."""
    payload = struct.pack("!I", stream_id) + codec.encode(headers)
    return control(SYN_REPLY, FLAG_FIN if fin else 0, payload)


def rst_stream(stream_id: int, status: int = CANCEL) -> bytes:
    return control(RST_STREAM, 0, struct.pack("!II", stream_id, status))


def settings(values: dict[int, int]) -> bytes:
    body = b"".join(struct.pack("!II", key & 0xFFFFFF, value) for key, value in values.items())
    return control(SETTINGS, 0, struct.pack("!I", len(values)) + body)


def ping(ping_id: int) -> bytes:
    return control(PING, 0, struct.pack("!I", ping_id))


def goaway(last_good: int, status: int = 0) -> bytes:
    return control(GOAWAY, 0, struct.pack("!II", last_good, status))


def window_update(stream_id: int, delta: int) -> bytes:
    return control(WINDOW_UPDATE, 0, struct.pack("!II", stream_id, delta))


# -- parsing --------------------------------------------------------------------------------
class FrameParser:
    """Frames out of a byte stream fed in any pieces (a WebSocket message may hold part of a
    frame, or several)."""

    def __init__(self, codec: HeaderCodec) -> None:
        self.codec = codec
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[Frame]:
        """Take ``chunk``; return the frames now complete. A DATA frame's ``data`` is a view
        into ``chunk`` (no copy): the caller must not change ``chunk`` afterwards."""
        buf: bytes | bytearray | memoryview
        if self._buf:
            self._buf += chunk
            buf, self._buf = self._buf, bytearray()  # views into it stay valid: never changed
        else:
            buf = chunk
        view = memoryview(buf)
        pos, frames, end = 0, [], len(view)
        while end - pos >= 8:
            word, flags_len = struct.unpack_from("!II", view, pos)
            flags, length = flags_len >> 24, flags_len & 0xFFFFFF
            if word & 0x80000000 and length > MAX_CONTROL:
                raise SpdyProtocolError(f"control frame of {length} bytes")
            if end - pos < 8 + length:
                break
            payload = view[pos + 8 : pos + 8 + length]
            pos += 8 + length
            if word & 0x80000000:
                frames.append(self._control(word, flags, bytes(payload)))
            else:
                frames.append(Frame(0, flags, word & 0x7FFFFFFF, payload))
        if pos < end:
            self._buf = bytearray(view[pos:])
        return frames

    def _control(self, word: int, flags: int, payload: bytes) -> Frame:
        version, kind = (word >> 16) & 0x7FFF, word & 0xFFFF
        if version != VERSION:
            raise SpdyProtocolError(f"SPDY version {version}, not {VERSION}")
        try:
            if kind == SYN_STREAM:
                (sid,) = struct.unpack_from("!I", payload)
                return Frame(kind, flags, sid & 0x7FFFFFFF, headers=self.codec.decode(payload[10:]))
            if kind in (SYN_REPLY, HEADERS):
                (sid,) = struct.unpack_from("!I", payload)
                return Frame(kind, flags, sid & 0x7FFFFFFF, headers=self.codec.decode(payload[4:]))
            if kind in (RST_STREAM, WINDOW_UPDATE, GOAWAY):
                sid, value = struct.unpack_from("!II", payload)
                return Frame(kind, flags, sid & 0x7FFFFFFF, value=value & 0x7FFFFFFF)
            if kind == PING:
                return Frame(kind, flags, value=struct.unpack_from("!I", payload)[0])
            if kind == SETTINGS:
                (count,) = struct.unpack_from("!I", payload)
                pairs = [struct.unpack_from("!II", payload, 4 + 8 * i) for i in range(count)]
                return Frame(kind, flags, settings={k & 0xFFFFFF: v for k, v in pairs})
        except struct.error:
            raise SpdyProtocolError(f"control frame {kind} too short") from None
        return Frame(kind, flags)  # unknown types are ignored (SPDY/3 2.2.1)


__all__ = [
    "CANCEL",
    "DATA_KIND",
    "DEFAULT_WINDOW",
    "DICTIONARY",
    "FLAG_FIN",
    "GOAWAY",
    "HEADERS",
    "MAX_DATA",
    "PING",
    "PROTOCOL_ERROR",
    "REFUSED_STREAM",
    "RST_STREAM",
    "SETTINGS",
    "SETTINGS_INITIAL_WINDOW_SIZE",
    "SYN_REPLY",
    "SYN_STREAM",
    "WINDOW_UPDATE",
    "Frame",
    "FrameParser",
    "HeaderCodec",
    "Headers",
    "SpdyProtocolError",
    "control",
    "data",
    "data_head",
    "goaway",
    "parse_header_block",
    "ping",
    "rst_stream",
    "settings",
    "syn_reply",
    "syn_stream",
    "window_update",
]
