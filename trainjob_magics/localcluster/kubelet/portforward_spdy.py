"""Server side of the port-forward tunnel: one WebSocket (subprotocol
``SPDY/3.1+portforward.k8s.io``) carrying a SPDY/3.1 session, every forwarded connection a pair
of streams in it. What ``kubectl port-forward`` 1.31+ and the engine's forward speak.

After kube-apiserver's ``pkg/util/proxy/streamtunnel.go`` (the WebSocket side: any offered
subprotocol with the prefix ``SPDY/3.1+`` and the suffix ``.k8s.io`` selects the tunnel; each
binary message carries SPDY bytes split anywhere) in front of a kubelet's SPDY port-forward
(k8s.io/cri-streaming ``pkg/streaming/portforward/httpstream.go`` over moby/spdystream):

- A SYN_STREAM needs a ``port`` header (1-65535) and a ``streamType`` of ``error`` or ``data``,
  else it is reset (RST_STREAM CANCEL). Accepted streams get an empty SYN_REPLY.
- Streams pair by ``requestID`` (without it, as old clients: the error stream's id, the data
  stream's id minus 2). A complete pair connects to 127.0.0.1:port (the pods' network is the
  host's); a failed connect writes portforward_ws's error text on the error stream.
  (kubelet 1.36 + containerd, recorded: the data stream's FIN comes first, then the error.)
- Then bytes flow both ways on the data stream in DATA frames of at most ``CHUNK`` (io.Copy's
  buffer). The client's FIN half-closes the TCP connection; the pod's EOF closes the data
  stream, then the error stream; a reset ends the pair.
- PINGs are echoed; SETTINGS and WINDOW_UPDATE are ignored: spdystream keeps no flow control.
- The tunnel ends when the client goes, sends GOAWAY, the cluster stops, or the pod's sandbox
  stops (a deleted pod: kubectl then says ``lost connection to pod``).

Plain SPDY (an HTTP ``Upgrade: SPDY/3.1``, kubectl's fallback) is not served.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from aiohttp import WSMsgType, web

from . import spdy
from .portforward_ws import CONNECT_TIMEOUT, HOST, connect_error

PREFIX = "SPDY/3.1+"  # apimachinery util/portforward WebsocketsSPDYTunnelingPrefix
SUFFIX = ".k8s.io"  # KubernetesSuffix
PROTOCOL = "portforward.k8s.io"
SUBPROTOCOL = PREFIX + PROTOCOL
CHUNK = 32 * 1024
MAX_INCOMING = 32 << 20
CLOSE_TIMEOUT = 5.0
STREAM_CREATION_TIMEOUT = 30.0  # the kubelet's default streamCreationTimeout
GONE_POLL = 0.2  # how often a tunnel looks whether its pod's sandbox stopped


def wants_tunnel(offered: Sequence[str]) -> bool:
    """wsstream ``IsWebSocketRequestWithTunnelingProtocol``: a ``SPDY/3.1+`` subprotocol."""
    return any(p.startswith(PREFIX) for p in offered)


async def handle_tunnel(
    request: web.Request,
    pod: str,
    offered: Sequence[str],
    stopping: asyncio.Event | None,
    gone: Callable[[], bool],
) -> web.StreamResponse:
    """Upgrade to the tunnel and serve its session until it ends (``pod`` is ``NS/NAME``)."""
    protocols = [p[len(PREFIX) :] for p in offered if p.startswith(PREFIX) and p.endswith(SUFFIX)]
    if not protocols:
        text = "unable to upgrade: no tunneling spdy protocols provided"
        return web.Response(status=400, text=text + "\n", content_type="text/plain")
    if PROTOCOL not in protocols:  # the kubelet's httpstream.Handshake
        text = (
            "unable to upgrade: unable to negotiate protocol: client supports "
            f"[{' '.join(protocols)}], server supports [{PROTOCOL}]"
        )
        return web.Response(status=403, text=text, content_type="text/plain")
    ws = web.WebSocketResponse(
        protocols=(SUBPROTOCOL,), compress=False, max_msg_size=MAX_INCOMING, timeout=CLOSE_TIMEOUT
    )
    await ws.prepare(request)
    await _Session(ws, pod).run(stopping, gone)
    return ws


class _Pair:
    """One forwarded connection: its two streams and the TCP connection to the pod."""

    def __init__(self, request_id: str, port: int) -> None:
        self.request_id = request_id
        self.port = port
        self.error_sid = 0
        self.data_sid = 0
        self.writer: asyncio.StreamWriter | None = None
        self.connected = asyncio.Event()
        self.reset = False


class _Session:
    """One tunnel's SPDY session."""

    def __init__(self, ws: web.WebSocketResponse, pod: str) -> None:
        self.ws, self.pod = ws, pod
        self.codec = spdy.Codec()
        self.pairs: dict[str, _Pair] = {}
        self.by_sid: dict[int, _Pair] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.dead = False
        self.gone: Callable[[], bool] = lambda: False

    async def run(self, stopping: asyncio.Event | None, gone: Callable[[], bool]) -> None:
        self.gone = gone
        watchers = [asyncio.ensure_future(self._watch_pod(gone))]
        if stopping is not None:
            watchers.append(asyncio.ensure_future(stopping.wait()))
        for watcher in watchers:
            watcher.add_done_callback(lambda _: self._end())
        try:
            await self._receive()
        finally:
            self._end()
            for task in [*watchers, *self.tasks]:
                task.cancel()
            for task in [*watchers, *self.tasks]:
                with contextlib.suppress(BaseException):
                    await task
            if not self.ws.closed:
                with contextlib.suppress(Exception):
                    await self.ws.close(code=1000)

    async def _watch_pod(self, gone: Callable[[], bool]) -> None:
        while not gone():
            await asyncio.sleep(GONE_POLL)

    def _end(self) -> None:
        self.dead = True
        for pair in self.pairs.values():
            if pair.writer is not None:
                pair.writer.close()
            pair.connected.set()
        if not self.ws.closed:
            task = asyncio.ensure_future(self.ws.close(code=1000))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _send(self, frame: bytes) -> None:
        if self.dead:
            return
        try:
            await self.ws.send_bytes(frame)
        except (ConnectionError, RuntimeError):
            self._end()

    # -- the client's frames ----------------------------------------------------------------
    async def _receive(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type != WSMsgType.BINARY:
                    break
                for frame in self.codec.feed(msg.data):
                    if not await self._frame(frame):
                        return
                if self.dead:
                    return
        except spdy.SpdyError:
            return

    async def _frame(self, frame: spdy.Frame) -> bool:
        """Act on one frame; False when the session is over (GOAWAY)."""
        if frame.kind == 0:
            pair = self.by_sid.get(frame.stream_id)
            if pair is not None and frame.stream_id == pair.data_sid:
                await self._to_pod(pair, frame.data, frame.flags & spdy.FLAG_FIN)
        elif frame.kind == spdy.SYN_STREAM:
            await self._syn_stream(frame)
        elif frame.kind == spdy.RST_STREAM:
            pair = self.by_sid.get(frame.stream_id)
            if pair is not None:
                pair.reset = True
                self._forget(pair)
        elif frame.kind == spdy.PING:
            await self._send(spdy.ping(frame.value))
        elif frame.kind == spdy.GOAWAY:
            return False
        return True

    async def _syn_stream(self, frame: spdy.Frame) -> None:
        if self.gone():  # the pod was deleted: its tunnel ends (no new stream to a dead pod)
            self._end()
            return
        sid, headers = frame.stream_id, {k.lower(): v for k, v in frame.headers.items()}
        kind = headers.get("streamtype", "")
        port = headers.get("port", "")
        if not port.isdigit() or not 0 < int(port) < 65536 or kind not in ("error", "data"):
            await self._send(spdy.rst_stream(sid))  # httpStreamReceived's error: Reset()
            return
        await self._send(spdy.syn_reply(self.codec, sid))
        rid = headers.get("requestid") or str(sid if kind == "error" else sid - 2)
        pair = self.pairs.setdefault(rid, _Pair(rid, int(port)))
        if kind == "error":
            pair.error_sid = sid
        else:
            pair.data_sid = sid
        self.by_sid[sid] = pair
        if pair.error_sid and pair.data_sid:
            task = asyncio.ensure_future(self._forward(pair))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _to_pod(self, pair: _Pair, payload: bytes, fin: int) -> None:
        try:  # as spdystream's unbuffered stream: the session waits (for the pair, bounded)
            await asyncio.wait_for(pair.connected.wait(), STREAM_CREATION_TIMEOUT)
        except asyncio.TimeoutError:
            return
        writer = pair.writer
        if writer is None or writer.is_closing():
            return
        try:
            if payload:
                writer.write(payload)
                await writer.drain()
            if fin and writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, RuntimeError, OSError):
            writer.close()

    # -- the pod's side ---------------------------------------------------------------------
    async def _forward(self, pair: _Pair) -> None:
        error = b""
        try:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(HOST, pair.port, limit=CHUNK), CONNECT_TIMEOUT
                )
            except (OSError, asyncio.TimeoutError) as exc:
                pair.connected.set()
                error = connect_error(self.pod, pair.port, exc).encode()
                return
            pair.writer = writer
            pair.connected.set()
            while not self.dead and not pair.reset:
                try:
                    chunk = await reader.read(CHUNK)
                except OSError:
                    break
                if not chunk or pair.reset:
                    break
                await self._send(spdy.data(pair.data_sid, chunk))
        finally:
            if not pair.reset:  # as recorded from kubelet 1.36 + containerd: data, then error
                await self._send(spdy.data(pair.data_sid, fin=True))
                if error:
                    await self._send(spdy.data(pair.error_sid, error))
                await self._send(spdy.data(pair.error_sid, fin=True))
            self._forget(pair)

    def _forget(self, pair: _Pair) -> None:
        if pair.writer is not None:
            pair.writer.close()
        pair.connected.set()
        self.pairs.pop(pair.request_id, None)
        self.by_sid.pop(pair.error_sid, None)
        self.by_sid.pop(pair.data_sid, None)
