"""pods/log: the container's log file, with tailLines, limitBytes, timestamps and follow."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from aiohttp import web


def _stamp(data: bytes) -> bytes:
    ts = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()
    return b"".join(ts + b" " + line for line in data.splitlines(keepends=True))


def read_log(
    path: Path, tail_lines: int | None, limit_bytes: int | None, timestamps: bool
) -> bytes:
    data = path.read_bytes() if path.exists() else b""
    if tail_lines is not None:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-tail_lines:]) if tail_lines > 0 else b""
    if timestamps:
        data = _stamp(data)
    if limit_bytes is not None:
        data = data[:limit_bytes]
    return data


async def follow_log(
    request: web.Request,
    path: Path,
    initial: bytes,
    still_running: Callable[[], bool],
    stopping: asyncio.Event,
    timestamps: bool,
) -> web.StreamResponse:
    """Stream the log: what is there now, then appended data until the container ends."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    offset = path.stat().st_size if path.exists() else 0
    try:
        if initial:
            await resp.write(initial)
        while not stopping.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            running = still_running()
            size = path.stat().st_size if path.exists() else 0
            if size > offset:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read(size - offset)
                offset = size
                await resp.write(_stamp(chunk) if timestamps else chunk)
                continue
            if not running:
                break
            await asyncio.sleep(0.1)
        await resp.write_eof()
    except (ConnectionError, RuntimeError):
        pass
    return resp
