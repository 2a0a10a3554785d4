"""Server side of ``pods/portforward``: the WebSocket port-forward protocol, as kubelet serves it.

After k8s.io/cri-streaming ``pkg/streaming/portforward/websocket.go`` (``NewV4Options``,
``handleWebSocketStreams``) and k8s.io/streaming ``pkg/httpstream/wsstream/conn.go``:

- Subprotocols ``v4.channel.k8s.io`` (binary), ``v4.base64.channel.k8s.io`` (text frames: the
  channel as an ASCII digit, ``'0' + n``, then the payload in base64) and none (binary): the
  first the client offers that is supported; offering none means "".
- Port index i: data channel 2i, error channel 2i+1. Right after the 101, for every port, its
  number as 2 bytes little-endian, first on the data channel and then on the error channel.
- Every port gets one TCP connection to 127.0.0.1:P for the life of the WebSocket (a pod's
  network is the host's). Client data on channel 2i goes to it (held until it is connected);
  what it sends comes back on channel 2i in chunks of up to ``CHUNK`` bytes.
- A failed connect writes ``error forwarding port P to pod NS/NAME, uid : failed to connect to
  localhost:P inside namespace of pod NS/NAME: dial tcp 127.0.0.1:P: connect: connection
  refused`` on the error channel (cri-streaming's prefix around the text of the real stack's
  node agent, ``devtools/realstack/nodeagent/main.go`` ``PortForward``; kube-apiserver asks
  for ``/portForward/NS/NAME``, so the uid is empty).
- A port's forward ends when its TCP peer closes or the client goes; the TCP connection is then
  closed. Once every port's forward has ended, the WebSocket closes with 1000 (wsstream
  ``Conn.Close``), after everything read was sent. The client closing the WebSocket ends them
  all.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import struct
from collections.abc import Sequence

from aiohttp import WSMsgType, web

from ..core.apierror import status_body

BINARY = "v4.channel.k8s.io"
BASE64 = "v4.base64.channel.k8s.io"
SUPPORTED = (BINARY, BASE64, "")
HOST = "127.0.0.1"
CHUNK = 256 * 1024  # asyncio's selector transports read at most this much at a time
CONNECT_TIMEOUT = 10.0  # the node agent's net.DialTimeout
MAX_INCOMING = 32 << 20
CLOSE_TIMEOUT = 5.0


def go_quote(s: str) -> str:
    """Go's ``%q`` of a plain string (enough for query values)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _parse_uint16(s: str) -> int:
    """Go's ``strconv.ParseUint(s, 10, 16)``; ValueError carries Go's error text."""
    if not s:
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(s)}: invalid syntax")
    n = 0
    for c in s:
        if not "0" <= c <= "9":
            raise ValueError(f"strconv.ParseUint: parsing {go_quote(s)}: invalid syntax")
        n = n * 10 + ord(c) - 48
        if n > 0xFFFF:
            raise ValueError(f"strconv.ParseUint: parsing {go_quote(s)}: value out of range")
    return n


def apiserver_ports(values: Sequence[str]) -> list[int]:
    """The ``ports`` query values as kube-apiserver decodes PodPortForwardOptions
    (apimachinery ``pkg/apis/meta/v1/conversion.go`` ``Convert_Slice_string_To_Slice_int32``:
    repeated and comma-separated values); ValueError carries its message."""
    ports: list[int] = []
    for value in values:
        for v in value.split(","):
            try:
                ports.append(_parse_uint16(v))
            except ValueError as exc:
                raise ValueError(f"cannot convert to []int32: {exc}") from None
    return ports


def kubelet_port_error(ports: Sequence[int]) -> str | None:
    """What cri-streaming's ``NewV4Options`` refuses in the ``port`` parameter kube-apiserver
    sends (``pkg/registry/core/pod/strategy.go`` ``streamParams``: the ports joined by commas,
    no parameter at all when there are none), else None."""
    if not ports:
        return 'query parameter "port" is required'
    if min(ports) < 1:
        return f"port {go_quote(','.join(map(str, ports)))} must be > 0"
    return None


def offered_protocols(request: web.Request) -> list[str]:
    """Subprotocols the client offers, in its order."""
    values = request.headers.getall("Sec-WebSocket-Protocol", [])
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def choose_protocol(offered: Sequence[str]) -> str | None:
    """wsstream ``handshake``: the first offered that is supported ("" when none is offered)."""
    for proto in offered or [""]:
        if proto in SUPPORTED:
            return proto
    return None


def connect_error(pod: str, port: int, exc: BaseException) -> str:
    """The error channel's text for a connect that failed (``pod`` is ``NS/NAME``)."""
    if isinstance(exc, OSError) and exc.errno:
        text = os.strerror(exc.errno)
        reason = f"dial tcp {HOST}:{port}: connect: {text[:1].lower()}{text[1:]}"
    else:
        reason = f"dial tcp {HOST}:{port}: i/o timeout"
    inner = f"failed to connect to localhost:{port} inside namespace of pod {pod}: {reason}"
    return f"error forwarding port {port} to pod {pod}, uid : {inner}"


