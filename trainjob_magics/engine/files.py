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

import hashlib
import json
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .errors import InvalidInputError, TrainJobError
from .exec_client import ExecClient
from .fanout import PodCommand
from .result import ExecResult

TransferProgress = Callable[[int, int], None]  # (bytes done, bytes total)

UNPACK_SH = 'mkdir -p -- "$1" && exec tar xf - -C "$1"'
WRITE_SH = 'd=$(dirname -- "$1") && mkdir -p -- "$d" && cat > "$1" && wc -c < "$1"'
MANIFEST_PY = r"""
import hashlib, json, os, stat, sys
name = sys.argv[1]
def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
try:
    st = os.lstat(name)
except OSError as exc:
    emit({"kind": "missing", "error": exc.strerror or str(exc)})
    sys.exit(0)
def entry(path):
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    emit({"path": path, "size": size, "sha256": h.hexdigest()})
if stat.S_ISDIR(st.st_mode):
    emit({"kind": "dir"})
    for root, dirs, files in os.walk(name):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            if stat.S_ISREG(os.lstat(p).st_mode):
                entry(p)
elif stat.S_ISREG(st.st_mode):
    emit({"kind": "file"})
    entry(name)
else:
    emit({"kind": "other"})
"""
MANIFEST_SH = (
    'cd -- "$1" 2>/dev/null || { echo missing; exit 0; }; '
    'if command -v python3 >/dev/null 2>&1; then exec python3 -c "$3" "$2"; fi; '
    'if [ ! -e "$2" ]; then echo "missing"; exit 0; fi; '
    'if [ -d "$2" ]; then echo "dir"; else echo "file"; fi; '
    "if command -v sha256sum >/dev/null 2>&1; then "
    'echo "#sha256sum"; exec find "$2" -type f -exec sha256sum -- {} +; fi; '
    'echo "#wc"; exec find "$2" -type f -exec wc -c -- {} +'
)


