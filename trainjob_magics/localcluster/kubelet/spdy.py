"""The SPDY/3.1 framing a kubelet's port-forward session needs (moby/spdystream's ``spdy``
package): frame heads, the zlib-compressed header blocks, and parsing a byte stream that a
WebSocket tunnel splits anywhere. Unknown control frames (SETTINGS, WINDOW_UPDATE) are skipped,
as spdystream does: it keeps no flow control.
"""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass, field

SYN_STREAM, SYN_REPLY, RST_STREAM, PING, GOAWAY = 1, 2, 3, 6, 7
FLAG_FIN = 0x01
PROTOCOL_ERROR, CANCEL = 1, 5
MAX_FRAME = 1 << 24  # the length field's range
MAX_HEADERS = 1 << 20

# SPDY/3 section 2.6.10.1's zlib dictionary (1423 bytes, adler32 3821447106), deflated
DICTIONARY = zlib.decompress(
    base64.b64decode(
        "eNplVNty2zYQ1dSylEmTtEl+AM8tGYMk6Did8YN7cet03GQad/oMgSsKMQggIKhLvr67oOQq7YwkHhzs5eyFmkwm"
        "c+ejdrafTCbTFciGnt71EZ8nfqDHrAEDERCdxiAVgZlUCjxdPhtRrlYy9EDMN3sGrHKNtu0RZaRtB9lShKd7KiAF"
        "lPxk5E+lMW6TDIa4ckF/liSPCCXVCnLlbAzOIPEYoQW1v35CF2BjvpA9Bfr2cD7S8cAdCXn2wIFt4+oLK6cOyb8+"
        "cF1TJy37Y5J/nD3uPJ2njUwdm0KUlHkGW49SEc0R6ZBKni6D61Lfx34/0su8k1GRiOeEUfdSQ5P32qa2P0XSOgsP"
        "VuRxkPAS8WD/72NkHx9Ckc9RWU86uc2XLmxkaEjRzAfZdhLRCx/cdpfTELAsrcZyXv7LHo/m9KBhHmAJAQJ1LEAM"
        "aLqM6TjrIawT+ipFmuMqaZOI5whtj37Ho5oPvg2yIdPHA/rmOC1LTZquZdjRvqw16ZyjdLuf7maz+a/gWQcolco+"
        "adN2zvoo45BqLTln736nGCisHyt59Nvd3fuz4lVBHkMwqSfDwmhFQnDBcf/cvU6y7gF8Lo1ep0TYj1bbgvOCFyV9"
        "ypLXJT+vOK94WfGq4qLidUXMa8FLwWvBzwXhC8HfiIKLohBFKYpKFEIUtSjORfG65mXNRU2hKvaHs/nV2HusAhOz"
        "G4vT69IcSi7QgP00LmLFC3br1tCw94AGFimzE1jxj7Jhf8KnAfoo0OYvexgmNAJTXLuw0E0DVqRwEYnBNjU63mDc"
        "YKVhH9Ik2S8huFBjCLK66byBDpMA2lbJRCug6Gscs1wYeCstu4YFu5WBXfmAzx17O1j8GnY1tOjiI3unIoZbs59B"
        "Mc5/SB8sw2bsboCM/Q0NotWQseugM/ZBRvwZ8PbX2zu1Guw93kfYxrNV7EymO9yZM2/bPfroD6jVy0x6b/T4Ipxt"
        "0fqLM/l/T2yK5o3UdoQfsZ5eBe1jNq6FD3qNq0bvEUa+bD9rnzWwNMhlfaNW+//FyyEu84vDQfcuv7io3+RFRnz2"
        "XQb20yV/9Q/jxqfC"
    )
)


class SpdyError(Exception):
    """The bytes are not SPDY/3.1; the session ends."""


@dataclass
class Frame:
    """``kind`` 0 for DATA, else the control type; ``value`` RST status or PING id."""

    kind: int
    flags: int = 0
    stream_id: int = 0
    data: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    value: int = 0


class Codec:
    """One session's header compression (ours out) and decompression (the client's in)."""

    def __init__(self) -> None:
        self._out = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, DICTIONARY)
        self._in = zlib.decompressobj(zdict=DICTIONARY)
        self._buf = bytearray()

    def encode(self, headers: dict[str, str]) -> bytes:
        raw = [struct.pack("!I", len(headers))]
        for name, value in headers.items():
            n, v = name.lower().encode(), value.encode()
            raw += [struct.pack("!I", len(n)), n, struct.pack("!I", len(v)), v]
        return self._out.compress(b"".join(raw)) + self._out.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, block: bytes) -> dict[str, str]:
        try:
            raw = self._in.decompress(block, MAX_HEADERS)
            (count,) = struct.unpack_from("!I", raw)
            pos, headers = 4, {}
            for _ in range(count):
                (n,) = struct.unpack_from("!I", raw, pos)
                name = raw[pos + 4 : pos + 4 + n].decode()
                (m,) = struct.unpack_from("!I", raw, pos + 4 + n)
                headers[name] = raw[pos + 8 + n : pos + 8 + n + m].decode()
                pos += 8 + n + m
        except (zlib.error, struct.error, UnicodeDecodeError) as exc:
            raise SpdyError(f"bad header block: {exc}") from None
        return headers

    def feed(self, chunk: bytes) -> list[Frame]:
        """The frames completed by ``chunk`` of the client's byte stream."""
        self._buf += chunk
        buf, pos, frames = self._buf, 0, []
        while len(buf) - pos >= 8:
            word, flags_len = struct.unpack_from("!II", buf, pos)
            flags, length = flags_len >> 24, flags_len & 0xFFFFFF
            if len(buf) - pos < 8 + length:
                break
            payload = bytes(buf[pos + 8 : pos + 8 + length])
            pos += 8 + length
            if not word & 0x80000000:
                frames.append(Frame(0, flags, word, payload))
                continue
            if (word >> 16) & 0x7FFF != 3:
                raise SpdyError(f"unsupported SPDY version {(word >> 16) & 0x7FFF}")
            kind = word & 0xFFFF
            if kind == SYN_STREAM and length >= 10:
                sid = struct.unpack_from("!I", payload)[0] & 0x7FFFFFFF
                frames.append(Frame(kind, flags, sid, headers=self.decode(payload[10:])))
            elif kind == RST_STREAM and length >= 8:
                sid, status = struct.unpack_from("!II", payload)
                frames.append(Frame(kind, flags, sid & 0x7FFFFFFF, value=status))
            elif kind == PING and length >= 4:
                frames.append(Frame(kind, flags, value=struct.unpack_from("!I", payload)[0]))
            elif kind == GOAWAY:
                frames.append(Frame(kind, flags))
        del buf[:pos]
        return frames


def control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack("!HHI", 0x8003, kind, flags << 24 | len(payload)) + payload


def syn_reply(codec: Codec, sid: int) -> bytes:
    """spdystream's ``SendReply(http.Header{}, false)``: an empty header block."""
    return control(SYN_REPLY, 0, struct.pack("!I", sid) + codec.encode({}))


def data(sid: int, payload: bytes = b"", fin: bool = False) -> bytes:
    return struct.pack("!II", sid, (FLAG_FIN if fin else 0) << 24 | len(payload)) + payload


def rst_stream(sid: int, status: int = CANCEL) -> bytes:
    return control(RST_STREAM, 0, struct.pack("!II", sid, status))


def ping(ping_id: int) -> bytes:
    return control(PING, 0, struct.pack("!I", ping_id))
