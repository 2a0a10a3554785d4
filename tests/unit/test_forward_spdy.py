"""SPDY/3.1 framing, header compression and the client session of the port-forward tunnel,
against bytes recorded from real ``kubectl port-forward`` (v1.32) sessions.

Both recordings were made by ``tests/helpers/spdy_recorder.py``: a TLS-terminating relay between
kubectl and the API server that keeps both byte streams and takes the SPDY bytes out of the
WebSocket messages. ``kubectl_portforward_realstack.json``: kube-apiserver v1.36.3 serving the
tunnel in front of a real kubelet v1.36.3 and containerd v2.2.10 (``devtools.realstack``).
``kubectl_portforward_local.json``: the local cluster's tunnel server, which kubectl accepted
(the page bodies came through it). kubectl's side is Go's: moby/spdystream framing, Go's zlib
with SPDY/3's dictionary.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from trainjob_magics.engine.forward import spdy_frames as F
from trainjob_magics.engine.forward.spdy_session import SpdySession
from trainjob_magics.localcluster.kubelet import spdy as server_spdy

DATA = Path(__file__).parent / "data"
RECORDINGS = {
    name: json.loads((DATA / f"kubectl_portforward_{name}.json").read_text())
    for name in ("realstack", "local")
}


@pytest.fixture(params=sorted(RECORDINGS))
def rec(request: pytest.FixtureRequest) -> dict[str, Any]:
    return RECORDINGS[request.param]


def recorded(section: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(section[key])


def frames(data: bytes) -> list[F.Frame]:
    return F.FrameParser(F.HeaderCodec()).feed(data)


def test_the_dictionary_is_spdy3s() -> None:
    # SPDY/3 2.6.10.1: 1423 bytes; zlib names a dictionary by its adler32 in the stream header
    assert len(F.DICTIONARY) == 1423
    assert zlib.adler32(F.DICTIONARY) == 3821447106
    assert server_spdy.DICTIONARY == F.DICTIONARY


def test_kubectls_frames_parse_whole_and_byte_by_byte(rec: dict[str, Any]) -> None:
    data = recorded(rec, "client_to_server")
    whole = frames(data)
    parser = F.FrameParser(F.HeaderCodec())
    one_by_one = [f for i in range(len(data)) for f in parser.feed(data[i : i + 1])]
    assert whole == one_by_one
    assert parser.buffered == 0


def test_kubectl_opens_an_error_then_a_data_stream_per_connection(rec: dict[str, Any]) -> None:
    port = str(rec["port"])
    got = frames(recorded(rec, "client_to_server"))
    syns = [f for f in got if f.kind == F.SYN_STREAM]
    assert [f.stream_id for f in syns] == [1, 3, 5, 7, 9, 11]  # odd, increasing
    for i, (error, data) in enumerate(zip(syns[::2], syns[1::2], strict=True)):
        assert error.headers == {"streamtype": "error", "port": port, "requestid": str(i)}
        assert data.headers == {"streamtype": "data", "port": port, "requestid": str(i)}
    # the error stream is half-closed at once (an empty DATA with FIN), before the data stream
    assert (got[1].kind, got[1].stream_id, got[1].fin, got[1].data) == (F.DATA_KIND, 1, True, b"")
    request = got[3]
    assert request.kind == F.DATA_KIND and request.stream_id == 3
    assert bytes(request.data).startswith(b"GET / HTTP/1.1\r\n")
    # after the response, kubectl resets the data stream (CANCEL) or half-closes it
    ends = [f for f in got if f.stream_id == 3 and (f.kind == F.RST_STREAM or f.fin)]
    assert ends
    assert ends[0].fin or (ends[0].kind, ends[0].value) == (F.RST_STREAM, F.CANCEL)


def test_header_blocks_share_one_zlib_stream_per_direction(rec: dict[str, Any]) -> None:
    data = recorded(rec, "client_to_server")
    first, second = (f for f in frames(data) if f.kind == F.SYN_STREAM and f.stream_id in (1, 3))
    assert first.headers and second.headers
    # the second block alone does not decompress: it refers back into the first's window
    length = struct.unpack_from("!I", data, 4)[0] & 0xFFFFFF
    rest = data[8 + length :]
    rest = rest[8 + (struct.unpack_from("!I", rest, 4)[0] & 0xFFFFFF) :]  # skip the DATA FIN
    assert struct.unpack_from("!HH", rest)[1] == F.SYN_STREAM
    with pytest.raises(F.SpdyProtocolError):
        F.HeaderCodec().decode(rest[18 : 8 + (struct.unpack_from("!I", rest, 4)[0] & 0xFFFFFF)])


def test_our_session_says_what_kubectl_says_for_a_connection(rec: dict[str, Any]) -> None:
    port = str(rec["port"])
    kubectl = [f for f in frames(recorded(rec, "client_to_server")) if f.stream_id in (1, 3)][:4]
    session = SpdySession()
    session.take_outgoing()  # SETTINGS and the session window: ours, kubectl sends none
    headers = {"streamType": "error", "port": port, "requestID": "0"}
    error = session.open_stream(headers)
    session.close_stream(error)
    data = session.open_stream({**headers, "streamType": "data"})
    session.send_data(data, bytes(kubectl[3].data))
    ours = frames(session.take_outgoing())
    assert [(f.kind, f.flags, f.stream_id, f.headers, f.data) for f in ours] == [
        (f.kind, f.flags, f.stream_id, f.headers, f.data) for f in kubectl
    ]


def test_the_servers_recorded_answers_as_session_events(rec: dict[str, Any]) -> None:
    session = SpdySession()
    port = str(rec["port"])
    error = session.open_stream({"streamType": "error", "port": port, "requestID": "0"})
    session.close_stream(error)
    data = session.open_stream({"streamType": "data", "port": port, "requestID": "0"})
    events = session.receive(recorded(rec, "server_to_client"))
    mine = [(e.kind, e.stream_id) for e in events if e.stream_id in (error, data)]
    assert mine[:2] == [("reply", 1), ("reply", 3)]
    assert ("fin", 1) in mine and ("fin", 3) in mine
    body = b"".join(bytes(e.data) for e in events if e.kind == "data" and e.stream_id == data)
    assert body.startswith(b"HTTP/1.0 200 OK") and body.endswith(b"recorded page")
    assert rec["bodies"] == ["recorded page"] * 3
    assert error not in session.streams  # both sides closed: forgotten


def test_a_refused_connection_is_said_on_the_error_stream(rec: dict[str, Any]) -> None:
    refused = rec["refused"]
    session = SpdySession()
    headers = {"streamType": "error", "port": str(refused["port"]), "requestID": "0"}
    error = session.open_stream(headers)
    session.close_stream(error)
    session.open_stream({**headers, "streamType": "data"})
    events = session.receive(recorded(refused, "server_to_client"))
    text = b"".join(bytes(e.data) for e in events if e.kind == "data" and e.stream_id == error)
    assert b"connect: connection refused" in text
    # kubectl gives up on the whole session after an error: GOAWAY
    assert frames(recorded(refused, "client_to_server"))[-1].kind == F.GOAWAY


def test_no_flow_control_against_a_peer_that_keeps_none() -> None:
    session = SpdySession()
    sid = session.open_stream({"streamType": "data", "port": "80", "requestID": "0"})
    for _ in range(20):  # 5 MB: far past SPDY's default 64 KiB window
        assert session.send_allowance(sid) == F.MAX_DATA
        session.send_data(sid, b"x" * 256 * 1024)
    assert session.send_allowance(sid) == F.MAX_DATA


def test_windows_are_kept_once_the_peer_shows_it_keeps_them() -> None:
    session = SpdySession()
    sid = session.open_stream({"streamType": "data", "port": "80", "requestID": "0"})
    session.receive(F.settings({F.SETTINGS_INITIAL_WINDOW_SIZE: 1000}))
    assert session.send_allowance(sid) == 1000
    session.send_data(sid, b"x" * 600)
    assert session.send_allowance(sid) == 400
    events = session.receive(F.window_update(sid, 600))
    assert [(e.kind, e.stream_id) for e in events] == [("window", sid)]
    assert session.send_allowance(sid) == 1000
    session.send_data(sid, b"x" * 1000)
    assert session.send_allowance(sid) == 0
    # the session window (64 KiB by default) bounds every stream together
    other = session.open_stream({"streamType": "data", "port": "80", "requestID": "1"})
    assert session.send_allowance(other) == 1000
    assert session.session_send_window == F.DEFAULT_WINDOW - 1600


def test_we_grant_the_peer_window_as_bytes_are_delivered() -> None:
    session = SpdySession(recv_window=1 << 20)
    start = frames(session.take_outgoing())
    assert start[0].kind == F.SETTINGS
    assert start[0].settings == {F.SETTINGS_INITIAL_WINDOW_SIZE: 1 << 20}
    assert (start[1].kind, start[1].stream_id) == (F.WINDOW_UPDATE, 0)
    assert start[1].value == (1 << 20) - F.DEFAULT_WINDOW
    sid = session.open_stream({"streamType": "data", "port": "80", "requestID": "0"})
    session.take_outgoing()
    session.consumed(sid, (1 << 19) - 1)
    assert session.queued == 0  # under half a window: nothing yet
    session.consumed(sid, 1)
    updates = frames(session.take_outgoing())
    assert [(f.kind, f.stream_id, f.value) for f in updates] == [
        (F.WINDOW_UPDATE, 0, 1 << 19),
        (F.WINDOW_UPDATE, sid, 1 << 19),
    ]


def test_pings_resets_and_streams_the_server_opens() -> None:
    session = SpdySession()
    session.take_outgoing()
    sid = session.open_stream({"streamType": "data", "port": "80", "requestID": "0"})
    session.take_outgoing()
    events = session.receive(F.ping(2) + F.rst_stream(sid, F.REFUSED_STREAM))
    assert [(e.kind, e.stream_id, e.value) for e in events] == [("reset", sid, F.REFUSED_STREAM)]
    mine = session.ping()
    events = session.receive(F.ping(mine) + F.syn_stream(F.HeaderCodec(), 2, {"a": "b"}))
    assert [(e.kind, e.value) for e in events] == [("pong", mine)]
    answers = frames(session.take_outgoing())
    # the server's PING (even id) echoed; its SYN_STREAM refused (a client serves no streams)
    assert [(f.kind, f.stream_id, f.value) for f in answers] == [
        (F.PING, 0, 2),
        (F.PING, 0, mine),
        (F.RST_STREAM, 2, F.REFUSED_STREAM),
    ]
    assert sid not in session.streams


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (struct.pack("!HHI", 0x8002, F.PING, 4) + b"\0\0\0\1", "version 2"),
        (struct.pack("!HHI", 0x8003, F.SYN_REPLY, 2 << 20), "control frame of"),
        (F.control(F.SYN_REPLY, 0, struct.pack("!I", 1) + b"not zlib"), "bad header block"),
        (F.control(F.RST_STREAM, 0, b"\0\0"), "too short"),
    ],
)
def test_what_is_not_spdy_ends_the_session(data: bytes, match: str) -> None:
    with pytest.raises(F.SpdyProtocolError, match=match):
        SpdySession().receive(data)


def test_the_local_cluster_reads_our_session_and_skips_flow_control() -> None:
    session = SpdySession()
    sid = session.open_stream({"streamType": "data", "port": "80", "requestID": "7"})
    session.send_data(sid, b"hello", fin=True)
    parsed = server_spdy.Codec().feed(session.take_outgoing())
    # SETTINGS and WINDOW_UPDATE are skipped, as spdystream does
    assert [(f.kind, f.stream_id, f.data, f.flags) for f in parsed] == [
        (server_spdy.SYN_STREAM, sid, b"", 0),
        (0, sid, b"hello", server_spdy.FLAG_FIN),
    ]
    assert parsed[0].headers == {"streamtype": "data", "port": "80", "requestid": "7"}


def test_goaway_ends_new_streams_not_old_ones() -> None:
    session = SpdySession()
    sid = session.open_stream({"streamType": "data", "port": "80", "requestID": "0"})
    events = session.receive(F.goaway(0))
    assert [(e.kind, e.value) for e in events] == [("goaway", 0)]
    with pytest.raises(F.SpdyProtocolError, match="going away"):
        session.open_stream({"streamType": "data", "port": "80", "requestID": "1"})
    events = session.receive(F.data(sid, b"still here", fin=True))
    assert [(e.kind, bytes(e.data)) for e in events] == [("data", b"still here"), ("fin", b"")]


def test_a_stream_error_of_a_gone_sandbox_moves_the_connection_but_a_refusal_does_not() -> None:
    """containerd's answers (seen on the real stack's node after `kubectl delete pod`): a gone
    sandbox lets the unanswered connection go to the pod in its place; nothing listening does
    not (the pod is there)."""
    from trainjob_magics.engine.forward.spdy_tunnel import POD_GONE

    sandbox = "927814687218c2546b97f8c4b87b4a590ce61d2b87227b2b716d567f654d82b9"
    gone = [
        f"error forwarding port 8000 to pod {sandbox}, uid : network namespace for sandbox "
        f'"{sandbox}" is closed',
        f'error forwarding port 8000 to pod {sandbox}, uid : failed to find sandbox "{sandbox}" '
        "in store: not found",
        "sandbox container is not running",
    ]
    refused = (
        f"error forwarding port 8000 to pod {sandbox}, uid : failed to execute portforward in "
        'network namespace "/var/run/netns/cni-1": failed to connect to localhost:8000 inside '
        f'namespace "{sandbox}", IPv4: dial tcp4 127.0.0.1:8000: connect: connection refused '
        "IPv6 dial tcp6 [::1]:8000: connect: connection refused "
    )
    assert all(POD_GONE.search(text) for text in gone)
    assert not POD_GONE.search(refused)
