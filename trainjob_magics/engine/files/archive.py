"""Tar streams of local trees (produced as they are sent, and hashed) and the safe unpack of
downloaded ones: no member may land outside the destination."""

from __future__ import annotations

import contextlib
import copy
import io
import os
import posixpath
import queue
import stat
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import TransferError, UnsafeArchiveError
from ..exec.frames import client_frame
from .manifest import FileInfo
from .resume import OFFSET_KEY, ReceiveLedger, SegmentHasher


def _walk(local: Path) -> Iterator[Path]:
    """``local`` and, for a directory, everything below it (sorted, links not followed)."""
    yield local
    if local.is_dir() and not local.is_symlink():
        for root, dirs, files in os.walk(local):
            dirs.sort()
            base = Path(root)
            for name in sorted(dirs) + sorted(files):
                p = base / name
                if name in dirs and not p.is_symlink():
                    continue  # os.walk yields it as a root
                yield p
            for name in dirs:
                p = base / name
                if not p.is_symlink():
                    yield p


def stream_order(paths: Iterator[Path]) -> list[Path]:
    """Directories first (in walk order: parents before children), then links, then regular
    files from the smallest: the receiver creates the many small files (costly per file) while
    the large ones are still on their way, instead of after them."""

    def key(item: tuple[int, Path]) -> tuple[int, int, int]:
        index, path = item
        try:
            st = os.lstat(path)
        except OSError:  # gone: gettarinfo reports it
            return (1, 0, index)
        if stat.S_ISDIR(st.st_mode):
            return (0, 0, index)
        return (2, st.st_size, index) if stat.S_ISREG(st.st_mode) else (1, 0, index)

    return [path for _, path in sorted(enumerate(paths), key=key)]


STREAM_CHUNK = 1 << 18  # bytes of a file read at once (one stdin frame)
BLOCK = tarfile.BLOCKSIZE
AHEAD = 16  # chunks read ahead of the sender at most
UNPACK_CHUNK = 1 << 20  # bytes handed to the unpacking thread at once


_ZEROS = bytes(STREAM_CHUNK)


def _zeros(n: int) -> memoryview:
    """``n`` zero bytes (``n`` <= STREAM_CHUNK), without allocating them."""
    return memoryview(_ZEROS)[:n]


class Member:
    """One member of a :class:`TarStream`: its header as first sent (``info``: the whole file),
    and where this stream starts its data (``start``: a resumed file's first byte)."""

    __slots__ = ("header", "info", "name", "path", "size", "start")

    def __init__(
        self,
        header: bytes,
        info: tarfile.TarInfo,
        name: str,
        path: Path | None,
        start: int = 0,
    ) -> None:
        self.header = header
        self.info = info
        self.name = name
        self.path = path  # a regular file's, read when it is sent
        self.start = start
        self.size = info.size - start if path is not None else 0  # bytes of data sent

    def resumed(self, start: int) -> Member:
        """This file from byte ``start`` on: a PAX record says where its data begins."""
        if not start:
            return Member(self.header, self.info, self.name, self.path)
        info = copy.copy(self.info)
        info.pax_headers = {**self.info.pax_headers, OFFSET_KEY: str(start)}
        info.size = self.info.size - start
        header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        return Member(header, self.info, self.name, self.path, start)


def file_ident(path: Path) -> tuple[int, int]:
    """``(size, mtime_ns)``: a local file that changed between two attempts is sent whole."""
    st = os.lstat(path)
    return st.st_size, st.st_mtime_ns


