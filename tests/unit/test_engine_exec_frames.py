"""Exec protocol pieces: frame reading over a real socket, status parsing, URL building and
incremental UTF-8 decoding."""

from __future__ import annotations

import json
import selectors
import socket
import struct
import threading
import time
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import pytest
import websocket

from trainjob_magics.engine.exec.client import (
    Collector,
    ConnectionDropped,
    ExecClient,
    FrameReader,
    StdinSender,
    client_frame,
    exec_url,
)
from trainjob_magics.engine.exec.streams import CLOSE_GRACE, parse_exec_status


def frame(payload: bytes, opcode: int = 2, fin: bool = True) -> bytes:
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


def feed(data: bytes, piece: int) -> socket.socket:
    """A socket whose peer sends ``data`` in ``piece``-byte writes, then closes."""
    a, b = socket.socketpair()

    def writer() -> None:
        for i in range(0, len(data), piece):
            b.sendall(data[i : i + piece])
        b.close()

    threading.Thread(target=writer, daemon=True).start()
    return a


@pytest.mark.parametrize("piece", [1, 7, 4096, 1 << 20])
def test_frames_of_every_size_survive_any_split(piece: int) -> None:
    payloads = [b"\x01", b"\x01" + b"a" * 125, b"\x02" + b"b" * 126, b"\x01" + b"c" * 70000]
    data = b"".join(frame(p) for p in payloads) + frame(struct.pack("!H", 1000), opcode=8)
    sock = feed(data, piece)
    reader = FrameReader(sock)
    got = [bytes(reader.read_frame()[2]) for _ in payloads]
    assert got == payloads
    fin, op, payload = reader.read_frame()
    assert (fin, op, bytes(payload)) == (True, 8, struct.pack("!H", 1000))
    with pytest.raises(ConnectionDropped):
        reader.read_frame()
    sock.close()


def test_large_frame_read_directly() -> None:
    big = b"\x01" + bytes(range(256)) * 20000
    sock = feed(frame(big), 65536)
    assert bytes(FrameReader(sock).read_frame()[2]) == big
    sock.close()


def test_fragmented_message_flags() -> None:
    sock = feed(frame(b"\x01ab", fin=False) + frame(b"cd", opcode=0), 3)
    reader = FrameReader(sock)
    assert reader.read_frame()[:2] == (False, 2)
    fin, op, payload = reader.read_frame()
    assert (fin, op, bytes(payload)) == (True, 0, b"cd")
    sock.close()


def test_truncated_frame_is_a_lost_connection() -> None:
    sock = feed(frame(b"\x01" + b"x" * 1000)[:500], 100)
    with pytest.raises(ConnectionDropped):
        FrameReader(sock).read_frame()
    sock.close()


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"metadata": {}, "status": "Success"}, (0, "")),
        (
            {
                "status": "Failure",
                "reason": "NonZeroExitCode",
                "message": "command terminated with non-zero exit code: exit status 3",
                "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
            },
            (3, "command terminated with non-zero exit code: exit status 3"),
        ),
        (
            {"status": "Failure", "reason": "InternalError", "message": "exec: not found"},
            (None, "exec: not found"),
        ),
        (
            {
                "status": "Failure",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": "255"}]},
            },
            (255, "NonZeroExitCode"),
        ),
    ],
)
def test_parse_exec_status(status: dict, expected: tuple) -> None:
    assert parse_exec_status(json.dumps(status).encode()) == expected


def test_parse_exec_status_garbage() -> None:
    assert parse_exec_status(b"not json") == (None, "not json")


def test_exec_url_keeps_argv_elements_byte_exact() -> None:
    argv = ["sh", "-c", "echo \"$(hostname)\" 'a b' \\n & x=1;\n cat <<EOF\nü€\nEOF"]
    url = exec_url("https://127.0.0.1:6443/", "ns", "pod-0", argv, container="node", stdin=True)
    parts = urlsplit(url)
    assert parts.scheme == "wss" and parts.path == "/api/v1/namespaces/ns/pods/pod-0/exec"
    query = parse_qsl(parts.query, keep_blank_values=True)
    assert [v for k, v in query if k == "command"] == argv
    assert dict((k, v) for k, v in query if k != "command") == {
        "container": "node",
        "stdin": "true",
        "stdout": "true",
        "stderr": "true",
        "tty": "false",
    }
    assert exec_url("http://h:1", "n", "p", ["true"], container=None, stdin=False).startswith(
        "ws://h:1/"
    )


