"""The output pipes of one exec, read in the order the process wrote them.

A kubelet forwards each stream's bytes as they come. With two ordinary pipes that is not enough
to keep ``echo out; echo err >&2`` in order: a shell writes both lines before the reader wakes,
and the reader cannot tell which pipe was written first. Here the order is known exactly:

- Each pipe is in packet mode (``O_DIRECT``) and one page big while both streams are in use,
  so a writer holds at most one unread write per pipe: its next write to that pipe waits until
  the last one was read.
- One epoll instance, edge-triggered, watches both pipes. Its ready list is kept in the order
  the pipes became readable, and a one-page pipe becomes readable once per write, so the events
  come in the order of the writes. Each event is answered with one read of one packet.
- Bulk output on one stream (256 KiB without a write on the other) grows that pipe to 64 KiB
  and reads it in 64 KiB chunks, at the throughput of an ordinary pipe. The next write on the
  other stream shrinks it back. Inside such a burst a write on the other stream is placed as
  a real kubelet places it: when its reader gets to it.

Linux only (epoll, ``F_SETPIPE_SZ``), like the rest of the kubelet. Without packet mode or
``F_SETPIPE_SZ`` the pipes are ordinary ones: forwarded as they come, order as good as that.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import select
from collections import deque
from collections.abc import AsyncIterator

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
LARGE = 1 << 16  # a grown pipe, and the most read at once from it
BURST = 256 << 10  # bytes on one stream, none on the other, before its pipe grows
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Python < 3.10 lacks the name


class OrderedPipes:
    """Pipes for ``channels`` (the process's ends in :attr:`write_fds`) and their chunks, in
    write order (:meth:`chunks`)."""

    def __init__(self, channels: list[int]) -> None:
        self.ordered = len(channels) > 1
        self.write_fds: dict[int, int] = {}
        self._channel: dict[int, int] = {}  # read fd -> channel
        self._large: dict[int, bool] = {}
        self._hup: set[int] = set()
        self._ready: deque[int] = deque()
        self._queued: set[int] = set()
        self._last = -1  # the fd read last, and the bytes read from it since the other one
        self._run = 0
        self._epoll = select.epoll()
        for channel in channels:
            r, w = self._pipe()
            self.write_fds[channel] = w
            self._channel[r] = channel
            self._epoll.register(r, select.EPOLLIN | select.EPOLLET)

    def _pipe(self) -> tuple[int, int]:
        if self.ordered:
            try:
                r, w = os.pipe2(os.O_CLOEXEC | os.O_DIRECT)
            except (OSError, AttributeError):
                pass
            else:
                try:
                    fcntl.fcntl(r, F_SETPIPE_SZ, PAGE)
                except OSError:
                    os.close(r)
                    os.close(w)
                else:
                    return self._reader(r, large=False), w
        r, w = os.pipe2(os.O_CLOEXEC)
        return self._reader(r, large=True), w

    def _reader(self, fd: int, *, large: bool) -> int:
        os.set_blocking(fd, False)
        self._large[fd] = large
        return fd

    def close_write_ends(self) -> None:
        """After the spawn: only the process holds the write ends (its exit is their EOF)."""
        for fd in self.write_fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.write_fds = {}

    def close(self) -> None:
        self.close_write_ends()
        for fd in list(self._channel):
            self._eof(fd)
        self._epoll.close()

    async def chunks(self) -> AsyncIterator[tuple[int, bytes]]:
        """``(channel, bytes)`` in the order written, until every pipe reached EOF."""
        while self._channel:
            self._collect()
            if not self._ready:
                await self._readable()
                continue
            fd = self._ready.popleft()
            self._queued.discard(fd)
            if fd not in self._channel:
                continue
            channel = self._channel[fd]
            data, more, eof = self._read(fd)
            if data:
                self._account(fd, len(data))
                yield channel, data
            if eof:
                self._eof(fd)
            elif more:
                self._collect()
                self._queue(fd)

    def _collect(self) -> None:
        for fd, events in self._epoll.poll(0):
            if events & (select.EPOLLHUP | select.EPOLLERR):
                self._hup.add(fd)
            self._queue(fd)

    def _queue(self, fd: int) -> None:
        if fd not in self._queued:
            self._queued.add(fd)
            self._ready.append(fd)

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        loop.add_reader(self._epoll.fileno(), wake)
        try:
            await future
        finally:
            loop.remove_reader(self._epoll.fileno())

    def _read(self, fd: int) -> tuple[bytes, bool, bool]:
        """``(data, more may wait, EOF)``: one packet of a small pipe (the one write it holds),
        up to :data:`LARGE` bytes of a large one; all of a pipe whose writers are gone."""
        parts: list[bytes] = []
        size = 0
        whole = fd in self._hup or self._large[fd]
        while True:
            try:
                data = os.read(fd, LARGE)
            except BlockingIOError:
                return b"".join(parts), False, False
            except OSError:
                return b"".join(parts), False, True
            if not data:
                return b"".join(parts), False, True
            parts.append(data)
            size += len(data)
            if not whole:
                return data, False, False
            if size >= LARGE:
                return b"".join(parts), True, False

    def _account(self, fd: int, size: int) -> None:
        """Grow a pipe that carries a burst alone; shrink the others once the burst ends."""
        if not self.ordered:
            return
        if fd != self._last:
            self._last, self._run = fd, 0
        self._run += size
        for other, large in self._large.items():
            if other != fd and large:
                with contextlib.suppress(OSError):  # EBUSY: it still holds more than a page
                    fcntl.fcntl(other, F_SETPIPE_SZ, PAGE)
                    self._large[other] = False
        if not self._large[fd] and self._run >= BURST:
            with contextlib.suppress(OSError):  # EPERM: the user's pipe pages are used up
                fcntl.fcntl(fd, F_SETPIPE_SZ, LARGE)
                self._large[fd] = True

    def _eof(self, fd: int) -> None:
        self._channel.pop(fd, None)
        self._large.pop(fd, None)
        with contextlib.suppress(OSError, ValueError):
            self._epoll.unregister(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
