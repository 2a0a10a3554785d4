"""Tar archives of local trees (hashed while written) and the safe unpack of downloaded ones:
no member may land outside the destination."""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import TransferError, UnsafeArchiveError
from .manifest import FileInfo


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
