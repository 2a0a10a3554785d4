"""A tiny aiohttp pods/exec server (plain HTTP) to develop the baselines without the cluster.

Not used by the suite itself; `python -m benchmarks.stub_exec` prints its URL and serves until
interrupted. It runs each exec's argv as a local process and streams stdout/stderr as v5 frames.
"""

from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import WSMsgType, web

CHUNK = 64 * 1024


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
    url, _ = start()
    print(url)
    threading.Event().wait()