class TarStream:
    """A tar archive (PAX) of a local file or tree, produced as it is read: ``read(n)`` returns
    the next bytes, reading each file once. :attr:`size` is known up front (headers from
    ``lstat``); :attr:`files` is each regular file's size and sha256 (complete once ``read``
    returned b""): one helper thread reads the files ahead and hashes them, off the sender's
    thread. :meth:`read_frame` has that thread build the stdin frames too (the masking then
    overlaps the sender's socket waits). A file that shrinks while it is read raises
    :class:`TransferError`; :meth:`close` stops the reader early.

    Each file is hashed in segments (``resume.py``): :attr:`marks` has this stream's marks of
    each file it carries (from :attr:`starts`, 0 unless :meth:`resumed` made it)."""

    def __init__(self, local: Path, arcname: str) -> None:
        self.files: dict[str, FileInfo] = {}
        self.idents: dict[str, tuple[int, int]] = {}
        self._members: list[Member] = []
        with tarfile.open(fileobj=io.BytesIO(), mode="w", format=tarfile.PAX_FORMAT) as namer:
            self._add_members(namer, local, arcname)
        self._start_state()

    def _start_state(self) -> None:
        self.size = sum(len(m.header) + m.size + (-m.size % BLOCK) for m in self._members)
        self.size += 2 * BLOCK
        self.starts = {m.name: m.start for m in self._members if m.path is not None}
        self.marks: dict[str, dict[int, str]] = {name: {} for name in self.starts}
        self.produced = 0
        self._queue: queue.Queue[Any] = queue.Queue(AHEAD)
        self._framed = False
        self._reader: threading.Thread | None = None
        self._closed = threading.Event()
        self._left: memoryview | None = None
        self._done = False

    def _add_members(self, namer: tarfile.TarFile, local: Path, arcname: str) -> None:
        """Headers of every member (``namer`` only names them: hard links, PAX fields)."""
        for path in stream_order(_walk(local)):
            rel = path.relative_to(local).as_posix()
            name = arcname if rel == "." else f"{arcname}/{rel}"
            info = namer.gettarinfo(str(path), arcname=name)
            if info is None or not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
                continue  # sockets, fifos, devices: not copied
            info.uid = info.gid = 0
            info.mtime = int(info.mtime)  # a float would cost a PAX header per member
            info.uname = info.gname = "root"
            header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            if not info.isreg():
                info.size = 0
            self._members.append(Member(header, info, name, path if info.isreg() else None))
            if info.isreg():
                self.files[name] = FileInfo(info.size)
                self.idents[name] = file_ident(path)

    def resumed(self, skip: set[str], offsets: dict[str, int]) -> TarStream:
        """The same archive for a retry: without the files in ``skip`` (the receiver holds them
        whole) and with each file in ``offsets`` from that byte on; directories and links
        again. A file whose size or mtime changed since it was first read goes whole."""
        other = TarStream.__new__(TarStream)
        other.files = {n: FileInfo(f.size, f.sha256) for n, f in self.files.items()}
        other.idents = dict(self.idents)
        other._members = []
        for m in self._members:
            if m.path is None:
                other._members.append(m)
                continue
            try:
                changed = file_ident(m.path) != self.idents[m.name]
            except OSError:
                changed = True  # gone: reading it says so
            if changed:
                with contextlib.suppress(OSError):
                    other.idents[m.name] = file_ident(m.path)
                other._members.append(m.resumed(0))
            elif m.name not in skip:
                other._members.append(m.resumed(offsets.get(m.name, 0)))
        other._start_state()
        return other

    def _pieces(self, lead: bytes) -> Iterator[memoryview]:
        """The archive as pieces of ``lead`` (the stdin channel byte, for frames) and at most
        ``STREAM_CHUNK`` bytes, headers and small files packed together. Each piece is a view
        of one reused buffer, good until the next is asked for: file data is read straight into
        it and hashed there (no fresh memory, no copy)."""
        start, cap = len(lead), len(lead) + STREAM_CHUNK
        whole = memoryview(bytearray(cap))
        whole[:start] = lead
        fill = start
        for m in self._members:
            header, path, size, name = m.header, m.path, m.size, m.name
            if fill + len(header) > cap:
                yield whole[:fill]
                fill = start
            if len(header) > STREAM_CHUNK:
                raise TransferError(f"the tar header of {name!r} is too large")
            whole[fill : fill + len(header)] = header
            fill += len(header)
            if path is None:
                continue
            sha = SegmentHasher(m.start, self.marks[name])
            with open(path, "rb", buffering=0) as fh:
                if m.start:
                    fh.seek(m.start)
                left = size
                while left:
                    if fill == cap:
                        yield whole[:fill]
                        fill = start
                    view = whole[fill : fill + min(left, cap - fill)]
                    got = fh.readinto(view)
                    if not got:
                        raise TransferError(f"{path} changed size while it was being read")
                    sha.update(view[:got])
                    fill += got
                    left -= got
            digest = sha.finish()
            if not m.start:
                self.files[name].sha256 = digest
            tail = -size % BLOCK
            if fill + tail > cap:
                yield whole[:fill]
                fill = start
            whole[fill : fill + tail] = _zeros(tail)
            fill += tail
        if fill + 2 * BLOCK > cap:
            yield whole[:fill]
            fill = start
        whole[fill : fill + 2 * BLOCK] = _zeros(2 * BLOCK)
        yield whole[: fill + 2 * BLOCK]

    def _read_ahead(self) -> None:
        try:
            for piece in self._pieces(b"\x00" if self._framed else b""):
                item = (client_frame(piece), len(piece) - 1) if self._framed else bytes(piece)
                if not self._put(item):
                    return
            self._put(None)
        except BaseException as exc:  # handed to the sender by read()
            self._put(exc)

    def _put(self, item: Any) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _get(self) -> Any:
        """The reader's next item; once :meth:`close` stopped it, what it queued and then
        :class:`TransferError` (a reader never waits forever)."""
        while True:
            try:
                return self._queue.get(timeout=0.2)
            except queue.Empty:
                if self._closed.is_set():
                    raise TransferError("the upload was stopped") from None

    def _next(self) -> memoryview | None:
        if self._done:
            return None
        item = self._get()
        if item is None:
            self._done = True
            return None
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return memoryview(item)

    def _start(self, framed: bool) -> None:
        if self._reader is None:
            self._framed = framed
            self._reader = threading.Thread(
                target=self._read_ahead, daemon=True, name="trainjob-tar"
            )
            self._reader.start()
        elif self._framed != framed:
            raise ValueError("a TarStream is read either as bytes or as frames")

    def read_frame(self) -> tuple[bytes, int]:
        """The next masked stdin frame (channel 0) and its payload size; ``(b"", 0)`` at the
        end."""
        self._start(framed=True)
        if self._done:
            return b"", 0
        item = self._get()
        if item is None:
            self._done = True
            return b"", 0
        if isinstance(item, BaseException):
            self._done = True
            raise item
        frame, n = item
        self.produced += n
        return frame, n

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes of the archive (all that is left for ``n < 0``); b"" at the end."""
        self._start(framed=False)
        want = self.size if n < 0 else n
        parts: list[memoryview] = []
        got = 0
        while got < want:
            piece = self._left if self._left is not None else self._next()
            self._left = None
            if piece is None:
                break
            take = want - got
            if len(piece) > take:
                self._left = piece[take:]
                piece = piece[:take]
            parts.append(piece)
            got += len(piece)
        out = b"".join(parts)
        self.produced += len(out)
        return out

    def close(self) -> None:
        """Stop reading ahead (the transfer ended early)."""
        self._closed.set()


def _is_within(base: str, target: str) -> bool:
    """True when the normalised POSIX path ``target`` stays inside ``base``."""
    base = posixpath.normpath(base)
    target = posixpath.normpath(target)
    return target == base or target.startswith(base.rstrip("/") + "/")


def check_member(member: tarfile.TarInfo, root: str, names: set[str]) -> str | None:
    """Why ``member`` is unsafe to extract under archive root ``root``; None when it is safe."""
    name = member.name
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or name.startswith("\\"):
        return "absolute path"
    parts = name.split("/")
    if ".." in parts or "\\" in name:
        return "path with '..'"
    if not _is_within(root, name):
        return f"outside {root!r}"
    if member.issym():
        link = member.linkname
        if link.startswith("/"):
            return f"symlink to absolute path {link!r}"
        if not _is_within(root, posixpath.join(posixpath.dirname(name), link)):
            return f"symlink escaping the target ({link!r})"
    elif member.islnk():
        link = member.linkname
        if link.startswith("/") or ".." in link.split("/") or not _is_within(root, link):
            return f"hard link to {link!r} outside the target"
        if link not in names:
            return f"hard link to {link!r}, which is not in the archive"
    elif not (member.isreg() or member.isdir()):
        return "device, fifo or other special file"
    return None


def _normalise(member: tarfile.TarInfo) -> None:
    member.name = member.name.rstrip("/") or member.name
    if member.name.startswith("./"):
        member.name = member.name[2:]
    if member.islnk() and member.linkname.startswith("./"):
        member.linkname = member.linkname[2:]


class ChunkStream:
    """A forward-only byte stream over a series of chunks (``next_chunk()`` returns the next
    one, or None / b"" at the end): exact reads, ``tell`` and forward ``seek`` (all that
    tarfile's ``"r:"`` mode needs to parse headers), and :meth:`views` of the data in place."""

    def __init__(self, next_chunk: Callable[[], bytes | bytearray | memoryview | None]) -> None:
        self._next = next_chunk
        self._view = memoryview(b"")
        self._pos = 0  # in ``_view``
        self._offset = 0  # in the stream
        self._ended = False

    def _fill(self) -> bool:
        while self._pos >= len(self._view):
            if self._ended:
                return False
            chunk = self._next()
            if not chunk:
                self._ended = True
                return False
            self._view, self._pos = memoryview(chunk), 0
        return True

    def views(self, n: int) -> Iterator[memoryview]:
        """The next ``n`` bytes (fewer at the end) as views of the chunks, no copies."""
        while n > 0 and self._fill():
            piece = self._view[self._pos : self._pos + n]
            self._pos += len(piece)
            self._offset += len(piece)
            n -= len(piece)
            yield piece

    def read(self, n: int = -1) -> bytes:
        pieces = list(self.views(n if n >= 0 else 1 << 62))
        return bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)

    def tell(self) -> int:
        return self._offset

    def seek(self, offset: int, whence: int = 0) -> int:
        """Forward anywhere; back only within the current chunk."""
        back = self._offset - offset
        if whence != 0 or back > self._pos:
            raise tarfile.ReadError("the tar stream cannot be read out of order")
        if back > 0:
            self._pos -= back
            self._offset = offset
        for _ in self.views(-back):
            pass
        return self._offset


