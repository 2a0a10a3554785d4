"""Exec protocol pieces: frame reading over a real socket, status parsing, URL building and
incremental UTF-8 decoding."""

from __future__ import annotations

import json
import socket
import struct
import threading
from urllib.parse import parse_qsl, urlsplit

import pytest

from trainjob_magics.engine.exec_client import (
    FrameReader,
    _Collector,
    _Lost,
    exec_url,
    parse_exec_status,
)


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
    with pytest.raises(_Lost):
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
    with pytest.raises(_Lost):
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
    collector = _Collector(lambda stream, chunk: seen.append((stream, chunk)))
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
    collector = _Collector(None)
    collector.add(1, memoryview(b"ok\xff\xfe\x00end"))
    result = collector.result(None, 0.0, "p")
    assert result.stdout == "ok\ufffd\ufffd\x00end"
    assert result.stdout_bytes == b"ok\xff\xfe\x00end"
    assert result.returncode is None and not result.ok
