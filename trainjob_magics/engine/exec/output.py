"""Captured command output with bounded memory.

Each stream keeps at most ``limit`` bytes in memory (:data:`MAX_MEMORY_OUTPUT` by default); past
that, everything received so far and the rest go to a spill file. Nothing is decoded while the
output streams: :class:`CapturedOutput` decodes on access.

Spill files live in ``<tmp>/trainjob-magics-<pid>-<random>/<session>-<random>/``. A file belongs
to the object that holds it (the :class:`ExecResult`): it is removed when that object is garbage
collected (``weakref.finalize``), at the latest when the interpreter exits. Closing a session
removes its directory once no result holds a file in it: a result the user keeps stays readable.
Roots left behind by a killed process (its pid is gone) are removed when the next process spills.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

from ..result import CapturedOutput, SpillFile

MAX_MEMORY_OUTPUT = 64 << 20  # bytes per stream kept in memory before spilling to a file


ROOT_PREFIX = "trainjob-magics-"


SPILL_BUFFER = 1 << 20  # write buffer of a spill file


class ChunkWriter(Protocol):
    """A sink with ``write``: a binary file, or an object that takes each chunk as a view."""

    def write(self, data: memoryview, /) -> object: ...


Sink = Callable[[bytes], Any] | ChunkWriter  # raw bytes receiver: a callable or a binary file


class SpillDir:
    """Where one session's spill files go; created on the first spill."""

    def __init__(self, label: str = "exec") -> None:
        self.label = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:60] or "x"
        self.path: str | None = None
        self._lock = threading.Lock()

    def new_file(self, prefix: str) -> tuple[BinaryIO, SpillFile]:
        """A fresh spill file opened for writing, and its owner."""
        with self._lock:
            if self.path is None or not os.path.isdir(self.path):
                self.path = tempfile.mkdtemp(prefix=f"{self.label}-", dir=_process_root())
            fd, path = tempfile.mkstemp(prefix=prefix, suffix=".out", dir=self.path)
        owner = SpillFile(path)
        return os.fdopen(fd, "wb", buffering=SPILL_BUFFER), owner

    def close(self) -> None:
        """Remove the directory when no spill file is left in it."""
        with self._lock:
            if self.path is not None:
                with contextlib.suppress(OSError):
                    os.rmdir(self.path)


_ROOT: dict[str, Any] = {}


_ROOT_LOCK = threading.Lock()


def _process_root() -> str:
    """This process's spill root (created once; removed at exit; stale roots swept first)."""
    with _ROOT_LOCK:
        if _ROOT.get("pid") != os.getpid() or not os.path.isdir(_ROOT.get("path", "")):
            sweep_stale_roots()
            path = tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-")
            if "path" not in _ROOT:
                atexit.register(_remove_root)
            _ROOT.update(pid=os.getpid(), path=path)
        return str(_ROOT["path"])


def _remove_root() -> None:
    if _ROOT.get("pid") == os.getpid():
        shutil.rmtree(_ROOT["path"], ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_roots(tmp: str | None = None) -> list[str]:
    """Remove spill roots (ours, by uid) whose process is gone; returns what was removed."""
    base = tmp or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(ROOT_PREFIX):
            continue
        pid_text = entry.name[len(ROOT_PREFIX) :].split("-", 1)[0]
        try:
            st = entry.stat(follow_symlinks=False)
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if not entry.is_dir(follow_symlinks=False) or st.st_uid != os.getuid():
            continue
        if pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


class OutputBuffer:
    """Collects one stream as it arrives: memory up to ``limit`` bytes, then a spill file.

    ``limit`` None keeps everything in memory.
    """

    def __init__(self, limit: int | None, spill_dir: SpillDir | None, prefix: str) -> None:
        self.limit = limit
        self.spill_dir = spill_dir
        self.prefix = prefix
        self.chunks: list[Any] = []
        self.size = 0
        self._file: BinaryIO | None = None
        self._spill: SpillFile | None = None
        self._frozen: CapturedOutput | None = None

    def add(self, data: memoryview | bytes) -> None:
        self.size += len(data)
        if self._file is not None:
            self._file.write(data)
            return
        self.chunks.append(data)
        if self.limit is not None and self.size > self.limit:
            self._start_spill()

    def _start_spill(self) -> None:
        spill_dir = self.spill_dir or default_spill_dir()
        self._file, self._spill = spill_dir.new_file(self.prefix)
        for chunk in self.chunks:
            self._file.write(chunk)
        self.chunks = []
        release_freed_memory()

    def snapshot(self) -> CapturedOutput:
        """What arrived so far, while more may still come (the spill file is flushed)."""
        if self._frozen is not None:
            return self._frozen
        if self._file is not None and self._spill is not None:
            self._file.flush()
            return CapturedOutput(spill=self._spill, size=self.size)
        return CapturedOutput(b"".join(list(self.chunks)))

    def freeze(self) -> CapturedOutput:
        """The captured output (idempotent; no more ``add`` after this)."""
        if self._frozen is None:
            if self._file is not None:
                self._file.close()
                self._frozen = CapturedOutput(spill=self._spill, size=self.size)
            else:
                self._frozen = CapturedOutput(b"".join(self.chunks), size=self.size)
                self.chunks = []
        return self._frozen


_DEFAULT_DIR: list[SpillDir] = []


def default_spill_dir() -> SpillDir:
    """The spill directory of execs outside a session."""
    with _ROOT_LOCK:
        if not _DEFAULT_DIR:
            _DEFAULT_DIR.append(SpillDir("exec"))
        return _DEFAULT_DIR[0]


def sink_writer(sink: Sink) -> Callable[[memoryview], Any]:
    """A callable taking each chunk: ``sink.write`` for a file, else ``sink(bytes)``."""
    write = getattr(sink, "write", None)
    if write is not None:
        return write
    if not callable(sink):
        raise TypeError(f"a sink must be callable or have .write(), got {type(sink).__name__}")
    return lambda data: sink(bytes(data))


_LIBC: list[Any] = []


def release_freed_memory() -> None:
    """Give the memory just freed back to the system (glibc's ``malloc_trim``; elsewhere a no-op).

    The chunks held before a spill (up to ``limit`` bytes) are many small blocks: freed, glibc
    keeps them in the arena of the thread that read them, so each reading thread would keep its
    own ``limit`` bytes resident for good.
    """
    if not _LIBC:
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
        except OSError:
            libc = None
        _LIBC.append(getattr(libc, "malloc_trim", None))
    trim = _LIBC[0]
    if trim is not None:
        trim(0)
