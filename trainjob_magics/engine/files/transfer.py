"""Copy files and directories to and from pods as tar streams over exec, like ``kubectl cp``.

One exec per pod each way (the scripts are in ``manifest.py`` and ``pod_python.py``; paths only
ever as argv). Upload: the tar stream is produced while it is sent (one pod) or once into a
temporary file that every pod reads (several pods), each file hashed as it is read; the pod
unpacks it, hashing each file as it writes it (python3; else ``tar xf -``, then the files that
landed are hashed), and reports the sha256 of every file, which must match. Download: the pod
packs ``NAME``, hashing each file as it reads it (python3; else ``tar cf -`` with the hashing
next to it); the stream is unpacked here as it arrives into a staging directory, every member
checked before it is written (no absolute names, no ``..``, nothing outside the target, no links
escaping it, no devices: the ``kubectl cp`` CVE-2019-1002101 family; then ``tarfile``'s ``data``
filter), each file hashed as it is written; it is moved into place only when every file's
sha256 equals the pod's. A mismatch names the file.

Destinations: ``dest`` is the path of the copy; a ``dest`` ending in ``/`` (or, on download, an
existing local directory when the source is a file) means "inside it, under the source's name".
Relative remote paths are relative to the container's working directory.
"""

from __future__ import annotations

import collections
import contextlib
import os
import posixpath
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError, TransferError
from ..exec.client import ExecClient
from ..exec.fanout import PodCommand
from ..exec.pool import run_each
from ..exec.stop import INTERRUPT_WAIT
from ..result import ExecResult
from .archive import STREAM_CHUNK, UNPACK_CHUNK, ChunkStream, TarStream, place, unpack
from .manifest import (
    NO_TOOLS,
    FileInfo,
    compare,
    download_argv,
    no_tools_message,
    parse_files,
    upload_argv,
)

TransferProgress = Callable[[int, int], None]  # (bytes done, bytes total)


WRITE_SH = 'd=$(dirname -- "$1") && mkdir -p -- "$d" && cat > "$1" && wc -c < "$1"'


@dataclass
class TransferResult:
    """What a copy moved: per-pod errors, files and bytes, and how it was verified."""

    source: str
    destination: str
    pods: list[str]
    files: int = 0
    bytes: int = 0
    verified: str = "none"  # "sha256" | "size" | "none"
    duration: float = 0.0
    errors: dict[str, BaseException] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every pod succeeded."""
        return not self.errors

    @property
    def failed(self) -> list[str]:
        """Pods where the copy failed."""
        return [p for p in self.pods if p in self.errors]

    def summary(self) -> str:
        """One line describing the copy."""
        where = ", ".join(self.pods) if len(self.pods) <= 3 else f"{len(self.pods)} pods"
        what = f"{self.files} file{'s' if self.files != 1 else ''}, {_human(self.bytes)}"
        if self.errors:
            names = ", ".join(self.failed)
            return f"copy {self.source} -> {self.destination} failed on {names}"
        return (
            f"copied {self.source} -> {self.destination} ({what}) on {where} in "
            f"{self.duration:.2f}s, verified by {self.verified}"
        )


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def split_remote(path: str, source_name: str) -> tuple[str, str]:
    """``(parent dir, entry name)`` of a remote destination (``dir/`` -> inside, source name)."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise InvalidInputError(f"remote path must be a non-empty string, got {path!r}")
    if path.endswith("/"):
        parent, name = path.rstrip("/") or "/", source_name
    else:
        parent, name = posixpath.split(path)
        parent = parent or "."
    if name in ("", ".", ".."):
        raise InvalidInputError(f"remote path {path!r} does not name a file or directory")
    return parent, name