def test_incremental_decoding_keeps_split_utf8() -> None:
    text = "héllo wörld € 𝄞 日本語"
    data = text.encode()
    seen: list[tuple[str, str]] = []
    collector = Collector(lambda stream, chunk: seen.append((stream, chunk)))
    for i in range(len(data)):  # one byte per frame: every multi-byte character is split
        collector.add(1, memoryview(data[i : i + 1]))
    collector.add(2, memoryview(b"\xe2\x82"))  # truncated euro sign on stderr
    collector.flush()
    assert "".join(c for s, c in seen if s == "stdout") == text
    assert "\ufffd" not in "".join(c for s, c in seen if s == "stdout")
    assert [c for s, c in seen if s == "stderr"] == ["\ufffd"]
    result = collector.result(0, 0.0, "p")
    assert result.stdout == text and result.stdout_bytes == data
    assert result.stderr_bytes == b"\xe2\x82" and result.stderr == "\ufffd"
    assert result.ok


def test_invalid_utf8_is_replaced_but_bytes_kept() -> None:
    collector = Collector(None)
    collector.add(1, memoryview(b"ok\xff\xfe\x00end"))
    result = collector.result(None, 0.0, "p")
    assert result.stdout == "ok\ufffd\ufffd\x00end"
    assert result.stdout_bytes == b"ok\xff\xfe\x00end"
    assert result.returncode is None and not result.ok


def unmask_frames(data: bytes) -> list[tuple[int, bytes, bool]]:
    """``(opcode, payload, masked)`` of each client frame in ``data``."""
    out, pos = [], 0
    while pos < len(data):
        b0, b1 = data[pos], data[pos + 1]
        n, pos = b1 & 0x7F, pos + 2
        if n == 126:
            (n,), pos = struct.unpack_from("!H", data, pos), pos + 2
        elif n == 127:
            (n,), pos = struct.unpack_from("!Q", data, pos), pos + 8
        key = data[pos : pos + 4] if b1 & 0x80 else b"\0\0\0\0"
        pos += 4 if b1 & 0x80 else 0
        payload = websocket.ABNF.mask(key, data[pos : pos + n])
        out.append((b0 & 0x0F, payload, bool(b1 & 0x80)))
        pos += n
    return out


def drain(sender: StdinSender, a: socket.socket, b: socket.socket) -> list[tuple[int, bytes, bool]]:
    """Read ``b`` while ``sender`` writes into ``a`` until it is idle, then close both ends;
    the frames received."""
    received = bytearray()
    b.settimeout(5)
    while sender.busy:
        received += b.recv(1 << 20)
        sender.send(1 << 30)
    a.close()
    while chunk := b.recv(1 << 20):
        received += chunk
    b.close()
    return unmask_frames(bytes(received))


def test_sender_never_blocks_and_frames_stdin_masked() -> None:
    """A peer that reads nothing: ``send`` returns waiting for writability instead of blocking;
    once the peer drains, every stdin byte arrives in masked frames, then the v5 close."""
    a, b = socket.socketpair()
    a.setblocking(False)
    data = bytes(range(256)) * 8192  # 2 MiB: more than the socket buffers hold
    progress: list[int] = []
    sender = StdinSender(a, data, v5=True, on_stdin=progress.append)
    sender.send(1 << 30)
    assert sender.busy and sender.waits_for == selectors.EVENT_WRITE
    frames = drain(sender, a, b)
    assert all(masked and op == 2 for op, _payload, masked in frames)
    assert frames[-1][1] == bytes([255, 0])
    assert all(p[0] == 0 for _op, p, _m in frames[:-1])
    assert b"".join(p[1:] for _op, p, _m in frames[:-1]) == data
    assert sum(progress) == len(data)