class TransferError(TrainJobError):
    """A copy failed (remote tar error, integrity mismatch); ``result`` has the details."""

    def __init__(self, message: str, result: TransferResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class UnsafeArchiveError(TransferError):
    """A downloaded archive holds a member that would land outside the target; nothing written."""


@dataclass
class FileInfo:
    """Size and sha256 (empty when the pod could only count bytes) of one regular file."""

    size: int
    sha256: str = ""


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


# ------------------------------------------------------------------ remote paths


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


def manifest_argv(parent: str, name: str) -> list[str]:
    """The pod-side command that lists ``parent/name``'s files with size and sha256."""
    return ["sh", "-c", MANIFEST_SH, "sh", parent, name, MANIFEST_PY]


def parse_manifest(text: str) -> tuple[str, dict[str, FileInfo], str]:
    """``(kind, {path: FileInfo}, method)`` from the manifest command's output.

    kind is ``file``, ``dir``, ``missing`` or ``other``; method ``sha256`` or ``size``.
    """
    lines = text.splitlines()
    if not lines:
        raise TransferError("the pod sent an empty file list")
    files: dict[str, FileInfo] = {}
    if lines[0].startswith("{"):
        head = json.loads(lines[0])
        for line in lines[1:]:
            item = json.loads(line)
            files[item["path"]] = FileInfo(int(item["size"]), item["sha256"])
        return str(head.get("kind")), files, "sha256"
    kind = lines[0].strip()
    method = lines[1].strip() if len(lines) > 1 else ""
    for line in lines[2:]:
        if method == "#sha256sum":
            digest, _, path = line.partition("  ")
            if digest.startswith("\\"):  # escaped name (newline or backslash in it)
                digest = digest[1:]
                path = path.replace("\\n", "\n").replace("\\\\", "\\")
            files[path] = FileInfo(-1, digest)
        else:
            count, _, path = line.strip().partition(" ")
            if path != "total" and count.isdigit():
                files[path] = FileInfo(int(count))
    return kind, files, "sha256" if method == "#sha256sum" else "size"


def compare(expected: dict[str, FileInfo], actual: dict[str, FileInfo], method: str) -> list[str]:
    """Mismatches between two manifests (only paths in ``expected`` count)."""
    problems: list[str] = []
    for path, want in expected.items():
        got = actual.get(path)
        if got is None:
            problems.append(f"{path} is missing")
        elif method == "sha256" and want.sha256 and got.sha256 and want.sha256 != got.sha256:
            problems.append(f"{path} differs (sha256)")
        elif want.size >= 0 and got.size >= 0 and want.size != got.size:
            problems.append(f"{path} has {got.size} bytes, expected {want.size}")
    return problems


# ------------------------------------------------------------------ building the upload tar


class _HashingReader:
    """Reads a file for tarfile while hashing it."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        self.sha.update(data)
        self.size += len(data)
        return data


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


def build_tar(local: Path, arcname: str, out: BinaryIO) -> dict[str, FileInfo]:
    """Write ``local`` (file or directory) as ``arcname`` to ``out``; return its manifest."""
    manifest: dict[str, FileInfo] = {}
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk(local):
            rel = path.relative_to(local).as_posix()
            name = arcname if rel == "." else f"{arcname}/{rel}"
            info = tar.gettarinfo(str(path), arcname=name)
            if info is None or not (info.isreg() or info.isdir() or info.issym()):
                continue  # sockets, fifos, devices: not copied
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isreg():
                with open(path, "rb") as fh:
                    reader = _HashingReader(fh)
                    tar.addfile(info, reader)  # type: ignore[arg-type]
                if reader.size != info.size:
                    raise TransferError(f"{path} changed size while it was being read")
                manifest[name] = FileInfo(reader.size, reader.sha.hexdigest())
            else:
                tar.addfile(info)
    return manifest


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


# ------------------------------------------------------------------ upload


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


# ------------------------------------------------------------------ download


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


def scan_archive(archive: BinaryIO, root: str) -> tuple[list[tarfile.TarInfo], dict[str, FileInfo]]:
    """Check every member (raise :class:`UnsafeArchiveError` on the first bad one) and hash the
    regular files; nothing is written."""
    archive.seek(0)
    members: list[tarfile.TarInfo] = []
    manifest: dict[str, FileInfo] = {}
    names: set[str] = set()
    try:
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            for member in tar:
                member.name = member.name.rstrip("/") or member.name
                if member.name.startswith("./"):
                    member.name = member.name[2:]
                why = check_member(member, root, names)
                if why is not None:
                    raise UnsafeArchiveError(
                        f"refused to unpack the download: member {member.name!r} is unsafe "
                        f"({why}); nothing was written"
                    )
                names.add(member.name)
                members.append(member)
                if member.isreg():
                    sha = hashlib.sha256()
                    fh = tar.extractfile(member)
                    assert fh is not None
                    for block in iter(lambda: fh.read(1 << 20), b""):  # noqa: B023
                        sha.update(block)
                    manifest[member.name] = FileInfo(member.size, sha.hexdigest())
    except tarfile.TarError as exc:
        raise TransferError(f"the pod sent a broken tar stream: {exc}") from None
    return members, manifest


def extract(archive: BinaryIO, members: list[tarfile.TarInfo], root: str, dest: Path) -> None:
    """Extract the checked ``members`` so archive root ``root`` becomes local path ``dest``."""
    archive.seek(0)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".trainjob-download-", dir=dest.parent))
    try:
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            wanted = {m.name for m in members}
            chosen = []
            for member in tar:
                name = member.name.rstrip("/") or member.name
                if name.startswith("./"):
                    name = name[2:]
                if name in wanted:
                    member.name = name
                    if member.islnk() and member.linkname.startswith("./"):
                        member.linkname = member.linkname[2:]
                    chosen.append(member)
            tar.extractall(staging, members=chosen, filter="data")
        _place(staging / root, dest)
    except tarfile.TarError as exc:  # the data filter refused something our checks let through
        raise UnsafeArchiveError(f"refused to unpack the download: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _place(src: Path, dest: Path) -> None:
    """Move the extracted ``src`` to ``dest`` (a directory merges into an existing one)."""
    if src.is_dir() and not src.is_symlink() and dest.is_dir() and not dest.is_symlink():
        for child in src.iterdir():
            _place(child, dest / child.name)
        return
    if dest.is_dir() and not dest.is_symlink():
        raise TransferError(f"cannot overwrite the directory {dest} with a file; remove it first")
    os.replace(src, dest)


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


def local_manifest(path: Path, arcname: str) -> dict[str, FileInfo]:
    """Size and sha256 of each regular file under ``path``, keyed like archive members."""
    out: dict[str, FileInfo] = {}
    for p in _walk(path):
        st = p.lstat()
        if stat.S_ISREG(st.st_mode):
            rel = p.relative_to(path).as_posix()
            key = arcname if rel == "." else f"{arcname}/{rel}"
            sha = hashlib.sha256()
            with open(p, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    sha.update(block)
            out[key] = FileInfo(st.st_size, sha.hexdigest())
    return out


__all__ = [
    "FileInfo",
    "TransferError",
    "TransferResult",
    "UnsafeArchiveError",
    "archive_argv",
    "check_member",
    "download",
    "local_manifest",
    "parse_manifest",
    "scan_archive",
    "split_remote",
    "upload",
    "write_file",
]
