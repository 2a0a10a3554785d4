"""The API server's listening socket, and restarting it: drop every connection, refuse new ones
for a while, listen again on the same port (what clients see of a kube-apiserver restart).

Runs in the cluster's event loop; :meth:`Listener.restart` is the thread-safe entry point.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading

from aiohttp import web

log = logging.getLogger(__name__)

SWEEP_EVERY = 0.05  # seconds between two cuts of late connections while down


REBIND_RETRY = 0.2  # seconds between two tries to listen again (the port may be in TIME_WAIT)


class Listener:
    """One TCP site of an aiohttp runner, on 127.0.0.1, that can go down and come back."""

    def __init__(self, runner: web.AppRunner, port: int, ssl_context: ssl.SSLContext) -> None:
        self.runner = runner
        self.port = port
        self.ssl_context = ssl_context
        self._site: web.TCPSite | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._generation = 0  # a newer restart supersedes the pending come-back of an older one
        self._up_events: list[threading.Event] = []
        self._sweeper: asyncio.Future[None] | None = None

    async def start(self) -> int:
        """Listen; returns the port (the one chosen when ``port`` was 0)."""
        self._loop = asyncio.get_running_loop()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port, ssl_context=self.ssl_context)
        await site.start()
        self._site = site
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.port

    @property
    def down(self) -> bool:
        return self._site is None

    def restart(self, downtime: float) -> threading.Event:
        """From any thread: go down now (returns once down); the event is set when back up."""
        if self._loop is None:
            raise RuntimeError("the local cluster is not running")
        up = threading.Event()
        future = asyncio.run_coroutine_threadsafe(self._restart(downtime, up), self._loop)
        future.result(timeout=30)
        return up

    async def _restart(self, downtime: float, up: threading.Event) -> None:
        self._generation += 1
        generation = self._generation
        self._up_events.append(up)
        await self._go_down()
        log.warning("API server down for %.1fs (restart)", downtime)
        loop = asyncio.get_running_loop()
        loop.call_later(downtime, lambda: asyncio.ensure_future(self._come_up(generation)))

    async def _go_down(self) -> None:
        """Stop listening (new connections are refused), then cut every open connection: the
        handlers see their transport closing (watches end, exec sessions lose their socket and
        leave the processes running)."""
        site, self._site = self._site, None
        if site is not None:
            await site.stop()
        self._cut_connections()
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep())

    def _cut_connections(self) -> int:
        server = self.runner.server
        cut = 0
        for handler in list(server.connections) if server is not None else []:
            transport = handler.transport
            if transport is not None and not transport.is_closing():
                transport.abort()  # no TLS close_notify: the peer sees the connection reset
                cut += 1
        return cut

    async def _sweep(self) -> None:
        """While down, also cut connections accepted just before (their TLS handshake ended
        after the first cut): a stopped server answers nothing."""
        while self._site is None:
            late = self._cut_connections()
            if late:
                log.warning("API server down: cut %d late connection(s)", late)
            await asyncio.sleep(SWEEP_EVERY)

    async def _come_up(self, generation: int) -> None:
        if generation != self._generation or self._site is not None:
            return
        while True:
            site = web.TCPSite(self.runner, "127.0.0.1", self.port, ssl_context=self.ssl_context)
            try:
                await site.start()
                break
            except OSError as exc:
                log.warning("API server cannot listen on port %d again yet: %s", self.port, exc)
                with contextlib.suppress(Exception):
                    await site.stop()
                await asyncio.sleep(REBIND_RETRY)
        self._site = site
        if self._sweeper is not None:
            self._sweeper.cancel()
        log.warning("API server listening again on port %d", self.port)
        events, self._up_events = self._up_events, []
        for event in events:
            event.set()
