"""The stdout and stderr pipes of one exec, read in the order the process wrote them.

Two ordinary pipes lose the order between them: a shell writes ``echo out; echo err >&2``
before its reader wakes, and the reader cannot tell which pipe was written first. Here:

- Each pipe is in packet mode (``O_DIRECT``) and one page big while both streams are in use, so
  a pipe holds at most one unread write: the writer's next write to it waits until that one was
  read.
- One epoll instance, edge-triggered, watches both. Its ready list keeps the order in which the
  pipes became readable, and a one-slot pipe becomes readable once per write, so the events come
  in the order of the writes. Each event is answered with one read of one packet.
- A burst on one stream (256 KiB without a write on the other) grows that pipe to 64 KiB, read
  64 KiB at a time at an ordinary pipe's speed; the next write on the other stream shrinks it
  back. Inside a burst, a write on the other stream lands when its reader gets to it, as with a
  real kubelet.

One thread per exec does the reading (blocking ``epoll_wait``) and hands the chunks to the event
loop, merging neighbouring chunks of the same stream; at most :data:`WINDOW` chunks wait there,
so a slow client slows the process down instead of filling memory. Linux only, like the rest of
the kubelet; without packet mode or ``F_SETPIPE_SZ`` the pipes are ordinary ones, forwarded as
they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import select
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable

PAGE = os.sysconf("SC_PAGE_SIZE")
LARGE = 1 << 16  # a grown pipe, and the most read at once from it
BURST = 256 << 10  # bytes on one stream, none on the other, before its pipe grows
WINDOW = 256  # chunks read but not yet taken by the event loop
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Python < 3.10 lacks the name
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)

__all__ = ["OrderedOutput"]


class OrderedOutput:
    """Pipes for ``channels`` (the process's ends in :attr:`write_fds`) and their chunks in
    write order (:meth:`chunks`)."""

    def __init__(self, channels: list[int]) -> None:
        self.ordered = len(channels) > 1
        self.write_fds: dict[int, int] = {}
        self._channel: dict[int, int] = {}  # read fd -> channel
        self._large: dict[int, bool] = {}
        self._window = threading.Semaphore(WINDOW)
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._epoll = select.epoll()
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._epoll.register(self._stop_r, select.EPOLLIN)
        try:
            for channel in channels:
                r, w = self._pipe()
                self.write_fds[channel] = w
                self._channel[r] = channel
                self._epoll.register(r, select.EPOLLIN | select.EPOLLET)
        except BaseException:
            self.close()
            raise

    def _pipe(self) -> tuple[int, int]:
        if self.ordered:
            try:
                r, w = os.pipe2(os.O_CLOEXEC | os.O_DIRECT)
            except OSError:
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
        """Stop the reader thread (if any) and close every pipe."""
        self.close_write_ends()
        self._stopped = True
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")
        self._window.release(WINDOW)  # a reader waiting for room sees the stop
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(1)  # it has ended or is ending: EOF came, or the stop wakes it
        if thread is None or not thread.is_alive():
            self._close_fds()

    def _close_fds(self) -> None:
        for fd in list(self._channel):
            self._forget(fd)
        # once only: a second close would close whatever now has these numbers
        stop_fds, self._stop_r, self._stop_w = (self._stop_r, self._stop_w), -1, -1
        for fd in stop_fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        with contextlib.suppress(OSError, ValueError):
            self._epoll.close()

    async def chunks(self) -> AsyncIterator[tuple[int, bytes]]:
        """``(channel, bytes)`` in the order written, until every pipe reached EOF."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()

        def hand_over(item: tuple[int, bytes] | None) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        self._thread = threading.Thread(
            target=self._read_all, args=(hand_over,), name="exec-output", daemon=True
        )
        self._thread.start()
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                self._window.release()
                channel, data = item
                parts = [data]
                size = len(data)
                # merge what is already waiting on the same channel, up to LARGE (order is kept)
                while not queue.empty():
                    nxt = queue._queue[0]  # type: ignore[attr-defined]
                    if nxt is None or nxt[0] != channel or size + len(nxt[1]) > LARGE:
                        break
                    queue.get_nowait()
                    self._window.release()
                    parts.append(nxt[1])
                    size += len(nxt[1])
                yield channel, b"".join(parts)
        finally:
            self.close()

    def _read_all(self, emit: Callable[[tuple[int, bytes] | None], None]) -> None:
        """The reader thread: every pipe until EOF (or :meth:`close`), chunks in write order."""
        ready: deque[int] = deque()
        queued: set[int] = set()
        hung_up: set[int] = set()  # the writers are gone: what is left can be read at once
        last, run = -1, 0

        def collect(timeout: float) -> None:
            for fd, events in self._epoll.poll(timeout):
                if fd == self._stop_r:
                    self._stopped = True
                    continue
                if events & (select.EPOLLHUP | select.EPOLLERR):
                    hung_up.add(fd)
                if fd not in queued and fd in self._channel:
                    queued.add(fd)
                    ready.append(fd)

        try:
            while self._channel and not self._stopped:
                collect(0 if ready else -1)
                if not ready:
                    continue
                fd = ready.popleft()
                queued.discard(fd)
                data, more, eof = self._read(fd, whole=fd in hung_up)
                if data:
                    if self.ordered:
                        if fd != last:
                            last, run = fd, 0
                        run += len(data)
                        self._resize(fd, run)
                    self._window.acquire()
                    if self._stopped:
                        return
                    emit((self._channel[fd], data))
                if eof:
                    self._forget(fd)
                elif more and fd not in queued:
                    collect(0)  # what became readable meanwhile goes first
                    if fd not in queued:
                        queued.add(fd)
                        ready.append(fd)
        except (OSError, ValueError, RuntimeError):  # closed under us; the loop has ended
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                emit(None)

    def _read(self, fd: int, *, whole: bool) -> tuple[bytes, bool, bool]:
        """``(data, more may wait, EOF)``: the one packet of a small pipe; up to :data:`LARGE`
        bytes of a large one, or of one whose writers are gone (``whole``)."""
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                data = os.read(fd, LARGE)
            except BlockingIOError:
                return b"".join(parts), False, False
            except OSError:
                return b"".join(parts), False, True
            if not data:
                return b"".join(parts), False, True
            if not (whole or self._large[fd]) and not self._grown_by_writer(fd):
                return data, False, False
            parts.append(data)
            size += len(data)
            if size >= LARGE:
                return b"".join(parts), True, False

    def _grown_by_writer(self, fd: int) -> bool:
        """The writer enlarged its pipe (F_SETPIPE_SZ, as the pods' file packer does): it may
        hold many packets under one edge-triggered wakeup, so it is read as a large pipe."""
        try:
            grown = fcntl.fcntl(fd, F_GETPIPE_SZ) > PAGE
        except OSError:
            return False
        if grown:
            self._large[fd] = True
        return grown

    def _resize(self, fd: int, run: int) -> None:
        """Grow a pipe that carries a burst alone; shrink the other once it is written to."""
        for other, large in self._large.items():
            if other != fd and large:
                with contextlib.suppress(OSError):  # EBUSY: it still holds more than a page
                    fcntl.fcntl(other, F_SETPIPE_SZ, PAGE)
                    self._large[other] = False
        if not self._large[fd] and run >= BURST:
            with contextlib.suppress(OSError):  # EPERM: the user's pipe pages are used up
                fcntl.fcntl(fd, F_SETPIPE_SZ, LARGE)
                self._large[fd] = True

    def _forget(self, fd: int) -> None:
        if self._channel.pop(fd, None) is None:
            return  # already closed (by the reader thread or by close()): never twice
        self._large.pop(fd, None)
        with contextlib.suppress(OSError, ValueError):
            self._epoll.unregister(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
