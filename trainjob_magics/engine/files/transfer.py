"""Copy files and directories to and from pods as tar streams over exec, like ``kubectl cp``.

Upload: the tar is built locally (hashing each file as it is read), sent on stdin to
``sh -c 'mkdir -p -- "$1" && exec tar xf - -C "$1"' sh DIR`` (paths only ever as argv), then the
pod reports size + sha256 of what landed (``python3``, else ``sha256sum``, else byte counts).
Download: the pod's manifest first, then ``tar cf - -C DIR -- NAME`` streamed into a temporary
file, every member checked before anything is written (no absolute names, no ``..``, nothing
outside the target, no links escaping it, no devices: the ``kubectl cp`` CVE-2019-1002101
family), then extracted with ``tarfile``'s ``data`` filter and compared with the manifest.

Destinations: ``dest`` is the path of the copy; a ``dest`` ending in ``/`` (or, on download, an
existing local directory when the source is a file) means "inside it, under the source's name".
Relative remote paths are relative to the container's working directory.
"""

from __future__ import annotations

import os
import posixpath
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
from ..result import ExecResult
from .archive import build_tar, extract, scan_archive
from .manifest import FileInfo, compare, manifest_argv, parse_manifest

TransferProgress = Callable[[int, int], None]  # (bytes done, bytes total)


UNPACK_SH = 'mkdir -p -- "$1" && exec tar xf - -C "$1"'


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


def archive_argv(parent: str, name: str) -> list[str]:
    """The pod-side command that writes ``parent/name`` as a tar stream to stdout."""
    return ["tar", "cf", "-", "-C", parent, "--", name]


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

    def finish(self) -> None:
        if self.callback is not None:
            self.callback(self.total, self.total)


def _check(result: ExecResult, what: str, pod: str) -> None:
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
    """Copy a local file or directory to ``remote`` on every target pod (concurrently).

    Raises :class:`TransferError` naming the pods that failed (``.result`` has the details).
    """
    started = time.monotonic()
    src = Path(local).expanduser()
    if not src.exists() and not src.is_symlink():
        raise InvalidInputError(f"local path {str(local)!r} does not exist")
    parent, name = split_remote(remote, src.resolve().name if src.name in ("", ".") else src.name)
    result = TransferResult(str(local), remote, [t.pod for t in targets])
    with tempfile.TemporaryFile(prefix="trainjob-upload-") as tmp:
        manifest = build_tar(src, name, tmp)  # type: ignore[arg-type]
        tmp.flush()
        size = tmp.seek(0, os.SEEK_END)
        result.files = len(manifest)
        result.bytes = sum(f.size for f in manifest.values())
        total = _ProgressTotal(size * len(targets), progress)
        methods: dict[str, str] = {}

        def one(target: PodCommand) -> None:
            try:
                reader = _RangeReader(tmp.fileno(), size)
                res = client.run(
                    namespace,
                    target.pod,
                    ["sh", "-c", UNPACK_SH, "sh", parent],
                    container=target.container,
                    stdin=reader,  # type: ignore[arg-type]
                    on_stdin=total.add,
                    timeout=timeout,
                )
                _check(res, f"unpacking into {parent}", target.pod)
                if verify:
                    methods[target.pod] = _verify_remote(
                        client, namespace, target, parent, name, manifest
                    )
            except Exception as exc:
                result.errors[target.pod] = exc

        _run_all(one, targets)
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


def _weakest(methods: Any) -> str:
    found = set(methods)
    return "size" if "size" in found else "sha256"


def _run_all(fn: Callable[[PodCommand], None], targets: Sequence[PodCommand]) -> None:
    threads = [threading.Thread(target=fn, args=(t,), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _verify_remote(
    client: ExecClient,
    namespace: str,
    target: PodCommand,
    parent: str,
    name: str,
    expected: dict[str, FileInfo],
) -> str:
    """Compare what landed in the pod with ``expected``; return the method used."""
    res = client.run(namespace, target.pod, manifest_argv(parent, name), container=target.container)
    _check(res, f"listing {posixpath.join(parent, name)}", target.pod)
    _kind, actual, method = parse_manifest(res.stdout)
    problems = compare(expected, actual, method)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise TransferError(
            f"integrity check failed in pod {target.pod}: {'; '.join(problems[:3])}{more}"
        )
    return method


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

    _run_all(one, targets)
    result.duration = time.monotonic() - started
    if result.errors:
        first = next(iter(result.errors.values()))
        raise TransferError(
            f"writing {path} failed on {', '.join(result.failed)}: {_one_line(str(first))}", result
        )
    return result


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
    """Copy ``remote`` (file or directory) from one pod to ``local``, checked and verified."""
    started = time.monotonic()
    parent, name = split_remote(remote.rstrip("/") or remote, "")
    listing = client.run(
        namespace, target.pod, manifest_argv(parent, name), container=target.container
    )
    _check(listing, f"listing {remote}", target.pod)
    kind, expected, method = parse_manifest(listing.stdout)
    if kind == "missing":
        raise TransferError(f"{remote} does not exist in pod {target.pod}")
    if kind not in ("file", "dir"):
        raise TransferError(f"{remote} in pod {target.pod} is not a regular file or directory")
    dest = Path(local).expanduser()
    if str(local).endswith(("/", os.sep)) or (kind == "file" and dest.is_dir()):
        dest = dest / name
    total = _ProgressTotal(sum(max(f.size, 0) for f in expected.values()), progress)
    with tempfile.TemporaryFile(prefix="trainjob-download-") as tmp:

        def sink(data: bytes) -> None:
            tmp.write(data)
            total.add(len(data))

        res = client.run(
            namespace,
            target.pod,
            archive_argv(parent, name),
            container=target.container,
            stdout_sink=sink,
            timeout=timeout,
        )
        _check(res, f"archiving {remote}", target.pod)
        tmp.flush()
        members, got = scan_archive(tmp, name)  # type: ignore[arg-type]
        if not any(m.name == name for m in members):
            raise TransferError(f"the archive from pod {target.pod} does not contain {name!r}")
        if verify:
            problems = compare(expected, got, method)
            if problems:
                raise TransferError(
                    f"integrity check failed for {remote} from pod {target.pod}: "
                    + "; ".join(problems[:3])
                )
        extract(tmp, members, name, dest)  # type: ignore[arg-type]
    total.finish()
    return TransferResult(
        remote,
        str(dest),
        [target.pod],
        files=len(got),
        bytes=sum(f.size for f in got.values()),
        verified=method if verify else "none",
        duration=time.monotonic() - started,
    )
