"""TLS over memory BIOs: many TLS records per system call, for bulk streams (port forward).

``ssl.SSLSocket.recv`` returns one TLS record per call, and without OpenSSL's read-ahead (which
Python cannot turn on) each ``SSL_read`` costs two ``read`` system calls (the record header,
then its body). A 256 MB download through kube-apiserver's port-forward tunnel arrives in about
8-16 KiB records: 30,000+ ``SSL_read`` calls and twice as many system calls, each a GIL release
and retake, half of the relay's time. :class:`BioSocket` reads the TCP socket in large chunks
into an ``ssl.MemoryBIO`` and decrypts every whole record buffered into one returned chunk, so
one ``recv`` hands back up to ``RAW_READ`` bytes of plaintext.

It has the socket methods the WebSocket handshake, :class:`~.frames.FrameReader` and the
forward relays use (``recv``, ``recv_into``, ``send``, ``sendall``, ``setblocking``,
``settimeout``, ``fileno``, ``pending``, ``close``, ``shutdown``). What ``pending`` reports
(decrypted or still encrypted bytes held here) is not visible to ``select``: a caller polls it
before waiting, as for an ``SSLSocket``. ``send`` takes the whole buffer once the ciphertext
of its previous call is out (``BlockingIOError`` until then) and keeps at most that one
call's ciphertext; ``wants_write`` says some is left, ``flush`` sends it.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from typing import Any, cast

RAW_READ = 1 << 20  # bytes of ciphertext read from the socket at once


class BioSocket:
    """A connected TCP socket with TLS done over memory BIOs (client side)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, hostname: str | None):
        self.sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self._in, self._out, server_hostname=hostname)
        self._unsent = memoryview(b"")  # ciphertext not yet taken by the kernel
        self._eof = False  # the peer closed the TCP connection
        self._more = False  # the last read stopped with a full buffer: records may be left
        self._scratch = bytearray(RAW_READ)  # plaintext of one ``recv``, copied out once
        self._raw = bytearray(RAW_READ)  # ciphertext of one socket read

    # -- setup ------------------------------------------------------------------------------
    def handshake(self) -> None:
        """The TLS handshake, blocking (with the socket's timeout)."""
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush_blocking()
                if not self._fill():
                    closed = "the connection closed during the TLS handshake"
                    raise ssl.SSLEOFError(closed) from None
        self._flush_blocking()

    def _flush_blocking(self) -> None:
        data = self._out.read()
        if data:
            self.sock.sendall(data)

    def _fill(self) -> int:
        """One read of the socket into the incoming BIO; 0 at EOF."""
        n = self.sock.recv_into(self._raw)
        if not n:
            self._eof = True
            self._in.write_eof()
            return 0
        self._in.write(memoryview(self._raw)[:n])
        return n

    # -- socket-like ------------------------------------------------------------------------
    def fileno(self) -> int:
        return self.sock.fileno()

    def setblocking(self, flag: bool) -> None:
        self.sock.setblocking(flag)

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self.sock.gettimeout()

    def getpeername(self) -> Any:
        return self.sock.getpeername()

    def pending(self) -> int:
        """Nonzero when a ``recv`` may return data without the socket becoming readable
        (decrypted bytes, or records left when the last read filled its buffer)."""
        return self.obj.pending() or int(self._more)

    def recv(self, n: int) -> bytes:
        buf = self._scratch if n <= len(self._scratch) else bytearray(n)
        got = self.recv_into(buf, n)
        return bytes(memoryview(buf)[:got])

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        """Decrypt into ``buffer`` every record already here, up to ``nbytes``; read the socket
        once only when nothing was (``BlockingIOError`` when it has nothing either). 0 at the
        end of the stream."""
        view = memoryview(buffer).cast("B")
        n = nbytes or len(view)
        got = 0
        self._more = False
        while got < n:
            try:
                # with a buffer, read returns the count (typeshed says bytes whatever the call)
                k = cast(int, self.obj.read(n - got, view[got:n]))
            except ssl.SSLWantReadError:
                if got or self._eof:
                    break
                self._pump()
                if not self._fill():
                    continue  # EOF written: the next read says how the stream ended
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break  # a close_notify, or a TCP close without one: the end either way
            if not k:
                break
            got += k
        else:
            self._more = self._in.pending > 0  # stopped by a full buffer
        self._pump()  # a read may have queued a reply (key update): send it along
        return got

    def send(self, data: Any) -> int:
        """Take all of ``data`` (its ciphertext is queued here) once the previous call's
        ciphertext is out; ``BlockingIOError`` until then."""
        if self._unsent and not self.flush():
            raise BlockingIOError("the previous write is not out yet")
        n = len(data)
        if n:
            self.obj.write(data)
        self._pump()
        return n

    def sendall(self, data: Any) -> None:
        """Blocking: send all of ``data``."""
        self.obj.write(data)
        out = self._unsent.tobytes() + self._out.read()
        self._unsent = memoryview(b"")
        self.sock.sendall(out)

    @property
    def wants_write(self) -> bool:
        """Ciphertext is waiting for the socket to take it."""
        return bool(self._unsent) or self._out.pending > 0

    def flush(self) -> bool:
        """Send queued ciphertext as far as the socket takes it now; True when all is out."""
        self._pump()
        return not self._unsent

    def _pump(self) -> None:
        if self._out.pending:
            rest = self._out.read()
            self._unsent = memoryview(self._unsent.tobytes() + rest if self._unsent else rest)
        while self._unsent:
            try:
                k = self.sock.send(self._unsent)
            except (TimeoutError, BlockingIOError, InterruptedError):
                return
            if not k:
                return
            self._unsent = self._unsent[k:]

    def shutdown(self, how: int = socket.SHUT_RDWR) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


__all__ = ["RAW_READ", "BioSocket"]
