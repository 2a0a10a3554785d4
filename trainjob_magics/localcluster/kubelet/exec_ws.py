"""Server side of ``pods/exec``: the v5/v4 channel WebSocket protocol, as kubelet speaks it.

Protocol (see ``/work/shared/reference.md`` section 3):

- Subprotocols ``v5.channel.k8s.io`` (chosen whenever offered) and ``v4.channel.k8s.io``. A
  request offering neither gets HTTP 400 with a Status body. (A real kubelet answers a bare 403
  from its WebSocket handshake; 400 keeps clients from mistaking it for an RBAC denial.)
- ``handle_upstream_error``: with ``LocalCluster(exec_errors="translated")``, an exec into a
  container that is not running is answered like a 1.30+ apiserver's stream translator does
  (101, ready frame, InternalError Status on channel 3, close 1000) instead of HTTP 400.
- Binary messages: one channel byte + payload. 0 stdin, 1 stdout, 2 stderr, 3 status, 4 resize,
  255 close (v5 only: ``[255, 0]`` closes the process's stdin).
- Right after the 101 an empty stdout frame ``b"\\x01"``; at the end a metav1.Status on channel
  3, then a close with code 1000. The exec ends when the process has exited AND its stdout/stderr
  reached EOF (like containerd, which waits for the IO copy: a background child that keeps the
  pipe open keeps the exec open).
- stdout and stderr are forwarded chunk by chunk as the process writes them, in the order it
  wrote them across the two streams (``ordered_output.py``), not one stream after the other.
- An exec that cannot start (executable not found, permission denied) gets the Status that
  containerd + kubelet produce: ``InternalError``, code 500, message
  ``Internal error occurred: error executing command in container: failed to exec in container:
  failed to start exec "<id>": OCI runtime exec failed: exec failed: unable to start container
  process: exec: "foo": executable file not found in $PATH: unknown``.
- stdin: v5 closes it on ``[255, 0]``; v4 (no close message) closes it only when the client
  closes or drops the WebSocket. Disconnects never kill the process: output is then drained and
  discarded until the process ends.
- tty=true runs the process on a pseudo-terminal (stderr is merged into it, as kubelet bypasses
  stderr when tty is set); channel 4 ``{"Width":W,"Height":H}`` resizes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
from typing import Any

from aiohttp import WSMsgType, web

from ..core.apierror import status_body
from .ordered_output import OrderedOutput
from .processes import PodSandbox, describe_spawn_error, exit_code, spawn

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
SUPPORTED = (V5, V4)
STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
CHUNK = 64 * 1024
MAX_INCOMING = 32 << 20  # x/net/websocket's default MaxPayloadBytes
CLOSE_TIMEOUT = 5.0

_background: set[asyncio.Task[Any]] = set()


def offered_protocols(request: web.Request) -> list[str]:
    """Subprotocols the client offers, in its order."""
    values = request.headers.getall("Sec-WebSocket-Protocol", [])
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def choose_protocol(offered: list[str]) -> str | None:
    """v5 when offered, else v4, else None."""
    for proto in SUPPORTED:
        if proto in offered:
            return proto
    return None


def _status_response(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(status_body(code, message, reason), status=code)


def success_status() -> dict[str, Any]:
    """Status sent on channel 3 when the command exited 0."""
    return {"metadata": {}, "status": "Success"}


def exit_status(argv: list[str], code: int) -> dict[str, Any]:
    """Status for a non-zero exit code, byte-compatible with kubelet's."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            "command terminated with non-zero exit code: error executing command "
            f"[{' '.join(argv)}], exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def internal_error_status(error: str) -> dict[str, Any]:
    """``apierrors.NewInternalError(err)`` as kubelet writes it."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {error}",
        "reason": "InternalError",
        "details": {"causes": [{"message": error}]},
        "code": 500,
    }


def start_error(argv: list[str], exc: OSError) -> str:
    """The error containerd + kubelet report for an exec that cannot start."""
    return (
        "error executing command in container: failed to exec in container: "
        f'failed to start exec "{secrets.token_hex(32)}": OCI runtime exec failed: exec failed: '
        f"unable to start container process: {describe_spawn_error(argv, exc)}: unknown"
    )


def _negotiate(
    request: web.Request, *, stdin: bool, stdout: bool, stderr: bool
) -> str | web.Response:
    """The subprotocol to upgrade to, or the 400 answered before any upgrade."""
    if not (stdin or stdout or stderr):
        return _status_response(
            400, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr"
        )
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return _status_response(400, "BadRequest", "Upgrade request required")
    offered = offered_protocols(request)
    protocol = choose_protocol(offered)
    if protocol is None:
        return _status_response(
            400,
            "BadRequest",
            f"requested protocol(s) are not supported: [{' '.join(offered)}]; "
            f"supports [{' '.join(SUPPORTED)}]",
        )
    return protocol


def _websocket(protocol: str) -> web.WebSocketResponse:
    return web.WebSocketResponse(
        protocols=(protocol,),
        compress=False,
        autoping=True,
        autoclose=True,
        max_msg_size=MAX_INCOMING,
        timeout=CLOSE_TIMEOUT,
    )


def translates_errors(request: web.Request) -> bool:
    """Whether a 1.30+ apiserver would serve this exec with its WebSocket stream translator
    (the client offers v5), so that kubelet's failures arrive after the upgrade."""
    return V5 in offered_protocols(request)