# tarfile's extraction filters came with Python 3.10.12 and 3.11.4 (PEP 706): Debian bookworm's
# 3.11.2, the Python of many notebook images, lacks them. There the same limits are applied here.
_DATA_FILTER: Callable[[tarfile.TarInfo, str], tarfile.TarInfo] | None = getattr(
    tarfile, "data_filter", None
)
_FILTER_ERRORS: tuple[type[Exception], ...] = tuple(
    e for e in (getattr(tarfile, "FilterError", None),) if e is not None
)


def data_safe(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """``tarfile.data_filter(member, dest)``, or where Python lacks it what it does to a member
    :func:`check_member` already let by (paths, link targets and special files were checked
    there): no set-id, sticky or group/other write bits, the owner may read and write a file,
    a file not executable by its owner is executable by nobody, no ownership, no mode for
    directories and symlinks."""
    if _DATA_FILTER is not None:
        return _DATA_FILTER(member, dest)
    safe = copy.copy(member)
    mode = member.mode & 0o755
    if member.isreg() or member.islnk():
        if not mode & 0o100:
            mode &= ~0o111
        safe.mode = mode | 0o600
    elif member.isdir() or member.issym():
        safe.mode = None  # type: ignore[assignment]  # what data_filter sets: "keep the default"
    else:
        raise UnsafeArchiveError(
            f"refused to unpack the download: member {member.name!r} is a special file"
        )
    # None, as data_filter sets them: "keep the default" (typeshed types them int and str)
    safe.uid = safe.gid = None  # type: ignore[assignment]
    safe.uname = safe.gname = None  # type: ignore[assignment]
    return safe


def unpack(
    archive: BinaryIO | ChunkStream,
    root: str,
    staging: Path,
    links: dict[str, str] | None = None,
    ledger: ReceiveLedger | None = None,
) -> dict[str, FileInfo]:
    """Extract the tar stream ``archive`` (read once, in order) into the empty directory
    ``staging``, checking every member before it is written: the first unsafe one raises
    :class:`UnsafeArchiveError` (the caller removes ``staging``). Returns the size and sha256 of
    each regular file, hashed as it is written; ``links`` gets each hard link's target.

    With a ``ledger`` (a download that may be resumed) ``staging`` holds what earlier attempts
    received: each file is hashed in segments into it, and a member whose PAX record
    ``TRAINJOB.offset`` says so goes on with the file's staged copy from that byte.

    tarfile parses the headers (PAX, GNU, ustar); file data goes from the received chunks to
    the hash and the file without copies."""
    if not isinstance(archive, ChunkStream):
        source = archive
        archive = ChunkStream(lambda: source.read(UNPACK_CHUNK))
    files: dict[str, FileInfo] = {} if ledger is None else ledger.files
    names: set[str] = set() if ledger is None else ledger.names
    made: set[Path] = set()  # directories created
    directories: list[tuple[Path, tarfile.TarInfo]] = []
    try:
        # typeshed's fileobj has write and close too; reading "r:" needs read, tell and seek
        with tarfile.open(fileobj=archive, mode="r:") as tar:  # type: ignore[call-overload]
            for member in tar:
                offset = member.pax_headers.get(OFFSET_KEY, "0")
                _normalise(member)
                why = check_member(member, root, names)
                if why is not None:
                    raise UnsafeArchiveError(
                        f"refused to unpack the download: member {member.name!r} is unsafe "
                        f"({why}); nothing was written"
                    )
                names.add(member.name)
                safe = data_safe(member, str(staging))
                target = staging / safe.name
                if safe.isreg():
                    if member.sparse is not None:
                        raise tarfile.ReadError(f"sparse member {member.name!r} not supported")
                    start = int(offset) if offset.isdigit() else -1
                    if start < 0 or (start and ledger is None):
                        raise tarfile.ReadError(f"bad {OFFSET_KEY} of {member.name!r}")
                    if ledger is None:
                        sha = SegmentHasher(0, {})
                    else:
                        sha = ledger.open_file(member.name, start, start + member.size)
                    files[member.name] = _write_file(
                        archive, member, safe, target, made, sha, start
                    )
                    archive.seek(member.offset_data + member.size + (-member.size % BLOCK))
                elif safe.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    made.add(target)
                    directories.append((target, safe))  # modes last: a read-only directory
                else:
                    if member.islnk() and links is not None:
                        links[member.name] = member.linkname
                    if _DATA_FILTER is not None:
                        tar.extract(safe, staging, set_attrs=False, filter="data")
                    else:  # checked above; this Python's extract takes no filter
                        tar.extract(safe, staging, set_attrs=False)
                    if ledger is not None:
                        ledger.others.add(member.name)
        for target, safe in reversed(directories):
            _set_attrs(target, safe)
    except UnsafeArchiveError:
        raise
    except _FILTER_ERRORS as exc:  # the data filter refused something our checks let by
        raise UnsafeArchiveError(f"refused to unpack the download: {exc}") from None
    except tarfile.TarError as exc:
        raise TransferError(f"the pod sent a broken tar stream: {exc}") from None
    return files


def _write_file(
    archive: ChunkStream,
    member: tarfile.TarInfo,
    safe: tarfile.TarInfo,
    target: Path,
    made: set[Path],
    sha: SegmentHasher,
    start: int = 0,
) -> FileInfo:
    """Write one regular member to ``target`` (from byte ``start`` of the file: the staged copy
    is that long), hashing it on the way (``made``: directories known to exist)."""
    if target.parent not in made:
        target.parent.mkdir(parents=True, exist_ok=True)
        made.add(target.parent)
    got = 0
    with open(target, "r+b" if start else "wb", buffering=0) as out:
        if start:
            if os.fstat(out.fileno()).st_size != start:
                raise TransferError(f"the staged copy of {member.name!r} is not {start} bytes")
            out.seek(start)
        for piece in archive.views(member.size):
            sha.update(piece)
            got += len(piece)
            while piece:
                piece = piece[out.write(piece) :]
        if _BY_FD:  # attributes through the open file: no second path lookup
            if safe.mode is not None:
                os.fchmod(out.fileno(), safe.mode)
            if safe.mtime is not None:
                os.utime(out.fileno(), (safe.mtime, safe.mtime))
    if got != member.size:
        raise tarfile.ReadError(f"the stream ended inside {member.name!r}")
    if not _BY_FD:
        _set_attrs(target, safe)
    digest = sha.finish()
    return FileInfo(start + member.size, "" if start else digest)


_BY_FD = hasattr(os, "fchmod") and os.utime in os.supports_fd


def _set_attrs(target: Path, safe: tarfile.TarInfo) -> None:
    if safe.mode is not None:
        os.chmod(target, safe.mode)
    if safe.mtime is not None:
        os.utime(target, (safe.mtime, safe.mtime))


def place(staging: Path, root: str, dest: Path) -> None:
    """Move the unpacked archive root from ``staging`` to ``dest`` (a directory merges into
    an existing one)."""
    _place(staging / root, dest)


def _place(src: Path, dest: Path) -> None:
    """Move the extracted ``src`` to ``dest`` (a directory merges into an existing one)."""
    if src.is_dir() and not src.is_symlink() and dest.is_dir() and not dest.is_symlink():
        for child in src.iterdir():
            _place(child, dest / child.name)
        return
    if dest.is_dir() and not dest.is_symlink():
        raise TransferError(f"cannot overwrite the directory {dest} with a file; remove it first")
    os.replace(src, dest)