def test_sender_abandon_keeps_a_started_frame_whole() -> None:
    """Once a frame is partly written it is finished even when stdin is abandoned, so the
    close reply that follows is not spliced into it."""
    a, b = socket.socketpair()
    a.setblocking(False)
    sender = StdinSender(a, bytes(4 << 20), v5=True, on_stdin=None)
    sender.send(1 << 30)
    assert sender.frame is not None and sender.started
    sender.abandon_stdin()
    sender.queue_control(client_frame(struct.pack("!H", 1000), 8))
    frames = drain(sender, a, b)
    assert [op for op, _p, _m in frames][-1] == 8
    assert frames[-1][1] == b"\x03\xe8"
    assert all(op == 2 and p[0] == 0 for op, p, _m in frames[:-1])


def test_status_without_close_frame_ends_after_the_grace() -> None:
    """The server sends the status but never the close frame (nor closes): the loop returns
    after CLOSE_GRACE, not after the (absent) deadline."""
    a, b = socket.socketpair()
    status = json.dumps({"metadata": {}, "status": "Success"}).encode()
    b.sendall(frame(b"\x01") + frame(b"\x01hi\n") + frame(b"\x03" + status))
    collector = Collector(None)
    started = time.monotonic()
    outcome = object.__new__(ExecClient)._io_loop(
        SimpleNamespace(sock=a, leftover=b""),
        StdinSender(a, None, v5=True, on_stdin=None),
        collector,
        None,
    )
    assert outcome == (0, "", True)
    assert time.monotonic() - started < CLOSE_GRACE + 1
    assert collector.result(0, 0.0, "p").stdout == "hi\n"
    a.close()
    b.close()


def test_full_duplex_loop_with_a_slow_echo_peer() -> None:
    """A peer that echoes stdin back only after a pause, then sends the status and the close:
    the loop writes while it reads, answers the close, and every byte comes back."""
    a, b = socket.socketpair()
    data = bytes(range(256)) * 16384  # 4 MiB: far more than the socket buffers
    status = json.dumps({"metadata": {}, "status": "Success"}).encode()
    replies: list[bytes] = []
    errors: list[BaseException] = []  # the peer's failures, asserted in this thread

    def peer() -> None:
        try:
            serve()
        except BaseException as exc:
            errors.append(exc)
        finally:
            b.close()

    def serve() -> None:
        time.sleep(0.3)  # read nothing at first: the client's writes must not block it
        buf = bytearray()
        while True:
            chunk = b.recv(1 << 16)
            if not chunk:
                return
            buf += chunk
            last = _last_frame_start(buf)
            if last >= 0 and unmask_frames(bytes(buf[last:]))[0][1] == bytes([255, 0]):
                break
        frames = unmask_frames(bytes(buf))
        for _op, payload, _m in frames[:-1]:
            b.sendall(frame(b"\x01" + payload[1:]))
        b.sendall(frame(b"\x03" + status) + frame(struct.pack("!H", 1000), opcode=8))
        b.settimeout(2)
        replies.append(b.recv(64))  # our close reply

    thread = threading.Thread(target=peer, daemon=True)
    thread.start()
    collector = Collector(None)
    outcome = object.__new__(ExecClient)._io_loop(
        SimpleNamespace(sock=a, leftover=b""),
        StdinSender(a, data, v5=True, on_stdin=None),
        collector,
        None,
    )
    thread.join(10)
    a.close()
    assert not thread.is_alive() and errors == []
    assert outcome == (0, "", True)
    assert collector.result(0, 0.0, "p").stdout_bytes == data
    close_reply = unmask_frames(replies[0])
    assert close_reply and close_reply[0][0] == 8 and close_reply[0][2]  # a masked close frame


def _last_frame_start(buf: bytes | bytearray) -> int:
    """Offset of the last frame when ``buf`` ends on a frame boundary, else -1."""
    pos = last = 0
    while pos < len(buf):
        if len(buf) - pos < 2:
            return -1
        b1 = buf[pos + 1]
        n, head = b1 & 0x7F, 2
        if n == 126:
            if len(buf) - pos < 4:
                return -1
            (n,), head = struct.unpack_from("!H", buf, pos + 2), 4
        elif n == 127:
            if len(buf) - pos < 10:
                return -1
            (n,), head = struct.unpack_from("!Q", buf, pos + 2), 10
        last = pos
        pos += head + (4 if b1 & 0x80 else 0) + n
    return last if pos == len(buf) and buf else -1