class _RangeReader:
    """A private read cursor over an open file descriptor (one per pod, thread-safe)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.offset = 0

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.offset if n < 0 else min(n, self.size - self.offset)
        data = os.pread(self.fd, n, self.offset) if n > 0 else b""
        self.offset += len(data)
        return data


class _ProgressTotal:
    """Thread-safe running total reported as (done, total)."""

    def __init__(self, total: int, callback: TransferProgress | None) -> None:
        self.total = total
        self.done = 0
        self.callback = callback
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        if self.callback is None:
            return
        with self.lock:
            self.done += n
            done = min(self.done, self.total)
        self.callback(done, self.total)

    def finish(self, final: int | None = None) -> None:
        """Report the end: ``(final, final)``, by default the total announced."""
        if self.callback is not None:
            self.total = self.total if final is None else final
            self.callback(self.total, self.total)


def _check(result: ExecResult, what: str, pod: str) -> None:
    if result.returncode == 127 and NO_TOOLS in result.stderr:
        raise TransferError(no_tools_message(pod))
    if result.returncode != 0:
        detail = _one_line(result.stderr or result.stdout) or f"exit code {result.returncode}"
        raise TransferError(f"{what} failed in pod {pod}: {detail}")


def upload(
    client: ExecClient,
    namespace: str,
    targets: Sequence[PodCommand],
    local: str | os.PathLike[str],
    remote: str,
    *,
    progress: TransferProgress | None = None,
    verify: bool = True,
    timeout: float | None = None,
) -> TransferResult:
    """Copy a local file or directory to ``remote`` on every target pod (concurrently, through
    the bounded pod pool), in one exec per pod.

    The tar stream is produced while it is sent (one pod) or once into a temporary file that
    every pod reads (several), hashed as it is produced; the pod hashes it as ``tar`` reads it.
    Raises :class:`TransferError` naming the pods that failed (``.result`` has the details).
    """
    started = time.monotonic()
    src = Path(local).expanduser()
    if not src.exists() and not src.is_symlink():
        raise InvalidInputError(f"local path {str(local)!r} does not exist")
    parent, name = split_remote(remote, src.resolve().name if src.name in ("", ".") else src.name)
    result = TransferResult(str(local), remote, [t.pod for t in targets])
    stream = TarStream(src, name)
    result.files = len(stream.files)
    result.bytes = sum(f.size for f in stream.files.values())
    total = _ProgressTotal(stream.size * len(targets), progress)
    argv = upload_argv(parent, name, verify)
    methods: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        stack.callback(stream.close)
        if len(targets) == 1:
            sources: Callable[[], Any] = lambda: stream  # noqa: E731
        else:
            tmp = stack.enter_context(tempfile.TemporaryFile(prefix="trainjob-upload-"))
            shutil.copyfileobj(stream, tmp, STREAM_CHUNK)
            tmp.flush()
            sources = lambda: _RangeReader(tmp.fileno(), stream.size)  # noqa: E731

        def one(target: PodCommand) -> None:
            try:
                res = client.run(
                    namespace,
                    target.pod,
                    argv,
                    container=target.container,
                    stdin=sources(),
                    on_stdin=total.add,
                    timeout=timeout,
                )
                _check(res, f"unpacking into {parent}", target.pod)
                if verify:
                    methods[target.pod] = _verify_upload(res.stdout, stream, target.pod)
            except Exception as exc:
                result.errors[target.pod] = exc

        run_each(one, targets, name="trainjob-upload")
    total.finish()
    result.verified = _weakest(methods.values()) if verify and methods else "none"
    result.duration = time.monotonic() - started
    if result.errors:
        first = next(iter(result.errors.values()))
        raise TransferError(
            f"upload of {local} to {remote} failed on {', '.join(result.failed)}: "
            f"{_one_line(str(first))}",
            result,
        )
    return result


def _verify_upload(stdout: str, stream: TarStream, pod: str) -> str:
    """Compare the files that landed (sha256, or sizes) with those sent; return the method."""
    method, landed = parse_files(stdout)
    problems = compare(stream.files, landed)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise TransferError(f"integrity check failed in pod {pod}: {'; '.join(problems[:3])}{more}")
    return method


def _weakest(methods: Any) -> str:
    found = set(methods)
    return "size" if "size" in found else "sha256"


def write_file(
    client: ExecClient,
    namespace: str,
    targets: Sequence[PodCommand],
    path: str,
    data: bytes,
    *,
    timeout: float | None = None,
) -> TransferResult:
    """Write ``data`` to ``path`` on every target (parent directories created), size-checked."""
    started = time.monotonic()
    split_remote(path, "")
    if path.endswith("/"):
        raise InvalidInputError(f"remote path {path!r} names a directory, not a file")
    result = TransferResult("<data>", path, [t.pod for t in targets], 1, len(data), "size")

    def one(target: PodCommand) -> None:
        try:
            res = client.run(
                namespace,
                target.pod,
                ["sh", "-c", WRITE_SH, "sh", path],
                container=target.container,
                stdin=data,
                timeout=timeout,
            )
            _check(res, f"writing {path}", target.pod)
            written = res.stdout.strip()
            if written != str(len(data)):
                raise TransferError(
                    f"integrity check failed in pod {target.pod}: {path} has {written or '?'} "
                    f"bytes, expected {len(data)}"
                )
        except Exception as exc:
            result.errors[target.pod] = exc

    run_each(one, targets, name="trainjob-write")
    result.duration = time.monotonic() - started
    if result.errors:
        first = next(iter(result.errors.values()))
        raise TransferError(
            f"writing {path} failed on {', '.join(result.failed)}: {_one_line(str(first))}", result
        )
    return result


class _PodReport:
    """The download script's stderr: the kind and size of the source first, the stream's hash
    last, tar's own messages between them."""

    def __init__(self, total: _ProgressTotal) -> None:
        self.total = total
        self.buf = bytearray()
        self.kind = ""

    def write(self, data: memoryview) -> None:
        self.buf += data
        if not self.kind and b"\n" in self.buf:
            first = self.buf.split(b"\n", 1)[0].decode("utf-8", "replace").split()
            if first[:1] == ["#trainjob-kind"] and len(first) >= 3:
                self.kind = first[1]
                self.total.total = int(first[2]) if first[2].isdigit() else 0

    def lines(self) -> list[str]:
        return self.buf.decode("utf-8", "replace").splitlines()

    def marker(self, name: str) -> str | None:
        for line in self.lines():
            if line.startswith(f"#trainjob-{name}"):
                return line[len(f"#trainjob-{name}") :].strip()
        return None

    def messages(self) -> str:
        return " ".join(ln for ln in self.lines() if not ln.startswith("#trainjob-"))