async def handle_portforward(
    request: web.Request,
    pod: str,
    ports: Sequence[int],
    stopping: asyncio.Event | None = None,
) -> web.StreamResponse:
    """Upgrade to the port-forward WebSocket and forward ``ports`` of ``pod`` (``NS/NAME``)
    until every forward has ended (a 400 Status when no offered subprotocol is supported)."""
    offered = offered_protocols(request)
    protocol = choose_protocol(offered)
    if protocol is None:
        # x/net/websocket answers a bare 403; 400 (as exec_ws) is no RBAC denial look-alike
        message = (
            f"requested protocol(s) are not supported: [{' '.join(offered)}]; "
            f"supports [{' '.join(SUPPORTED)}]"
        )
        return web.json_response(status_body(400, message, "BadRequest"), status=400)
    ws = web.WebSocketResponse(
        protocols=(protocol,) if protocol else (),
        compress=False,
        max_msg_size=MAX_INCOMING,
        timeout=CLOSE_TIMEOUT,
    )
    await ws.prepare(request)
    await _Forwarder(ws, protocol == BASE64, pod, list(ports)).run(stopping)
    return ws


class _Forwarder:
    """One port-forward WebSocket: its ports' TCP connections and the frames between them."""

    def __init__(self, ws: web.WebSocketResponse, b64: bool, pod: str, ports: list[int]) -> None:
        self.ws, self.b64, self.pod, self.ports = ws, b64, pod, ports
        self.writers: list[asyncio.StreamWriter | None] = [None] * len(ports)
        self.connected = [asyncio.Event() for _ in ports]
        self.dead = False  # the WebSocket can no longer be written, or the client is gone

    async def run(self, stopping: asyncio.Event | None) -> None:
        receiver = asyncio.ensure_future(self._receive())
        watcher = asyncio.ensure_future(stopping.wait()) if stopping else None
        if watcher is not None:
            watcher.add_done_callback(lambda _: self._end())
        try:
            for i, port in enumerate(self.ports):
                number = struct.pack("<H", port)
                await self._send(2 * i, number)
                await self._send(2 * i + 1, number)
            await asyncio.gather(*(self._forward(i) for i in range(len(self.ports))))
            if not self.ws.closed:
                with contextlib.suppress(Exception):
                    await self.ws.close(code=1000)
        finally:
            self._end()
            for task in (receiver, watcher):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task

    async def _forward(self, i: int) -> None:
        """Connect port i, then send what its peer writes until EOF or the end."""
        port = self.ports[i]
        if self.dead:  # the client went before this port was connected
            self.connected[i].set()
            return
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(HOST, port, limit=CHUNK), CONNECT_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError) as exc:
            self.connected[i].set()
            await self._send(2 * i + 1, connect_error(self.pod, port, exc).encode())
            return
        self.writers[i] = writer
        self.connected[i].set()
        try:
            while not self.dead:
                try:
                    data = await reader.read(CHUNK)
                except OSError:
                    break
                if not data:
                    break
                await self._send(2 * i, data)
        finally:
            self.writers[i] = None
            writer.close()

    async def _send(self, channel: int, payload: bytes) -> None:
        if self.dead:
            return
        try:
            if self.b64:
                text = base64.b64encode(payload).decode("ascii")
                await self.ws.send_str(chr(48 + (channel & 0xFF)) + text)
            else:
                await self.ws.send_bytes(bytes((channel & 0xFF,)) + payload)
        except (ConnectionError, RuntimeError):
            self._end()

    async def _receive(self) -> None:
        """Client frames to the ports' connections; the client going ends every forward."""
        try:
            async for msg in self.ws:
                if msg.type == WSMsgType.BINARY:
                    data: bytes = msg.data
                elif msg.type == WSMsgType.TEXT:
                    data = msg.data.encode()
                else:
                    break
                if not data:
                    continue
                channel = data[0] - 48 if self.b64 else data[0]
                if channel < 0 or channel % 2 or channel // 2 >= len(self.ports):
                    continue  # error channels are write-only; unknown ones are ignored
                payload = data[1:]
                if self.b64:
                    try:
                        payload = base64.b64decode(payload, validate=True)
                    except ValueError:
                        continue
                await self._write(channel // 2, payload)
        finally:
            self._end()

    async def _write(self, i: int, payload: bytes) -> None:
        await self.connected[i].wait()
        writer = self.writers[i]
        if writer is None or not payload:
            return
        try:
            writer.write(payload)
            await writer.drain()
        except (ConnectionError, RuntimeError, OSError):
            writer.close()

    def _end(self) -> None:
        """Stop every forward: close the ports' connections (their readers then see EOF)."""
        self.dead = True
        for writer in self.writers:
            if writer is not None:
                writer.close()
