"""Staging directories of transfers, and the sweep of those whose transfer never ended.

A download unpacks into ``.trainjob-download-<random>/data`` beside its destination and holds
an exclusive ``flock`` on ``.trainjob-download-<random>/lock`` from the moment the directory exists
(the lock file is locked before it gets its name) until it is removed. A process that died
(SIGKILL, a kernel restarted) holds nothing: the next download into the same directory
(:func:`sweep_local`) removes every such directory at once, whatever its age. A live download
in another process or kernel holds its lock and is never touched; one in this process is
known by its path (POSIX locks, which NFS uses for ``flock``, do not exclude their own
process). A directory without a lock file (made by an older version, or its maker killed
between ``mkdir`` and the lock) goes when nothing in it changed for :data:`STALE_AFTER`.

An upload's staging directory is in the pod (``pod_python.py``): its lock is held only while
an attempt runs there, so between two attempts (a dropped stream, the backoff, the probe) it is
the age that protects it: :data:`STALE_AFTER`, an hour, far above that gap (about a minute: the
exec's silence bound, 30 s, plus ``api_retry_seconds``, 30 s by default). A swept upload that
was alive after all starts again (its probe finds no staging directory); nothing half-written
is moved into place.

:func:`no_interrupt` holds off a Ctrl-C while a transfer moves its result into place or cleans
up, so neither stops halfway.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the age alone decides
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)

STALE_AFTER = 3600.0  # seconds: nothing held and nothing changed for this long is swept
DOWNLOAD_PREFIX = ".trainjob-download-"
GONE = "gone-"  # a swept directory's name while it is removed

_LIVE: set[str] = set()  # this process's download staging directories
_LIVE_LOCK = threading.Lock()


@contextlib.contextmanager
def no_interrupt() -> Iterator[None]:
    """A Ctrl-C (SIGINT) during the block is raised after it (main thread only; elsewhere no
    KeyboardInterrupt arrives)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[tuple[int, FrameType | None]] = []

    def later(signum: int, frame: FrameType | None) -> None:
        got.append((signum, frame))

    previous: Any = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler not set from Python: left alone
        yield
        return
    try:
        signal.signal(signal.SIGINT, later)
    except ValueError:  # not the main interpreter's main thread after all
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if got:
        if callable(previous):
            previous(*got[0])
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt


class LocalStage:
    """A download's staging directory beside its destination, locked while it lives: the
    archive is unpacked into :attr:`data`."""

    def __init__(self, parent: Path) -> None:
        parent.mkdir(parents=True, exist_ok=True)
        with no_interrupt():
            self.path = Path(tempfile.mkdtemp(prefix=DOWNLOAD_PREFIX, dir=parent))
            with _LIVE_LOCK:
                _LIVE.add(str(self.path))
            self._fd: int | None = None
            fresh = self.path / ".lock-new"
            fd = os.open(fresh, os.O_RDWR | os.O_CREAT | CLOEXEC, 0o600)
            if fcntl is not None:
                with contextlib.suppress(OSError):  # no flock here: the age decides
                    fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(fresh, self.path / "lock")  # named once locked
            self._fd = fd
            self.data = self.path / "data"
            self.data.mkdir()

    def remove(self) -> None:
        """Remove the directory and what is left in it (a Ctrl-C waits until it is gone)."""
        with no_interrupt():
            shutil.rmtree(self.path, ignore_errors=True)
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            with _LIVE_LOCK:
                _LIVE.discard(str(self.path))


def _held(path: Path) -> bool | None:
    """Whether a live process holds ``path/lock`` (None: no lock file, or no flock here). A
    lock found free stays free: only the process that made the directory ever takes it."""
    try:
        fd = os.open(path / "lock", os.O_RDONLY | CLOEXEC)
    except OSError:
        return None
    if fcntl is None:
        os.close(fd)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):
        os.close(fd)
        return True
    except OSError:
        os.close(fd)
        return None
    os.close(fd)
    return False


def changed_since(path: Path, since: float) -> bool:
    """Something under ``path`` changed (ctime: not set by tar or utime) after ``since``; True
    when that cannot be told."""
    try:
        if os.lstat(path).st_ctime > since:
            return True
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    if os.lstat(os.path.join(root, name)).st_ctime > since:
                        return True
    except OSError:
        return True
    return False


def sweep_local(parent: Path, stale: float | None = None) -> list[str]:
    """Remove the download staging directories in ``parent`` whose download never ended: a
    lock no process holds, or (no lock file) nothing changed for ``stale`` seconds (default
    :data:`STALE_AFTER`). Returns their names; never raises."""
    bound = STALE_AFTER if stale is None else stale
    swept: list[str] = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(DOWNLOAD_PREFIX)]
    except OSError:
        return swept
    since = time.time() - bound
    for entry in entries:
        path = Path(entry.path)
        try:
            if entry.is_symlink() or not entry.is_dir():
                continue
        except OSError:
            continue
        if entry.name[len(DOWNLOAD_PREFIX) :].startswith(GONE):  # a sweep stopped halfway
            shutil.rmtree(path, ignore_errors=True)
            continue
        with _LIVE_LOCK:
            if str(path) in _LIVE:
                continue
        held = _held(path)
        if held or (held is None and changed_since(path, since)):
            continue
        gone = path.with_name(f"{DOWNLOAD_PREFIX}{GONE}{secrets.token_hex(6)}")
        try:
            os.rename(path, gone)
        except OSError:
            continue  # another sweep took it
        with no_interrupt():
            shutil.rmtree(gone, ignore_errors=True)
        swept.append(entry.name)
    if swept:
        log.info(
            "removed %d staging director%s of downloads that never ended in %s: %s",
            len(swept),
            "y" if len(swept) == 1 else "ies",
            parent,
            ", ".join(swept),
        )
    return swept


__all__ = [
    "DOWNLOAD_PREFIX",
    "STALE_AFTER",
    "LocalStage",
    "changed_since",
    "no_interrupt",
    "sweep_local",
]