class _Unpacker:
    """The receiving end of a download: the tar stream is unpacked as it arrives, in one helper
    thread, into a staging directory (created with the first byte), each file hashed as it is
    written, off the socket's thread. The received bytes are copied once, into batches of
    ``UNPACK_CHUNK`` handed over through a bounded queue (memory stays bounded)."""

    DEPTH = 16  # batches queued at most

    def __init__(self, root: str, staging_parent: Path, total: _ProgressTotal) -> None:
        self.root = root
        self.staging_parent = staging_parent
        self.total = total
        self.files: dict[str, FileInfo] = {}
        self.links: dict[str, str] = {}  # hard link -> the file it names
        self.staging: Path | None = None
        self.error: BaseException | None = None
        self._queue: queue.Queue[memoryview | None] = queue.Queue(self.DEPTH)
        self._thread: threading.Thread | None = None
        # Batches are reused: fresh memory costs page faults, on a VM often the host's too.
        self._spare: collections.deque[bytearray] = collections.deque()
        self._batch = bytearray(UNPACK_CHUNK)
        self._filled = 0
        self._current: memoryview | None = None  # the batch the unpacking thread reads
        self._ended = False

    def write(self, data: memoryview) -> None:
        """The stdout sink: copy the chunk into the current batch (the reader's buffer may be
        reused); a full batch goes to the unpacking thread."""
        if self._thread is None:
            self.staging_parent.mkdir(parents=True, exist_ok=True)
            self.staging = Path(
                tempfile.mkdtemp(prefix=".trainjob-download-", dir=self.staging_parent)
            )
            self._thread = threading.Thread(target=self._work, daemon=True, name="trainjob-unpack")
            self._thread.start()
        n = len(data)
        if self._filled + n > UNPACK_CHUNK:
            self._hand_over()
            if n > UNPACK_CHUNK:
                self._queue.put(memoryview(bytes(data)))
                self.total.add(n)
                return
        self._batch[self._filled : self._filled + n] = data
        self._filled += n
        self.total.add(n)

    def _hand_over(self) -> None:
        if self._filled:
            self._queue.put(memoryview(self._batch)[: self._filled])
            self._batch = self._spare.pop() if self._spare else bytearray(UNPACK_CHUNK)
            self._filled = 0

    def _next_batch(self) -> memoryview | None:
        """The unpacking thread's next batch; the one before is done with and reused."""
        done, self._current = self._current, None
        if done is not None and isinstance(done.obj, bytearray):
            self._spare.append(done.obj)
        if self._ended:
            return None
        batch = self._queue.get()
        self._ended = batch is None
        self._current = batch
        return batch

    def _work(self) -> None:
        assert self.staging is not None
        stream = ChunkStream(self._next_batch)
        try:
            self.files = unpack(stream, self.root, self.staging, self.links)
        except BaseException as exc:  # reported by finish()
            self.error = exc
        while self._next_batch() is not None:  # tar's padding, or all of it after an error
            pass

    def finish(self) -> None:
        """Wait until everything received is unpacked; raise its error."""
        if self._thread is None:
            return
        self._hand_over()
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error

    def discard(self) -> None:
        """Stop (if running) and remove the staging directory."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(INTERRUPT_WAIT)
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)


def download(
    client: ExecClient,
    namespace: str,
    target: PodCommand,
    remote: str,
    local: str | os.PathLike[str],
    *,
    progress: TransferProgress | None = None,
    verify: bool = True,
    timeout: float | None = None,
) -> TransferResult:
    """Copy ``remote`` (file or directory) from one pod to ``local`` in one exec: the pod packs
    and hashes the tar stream, which is unpacked here as it arrives (every member checked
    before it is written), hashed, and compared with the pod's hash before it is moved into
    place."""
    started = time.monotonic()
    parent, name = split_remote(remote.rstrip("/") or remote, "")
    dest = Path(local).expanduser()
    into = str(local).endswith(("/", os.sep))
    staging_parent = dest if into or dest.is_dir() else dest.parent
    total = _ProgressTotal(0, progress)
    report = _PodReport(total)
    sink = _Unpacker(name, staging_parent, total)
    try:
        res = client.run(
            namespace,
            target.pod,
            download_argv(parent, name, verify),
            container=target.container,
            stdout_sink=sink,
            stderr_sink=report,
            timeout=timeout,
        )
        sink.finish()
        _check_download(res, report, remote, target.pod)
        if not any(f == name or f.startswith(f"{name}/") for f in sink.files) and (
            sink.staging is None or not (sink.staging / name).exists()
        ):
            raise TransferError(f"the archive from pod {target.pod} does not contain {name!r}")
        method = "none"
        if verify:
            method, listed = parse_files("\n".join(report.lines()))
            received = dict(sink.files)  # a file tar sent as a hard link has its target's bytes
            received.update({n: sink.files[t] for n, t in sink.links.items() if t in sink.files})
            problems = compare(listed, received)
            if problems:
                more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
                raise TransferError(
                    f"integrity check failed for {remote} from pod {target.pod}: "
                    f"{'; '.join(problems[:3])}{more} (did files change during the copy?)"
                )
        if into or (report.kind == "file" and dest.is_dir()):
            dest = dest / name
        assert sink.staging is not None
        place(sink.staging, name, dest)
    finally:
        sink.discard()
    nbytes = sum(f.size for f in sink.files.values())
    total.finish(nbytes)
    return TransferResult(
        remote,
        str(dest),
        [target.pod],
        files=len(sink.files),
        bytes=nbytes,
        verified=method,
        duration=time.monotonic() - started,
    )


def _check_download(res: ExecResult, report: _PodReport, remote: str, pod: str) -> None:
    if report.marker("notools") is not None:
        raise TransferError(no_tools_message(pod))
    if report.marker("missing") is not None:
        raise TransferError(f"{remote} does not exist in pod {pod}")
    if report.marker("other") is not None:
        raise TransferError(f"{remote} in pod {pod} is not a regular file or directory")
    if res.returncode != 0:
        detail = _one_line(report.messages()) or f"exit code {res.returncode}"
        raise TransferError(f"archiving {remote} failed in pod {pod}: {detail}")
