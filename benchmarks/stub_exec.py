"""A tiny aiohttp pods/exec server (plain HTTP): the fan-out benchmark's stub, and a way to
develop the baselines without the cluster.

`python -m benchmarks.stub_exec` prints its URL and serves until interrupted. By default it runs
each exec's argv as a local process and streams stdout/stderr as v5 frames. With `--answer S` it
spawns nothing: every exec waits S seconds (the command's run time, without a process), then
answers the pod's name on stdout (and the end marks the engine's wrapper prints) and a Success
status, so a fan-out measures the client alone
(a pod named ``gone-*`` gets the API server's 404 instead, ``badaccept-*`` a 101 with a wrong
``Sec-WebSocket-Accept``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import threading
from urllib.parse import quote

from aiohttp import WSMsgType, web

from trainjob_magics.engine.exec.scripts import ARGV0, WRAPPER, end_mark_head

CHUNK = 64 * 1024


# A wrapped command's query, up to its exec id: its answer ends with the wrapper's end marks
_WRAPPED = f"command={quote(WRAPPER, safe='')}&command={ARGV0}&command=".encode()


def _end_marks(path: str) -> bytes:
    """The frames the engine's wrapper ends its streams with (exit code 0), when ``path`` runs
    a command under it; else nothing."""
    raw = path.encode()
    at = raw.find(_WRAPPED)
    if at < 0:
        return b""
    exec_id = raw[at + len(_WRAPPED) :].split(b"&", 1)[0].decode()
    mark = end_mark_head(exec_id) + b"000\n"
    return _server_frame(b"\x01" + mark) + _server_frame(b"\x02" + mark)


async def _exec(request: web.Request) -> web.WebSocketResponse:
    cmd = request.query.getall("command")
    ws = web.WebSocketResponse(protocols=("v5.channel.k8s.io", "v4.channel.k8s.io"))
    await ws.prepare(request)
    await ws.send_bytes(b"\x01")
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )

    async def pump(stream: asyncio.StreamReader, chan: bytes) -> None:
        while True:
            data = await stream.read(CHUNK)
            if not data:
                return
            await ws.send_bytes(chan + data)

    await asyncio.gather(pump(proc.stdout, b"\x01"), pump(proc.stderr, b"\x02"))
    rc = await proc.wait()
    if rc == 0:
        st = {"metadata": {}, "status": "Success"}
    else:
        st = {
            "metadata": {},
            "status": "Failure",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]},
        }
    await ws.send_bytes(b"\x03" + json.dumps(st).encode())
    await ws.close()
    async for msg in ws:  # drain
        if msg.type == WSMsgType.CLOSE:
            break
    return ws


SUCCESS = b"\x03" + json.dumps({"metadata": {}, "status": "Success"}).encode()
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _server_frame(payload: bytes, opcode: int = 2) -> bytes:
    n = len(payload)
    head = bytes([0x80 | opcode, n]) if n < 126 else bytes([0x80 | opcode, 126]) + n.to_bytes(2)
    return head + payload


async def _answer_conn(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
) -> None:
    """The whole exec on a bare socket: upgrade, wait ``delay``, stdout, status, close."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        pod = path.split("/pods/", 1)[1].split("/", 1)[0]
        key = next(
            ln.split(":", 1)[1].strip()
            for ln in lines
            if ln.lower().startswith("sec-websocket-key:")
        )
        if pod.startswith("gone-"):  # a pod that does not exist: the API server's 404
            body = json.dumps(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f'pods "{pod}" not found',
                    "reason": "NotFound",
                    "details": {"name": pod, "kind": "pods"},
                    "code": 404,
                }
            ).encode()
            writer.write(
                b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()
            return
        accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest())
        if pod.startswith("badaccept-"):  # a broken intermediary: 101 with a wrong accept key
            accept = base64.b64encode(b"not the accept key for this request")
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n"
            b"Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
        )
        if delay:
            await asyncio.sleep(delay)
        writer.write(
            _server_frame(b"\x01" + pod.encode() + b"\n")
            + _end_marks(path)
            + _server_frame(SUCCESS)
            + _server_frame(b"\x03\xe8", 8)
        )
        await writer.drain()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(reader.read(64), 1.0)  # the client's close reply
    except (ConnectionError, asyncio.IncompleteReadError, IndexError, StopIteration):
        pass
    finally:
        writer.close()


def start_answering(delay: float) -> tuple[str, threading.Event]:
    """An exec server on a bare asyncio socket (no aiohttp: a few microseconds per exec) that
    answers every exec after ``delay`` seconds; returns (url, stop event)."""
    ready = threading.Event()
    stop = threading.Event()
    box: dict[str, str] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        server = loop.run_until_complete(
            asyncio.start_server(
                lambda r, w: _answer_conn(r, w, delay), "127.0.0.1", 0, backlog=1024
            )
        )
        box["url"] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        ready.set()
        while not stop.is_set():
            loop.run_until_complete(asyncio.sleep(0.1))
        server.close()

    threading.Thread(target=run, daemon=True).start()
    ready.wait()
    return box["url"], stop


def start() -> tuple[str, threading.Event]:
    """Serve on a free 127.0.0.1 port in a background thread; return (url, stop event)."""
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/exec", _exec)
    ready = threading.Event()
    stop = threading.Event()
    box: dict[str, str] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        box["url"] = f"http://127.0.0.1:{port}"
        ready.set()
        while not stop.is_set():
            loop.run_until_complete(asyncio.sleep(0.1))
        loop.run_until_complete(runner.cleanup())

    threading.Thread(target=run, daemon=True).start()
    ready.wait()
    return box["url"], stop


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m benchmarks.stub_exec")
    ap.add_argument("--answer", type=float, default=None, help="answer after S s, run nothing")
    answer = ap.parse_args().answer
    url, _ = start() if answer is None else start_answering(answer)
    print(url, flush=True)
    threading.Event().wait()