async def handle_upstream_error(
    request: web.Request, error: str, *, stdin: bool, stdout: bool, stderr: bool
) -> web.StreamResponse:
    """An exec whose upstream (kubelet) upgrade failed, as the 1.30+ apiserver's stream
    translator reports it: the 101 (v5), an empty frame on the lowest writable channel, then
    ``apierrors.NewInternalError`` of client-go's ``unable to upgrade connection: <kubelet
    body>`` on channel 3, then a close with code 1000."""
    negotiated = _negotiate(request, stdin=stdin, stdout=stdout, stderr=stderr)
    if isinstance(negotiated, web.Response):
        return negotiated
    ws = _websocket(V5)
    await ws.prepare(request)
    ready = STDOUT if stdout else STDERR if stderr else STATUS
    status = json.dumps(internal_error_status(error), separators=(",", ":")).encode()
    with contextlib.suppress(Exception):
        await ws.send_bytes(bytes([ready]))
        await ws.send_bytes(bytes([STATUS]) + status)
        await ws.close(code=1000)
    return ws


async def handle_exec(
    request: web.Request,
    sandbox: PodSandbox,
    argv: list[str],
    *,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
    drop_after_bytes: int | None = None,
    cut_after_bytes: int | None = None,
) -> web.StreamResponse:
    """Upgrade to the exec WebSocket and run ``argv`` in the pod's sandbox.

    The process is supervised by a background task: if this handler is cancelled or the client
    goes away, the process keeps running and is reaped when it ends.
    """
    negotiated = _negotiate(request, stdin=stdin, stdout=stdout, stderr=stderr)
    if isinstance(negotiated, web.Response):
        return negotiated
    protocol = negotiated
    ws = _websocket(protocol)
    await ws.prepare(request)
    session = _ExecSession(
        request,
        ws,
        sandbox,
        argv,
        v5=protocol == V5,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr and not tty,
        tty=tty,
        drop_after_bytes=drop_after_bytes,
        cut_after_bytes=cut_after_bytes,
    )
    task = asyncio.ensure_future(session.run())
    _background.add(task)
    task.add_done_callback(_background.discard)
    # Return once the socket is finished with (status sent or client gone); the process may
    # outlive the connection and is then supervised by the background task alone.
    await asyncio.wait(
        [task, asyncio.ensure_future(session.socket_done.wait())],
        return_when=asyncio.FIRST_COMPLETED,
    )
    return ws


async def shutdown(timeout: float = 2.0) -> None:
    """Server shutdown: wait briefly for running exec sessions, then cancel them.

    Call after ``kill_all`` on every sandbox so their processes are already ending.
    """
    tasks = list(_background)
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=1.0)


class _ExecSession:
    """One exec: a process plus the WebSocket that streams it."""

    def __init__(
        self,
        request: web.Request,
        ws: web.WebSocketResponse,
        sandbox: PodSandbox,
        argv: list[str],
        *,
        v5: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
        tty: bool,
        drop_after_bytes: int | None,
        cut_after_bytes: int | None = None,
    ) -> None:
        self.request = request
        self.ws = ws
        self.sandbox = sandbox
        self.argv = list(argv)
        self.v5 = v5
        self.want_stdin, self.want_stdout, self.want_stderr, self.tty = stdin, stdout, stderr, tty
        self.drop_after = drop_after_bytes
        self.cut_after = cut_after_bytes  # Faults.cut_exec: the node's side is cut
        self.sent = 0  # stdout+stderr payload bytes sent
        self.dead = False  # the socket can no longer be written
        self.finishing = False  # we are sending the status / close handshake
        self.socket_done = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None
        self.stdin_writer: asyncio.StreamWriter | None = None
        self.pty_master: int | None = None

    async def run(self) -> None:
        try:
            await self._send(bytes([STDOUT]))
            try:
                readers = await self._start()
            except OSError as exc:
                await self._finish(internal_error_status(start_error(self.argv, exc)))
                return
            receiver = asyncio.ensure_future(self._receive_loop())
            if isinstance(readers, OrderedOutput):
                await self._forward(readers)
            else:
                await asyncio.gather(*(self._pump(r, ch) for r, ch in readers))
            assert self.proc is not None
            code = exit_code(await self.proc.wait())
            await self._finish(success_status() if code == 0 else exit_status(self.argv, code))
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await receiver
        finally:
            self._close_stdin()
            if self.pty_master is not None:
                with contextlib.suppress(OSError):
                    os.close(self.pty_master)
            self.socket_done.set()

    async def _start(self) -> OrderedOutput | list[tuple[asyncio.StreamReader, int]]:
        """Spawn the process; return its output pipes (a pty: its one (reader, channel))."""
        if self.tty:
            return await self._start_tty()
        pipe, devnull = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
        wanted = [
            ch for ch, want in ((STDOUT, self.want_stdout), (STDERR, self.want_stderr)) if want
        ]
        output = OrderedOutput(wanted)
        try:
            self.proc = await spawn(
                self.sandbox,
                self.argv,
                stdin=pipe if self.want_stdin else devnull,
                stdout=output.write_fds.get(STDOUT, devnull),
                stderr=output.write_fds.get(STDERR, devnull),
            )
        except BaseException:
            output.close()
            raise
        output.close_write_ends()
        self.stdin_writer = self.proc.stdin
        return output

    async def _start_tty(self) -> list[tuple[asyncio.StreamReader, int]]:
        master, slave = os.openpty()
        try:
            self.proc = await spawn(
                self.sandbox,
                self.argv,
                stdin=slave if self.want_stdin else asyncio.subprocess.DEVNULL,
                stdout=slave,
                stderr=slave,
            )
        except OSError:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self.pty_master = master
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        read_file = os.fdopen(os.dup(master), "rb", buffering=0)
        await loop.connect_read_pipe(lambda: _PtyReaderProtocol(reader), read_file)
        if self.want_stdin:
            write_file = os.fdopen(os.dup(master), "wb", buffering=0)
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(), write_file
            )
            self.stdin_writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return [(reader, STDOUT)]

    async def _forward(self, output: OrderedOutput) -> None:
        """Forward stdout and stderr in the order the process wrote them, until both reach EOF
        (keeps draining after the client is gone)."""
        async for channel, data in output.chunks():
            await self._output(channel, data)

    async def _pump(self, reader: asyncio.StreamReader, channel: int) -> None:
        """Forward the pty's output until EOF (keeps draining after the client is gone)."""
        while True:
            try:
                data = await reader.read(CHUNK)
            except OSError:  # EIO from a pty whose slave side closed
                return
            if not data:
                return
            await self._output(channel, data)

    async def _output(self, channel: int, data: bytes) -> None:
        """Send one chunk of output on ``channel`` (dropped once the client is gone)."""
        if self.dead:
            return
        prefix = bytes([channel])
        for limit, fault in ((self.drop_after, self._drop), (self.cut_after, self._cut)):
            if limit is not None and self.sent + len(data) >= limit:
                data = data[: limit - self.sent]
                if data:
                    await self._send(prefix + data)
                    self.sent += len(data)
                await fault()
                return
        self.sent += len(data)
        await self._send(prefix + data)

    async def _send(self, frame: bytes) -> None:
        if self.dead:
            return
        try:
            await self.ws.send_bytes(frame)
        except (ConnectionError, RuntimeError):
            self._gone()

    def _gone(self) -> None:
        self.dead = True
        self._close_stdin()
        self.socket_done.set()

    async def _drop(self) -> None:
        """Fault injection: flush what was sent, then close the TCP connection (no close frame)."""
        transport = self.request.transport
        self.dead = True
        if transport is not None:
            for _ in range(500):
                if transport.is_closing() or transport.get_write_buffer_size() == 0:
                    break
                await asyncio.sleep(0.01)
            transport.close()
        self._gone()

    async def _cut(self) -> None:
        """Fault injection (``Faults.cut_exec``): the stream from the node ends here, the
        process runs on. A translated (v5) exec gets the Success a stream translator writes
        when its SPDY stream ended without an error; v4 loses its connection."""
        if self.v5:
            await self._finish(success_status())
            self._gone()
        else:
            await self._drop()

    async def _finish(self, status: dict[str, Any]) -> None:
        """Send the channel-3 status and close with 1000."""
        if self.dead:
            return
        payload = json.dumps(status, separators=(",", ":")).encode()
        self.finishing = True
        await self._send(bytes([STATUS]) + payload)
        if not self.dead:
            with contextlib.suppress(Exception):
                await self.ws.close(code=1000)
        self.dead = True

    async def _receive_loop(self) -> None:
        """Read client messages: stdin data, v5 stdin close, resize. Ends at close/disconnect."""
        try:
            async for msg in self.ws:
                if msg.type != WSMsgType.BINARY or not msg.data:
                    if msg.type == WSMsgType.ERROR:
                        break
                    continue
                data: bytes = msg.data
                channel = data[0]
                if channel == STDIN:
                    await self._write_stdin(data[1:])
                elif channel == CLOSE and self.v5 and len(data) > 1 and data[1] == STDIN:
                    self._close_stdin()
                elif channel == RESIZE:
                    self._resize(data[1:])
        finally:
            if self.finishing:
                self._close_stdin()
            else:  # the client closed or dropped the connection
                self._gone()

    async def _write_stdin(self, payload: bytes) -> None:
        writer = self.stdin_writer
        if writer is None or not payload:
            return
        try:
            writer.write(payload)
            await writer.drain()
        except (ConnectionError, RuntimeError, OSError):
            self._close_stdin()

    def _close_stdin(self) -> None:
        writer, self.stdin_writer = self.stdin_writer, None
        if writer is None:
            return
        if self.tty:
            # EOF on a terminal is ^D at the start of a line
            with contextlib.suppress(Exception):
                writer.write(b"\x04")
        with contextlib.suppress(Exception):
            writer.close()

    def _resize(self, payload: bytes) -> None:
        if self.pty_master is None:
            return
        try:
            size = json.loads(payload)
            cols, rows = int(size.get("Width", 0)), int(size.get("Height", 0))
        except (ValueError, TypeError, AttributeError):
            return
        import fcntl
        import struct
        import termios

        with contextlib.suppress(OSError):
            fcntl.ioctl(self.pty_master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class _PtyReaderProtocol(asyncio.StreamReaderProtocol):
    """Treat EIO on a pty master (slave side closed) as EOF."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        super().__init__(reader)
        self._eof_reader = reader

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, OSError):
            exc = None
        super().connection_lost(exc)
