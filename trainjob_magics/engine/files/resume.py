"""Resuming a transfer whose exec stream ended early: by file and byte, verified by sha256.

Both sides hash every regular file in *segments*: a segment starts at byte 0, or where a retry
resumed the file, and its sha256 is taken at every multiple of :data:`CHECKPOINT` and at the
file's end (a *mark*: ``#trainjob-part``/``#trainjob-file START END SHA256 IDENT HEXPATH``;
``IDENT`` is the source file's ``size:mtime_ns``, ``-`` where it is not known). The sender's
marks and the receiver's must agree. After a dropped stream, each file is kept up to its last
mark both sides agree on (nothing after it counts), and the next attempt sends the files not
complete from there: the pod packs a download's partial file from that byte on (a PAX record
``TRAINJOB.offset`` in its header, and only while the file's ``IDENT`` is unchanged), or
appends an upload's tar member of the same kind to its staging copy. A file is verified when
its segments, one after the other, cover it from byte 0 to its end and each segment's sha256
matched: every byte is covered by one sha256 comparison, and no file is hashed twice.

Downloads: the marks come with the pod's stderr, the local ones from the unpacking
(:class:`ReceiveLedger`). Uploads: the pod writes its marks to a journal in its staging
directory (read back by a probe exec before the retry), the local ones come from the tar stream
(:class:`SendLedger`); the upload's stdin ends with a *trailer* listing the segments the pod must
hold, which it checks before anything is moved into place.

Only transport failures are retried (:func:`transport_failure`): the stream ended early, a
connection reset, an API server that answered 5xx or could not be reached.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import (
    ApiServerError,
    ConnectionLostError,
    InvalidInputError,
    TransferError,
)
from ..kube.retry import is_transient

CHECKPOINT = 8 << 20  # bytes between two marks of a file: a dropped stream loses at most this
DEFAULT_RETRIES = 3
OFFSET_KEY = "TRAINJOB.offset"  # PAX record: this member's data starts at this byte of the file
CUT = "#trainjob-cut"  # the upload's pod-side end saw its stdin end inside the stream
NO_STAGE = "#trainjob-nostage"  # the upload's staging directory is gone: start again
NO_PYTHON = "#trainjob-nopython"  # the pod cannot resume (no python3): start again
EXPECT, EXPECT_END = "#trainjob-expect", "#trainjob-end"  # the upload trailer's first/last line

Segment = tuple[str, int, int, str]  # (path, start, end, sha256)


@dataclass
class FileInfo:
    """Size and sha256 (empty when not known) of one regular file."""

    size: int
    sha256: str = ""


def check_retries(retries: object) -> int:
    """``retries``: a whole number, 0 or more."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidInputError(f"retries must be a whole number, 0 or more, got {retries!r}")
    return retries


def transport_failure(exc: BaseException) -> str | None:
    """Why ``exc`` is a failure of the transport that a retry may get past (a few words), or
    None for anything else (the pod's or the user's error, a timeout, an interrupt)."""
    if isinstance(exc, ConnectionLostError):
        return "the connection was lost"
    if isinstance(exc, ApiServerError) and exc.reason != "TLSError":
        if exc.partial is not None:  # an InternalError status after the command had started
            return "the API server ended the stream"
        if is_transient(exc):
            if exc.status is None:
                return "the API server could not be reached"
            return f"the API server answered {exc.status}"
    return None


def backoff(retry: int) -> float:
    """Seconds before retry number ``retry`` (1-based): 0.02 s, then 4 times more each, at most
    1 s (a connection that failed again is waited for by the exec's own handshake retries)."""
    return min(1.0, 0.02 * 4 ** max(0, retry - 1))


def human(n: float) -> str:
    """``412.0 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def retry_line(what: str, reached: int, total: int, retry: int, retries: int, how: str) -> str:
    """The one progress line of a retry: ``download: the stream ended at 412.0 MiB of 1.0 GiB;
    resuming (retry 1 of 3)``."""
    where = f" at {human(reached)} of {human(total)}" if total else f" after {human(reached)}"
    return f"{what}: the stream ended{where}; {how} (retry {retry} of {retries})"


def path_hex(name: str) -> str:
    """A name as the pod writes it in marks: the hex of its bytes (any byte may be in a name)."""
    return name.encode("utf-8", "surrogateescape").hex()


def path_of_hex(text: str) -> str:
    return bytes.fromhex(text).decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Mark:
    """One ``#trainjob-part`` / ``#trainjob-file`` line: the sha256 of bytes [start, end)."""

    path: str
    start: int
    end: int
    sha256: str
    ident: str = "-"
    final: bool = False  # ``#trainjob-file``: ``end`` is the file's end

    def line(self) -> str:
        kind = "file" if self.final else "part"
        ident = self.ident or "-"
        return (
            f"#trainjob-{kind} {self.start} {self.end} {self.sha256} {ident} "
            f"{path_hex(self.path)}\n"
        )


def parse_mark(line: str) -> Mark | None:
    """The mark of a ``#trainjob-part``/``#trainjob-file`` line (None for any other line)."""
    kind, _, rest = line.partition(" ")
    if kind not in ("#trainjob-part", "#trainjob-file"):
        return None
    parts = rest.split(" ")
    if len(parts) != 5 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    try:
        path = path_of_hex(parts[4])
    except ValueError:
        return None
    return Mark(path, int(parts[0]), int(parts[1]), parts[2], parts[3], kind == "#trainjob-file")


def parse_marks(lines: Iterable[str]) -> Iterator[Mark]:
    for line in lines:
        mark = parse_mark(line)
        if mark is not None:
            yield mark


class SegmentHasher:
    """The sha256 of a file from byte ``start`` on, its hex digest recorded in ``marks`` (end ->
    digest) at every multiple of :data:`CHECKPOINT` and, by :meth:`finish`, at the end."""

    def __init__(self, start: int, marks: dict[int, str]) -> None:
        self.start = self.pos = start
        self.marks = marks
        self.sha = hashlib.sha256()
        self._next = (start // CHECKPOINT + 1) * CHECKPOINT

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while len(view) >= self._next - self.pos:
            room = self._next - self.pos
            self.sha.update(view[:room])
            self.pos = self._next
            self._next += CHECKPOINT
            self.marks[self.pos] = self.sha.copy().hexdigest()
            view = view[room:]
        if len(view):
            self.sha.update(view)
            self.pos += len(view)

    def finish(self) -> str:
        digest = self.sha.hexdigest()
        self.marks[self.pos] = digest
        return digest


@dataclass
class Chain:
    """One file's segments: where each started (``starts``), this side's marks of each
    (``local``: start -> {end: sha256}) and the other side's (``remote``: (start, end) ->
    sha256)."""

    total: int
    starts: list[int] = field(default_factory=lambda: [0])
    local: dict[int, dict[int, str]] = field(default_factory=lambda: {0: {}})
    remote: dict[tuple[int, int], str] = field(default_factory=dict)
    ident: str = ""

    def verified(self) -> tuple[int, bool, bool]:
        """``(end of the verified part, whole file verified, a mark differs)``."""
        done = 0
        for i, start in enumerate(self.starts):
            if start != done:
                return done, False, False
            mine = self.local.get(start, {})
            differs = any(self.remote.get((start, end), sha) != sha for end, sha in mine.items())
            agreed = [end for end, sha in mine.items() if self.remote.get((start, end)) == sha]
            if differs:
                return done, False, True
            if i + 1 < len(self.starts):
                if self.starts[i + 1] not in agreed:
                    return done, False, False
                done = self.starts[i + 1]
                continue
            done = max(agreed, default=start)
            return done, self.total in agreed, False
        return done, False, False

    def resume_at(self, offset: int) -> None:
        """The next segment starts at ``offset`` (a byte both sides agreed on)."""
        self.starts = [s for s in self.starts if s < offset] + [offset]
        self.local = {s: m for s, m in self.local.items() if s < offset}
        self.local[offset] = {}
        self.remote = {k: v for k, v in self.remote.items() if k[0] < offset and k[1] <= offset}

    def segments(self, path: str) -> list[Segment] | None:
        """This side's segments, from 0 to the end (None while one is not hashed to its end)."""
        out: list[Segment] = []
        for i, start in enumerate(self.starts):
            end = self.starts[i + 1] if i + 1 < len(self.starts) else self.total
            sha = self.local.get(start, {}).get(end)
            if sha is None:
                return None
            out.append((path, start, end, sha))
        return out


class ReceiveLedger:
    """What a download received so far, across attempts: each regular file's chain (local marks
    from the unpacking, the pod's from its stderr), the other members written, and the
    names seen (for the hard-link checks)."""

    def __init__(self) -> None:
        self.chains: dict[str, Chain] = {}
        self.files: dict[str, FileInfo] = {}  # size (and sha256 when sent whole) of each file
        self.links: dict[str, str] = {}  # hard link -> the file it names
        self.names: set[str] = set()
        self.others: set[str] = set()  # symlinks and hard links written (not sent again)
        self.resumable = False  # the pod packs with python3 (it can start inside a file)

    def open_file(self, name: str, offset: int, total: int) -> SegmentHasher:
        """A file member arrived (from ``offset`` on, ``total`` bytes in all): its hasher."""
        chain = self.chains.get(name)
        if offset:
            if chain is None or chain.starts[-1] != offset or chain.local[offset]:
                raise TransferError(
                    f"the pod resumed {name!r} at byte {offset}, which was not asked for"
                )
            return SegmentHasher(offset, chain.local[offset])
        chain = self.chains[name] = Chain(total)
        return SegmentHasher(0, chain.local[0])

    def absorb(self, lines: Iterable[str]) -> None:
        """The pod's marks (its stderr, one attempt)."""
        for mark in parse_marks(lines):
            chain = self.chains.get(mark.path)
            if chain is not None and mark.start in chain.local:
                chain.remote[(mark.start, mark.end)] = mark.sha256
                if mark.ident != "-":
                    chain.ident = mark.ident

    def kept(self) -> int:
        """Bytes verified so far (what a resume does not send again)."""
        return sum(chain.verified()[0] for chain in self.chains.values())

    def problems(self) -> list[str]:
        """Files not verified from 0 to their end, as :func:`manifest.compare` words them."""
        out = []
        for name, chain in self.chains.items():
            _, whole, differs = chain.verified()
            if differs:
                out.append(f"{name} differs (sha256)")
            elif not whole:
                out.append(f"{name} is missing")
        return out

    def plan(self, staging: Path | None) -> bytes:
        """Prepare the next attempt: each file is cut back to its verified part (in
        ``staging``) and the pod is told, on stdin, what to skip (``s HEXPATH``: complete, or a
        link already written) and where to start a partial file (``o OFFSET IDENT HEXPATH``).
        Raises :class:`TransferError` when a mark differs (the file changed on the pod)."""
        lines: list[str] = []
        for name, chain in self.chains.items():
            done, whole, differs = chain.verified()
            if differs:
                raise TransferError(
                    f"integrity check failed for {name}: differs (sha256) (did it change "
                    "during the copy?)"
                )
            if whole:
                lines.append(f"s {path_hex(name)}")
                continue
            if done and chain.ident and staging is not None:
                os.truncate(staging / name, done)
                chain.resume_at(done)
                lines.append(f"o {done} {chain.ident} {path_hex(name)}")
        lines += [f"s {path_hex(name)}" for name in sorted(self.others)]
        body = "\n".join(lines).encode("ascii")
        return b"%d\n" % len(body) + body


class SendLedger:
    """What one pod of an upload holds, across attempts: each regular file's chain (local marks
    from the tar streams sent, the pod's from its journal)."""

    def __init__(self) -> None:
        self.chains: dict[str, Chain] = {}

    def adopt(
        self, starts: dict[str, int], sizes: dict[str, int], marks: dict[str, dict[int, str]]
    ) -> None:
        """A stream is being sent: ``starts`` says where each file it carries starts (its size
        in ``sizes``), ``marks[name]`` is the dict its local marks are recorded in."""
        for name, start in starts.items():
            chain = self.chains.get(name)
            if start == 0 or chain is None or chain.starts[-1] != start:
                chain = self.chains[name] = Chain(sizes[name])
            chain.local[start] = marks[name]

    def absorb(self, lines: Iterable[str]) -> None:
        """The pod's journal, replayed: a ``#trainjob-seg START`` line (the pod started writing
        the file there) drops its marks beyond START."""
        for chain in self.chains.values():
            chain.remote = {}
        for line in lines:
            if line.startswith("#trainjob-seg "):
                parts = line.split(" ")
                if len(parts) != 3 or not parts[1].isdigit():
                    continue
                seg = self.chains.get(path_of_hex(parts[2]))
                if seg is not None:
                    cut = int(parts[1])
                    seg.remote = {k: v for k, v in seg.remote.items() if cut and k[1] <= cut}
                continue
            mark = parse_mark(line)
            if mark is not None and mark.path in self.chains:
                self.chains[mark.path].remote[(mark.start, mark.end)] = mark.sha256

    def plan(self) -> tuple[set[str], dict[str, int]]:
        """``(files the pod holds whole, file -> the byte to go on from)`` for the next stream."""
        skip: set[str] = set()
        offsets: dict[str, int] = {}
        for name, chain in self.chains.items():
            done, whole, differs = chain.verified()
            if whole and not differs:
                skip.add(name)
            elif done and not differs:
                chain.resume_at(done)
                offsets[name] = done
        return skip, offsets

    def segments(self) -> list[Segment]:
        out: list[Segment] = []
        for name, chain in self.chains.items():
            segs = chain.segments(name)
            if segs is None:
                raise TransferError(f"{name} was not hashed to its end")
            out += segs
        return out

    def trailer(self) -> bytes:
        """The end of the upload's stdin, after the tar stream: every segment the pod must
        hold (``START END SHA256 HEXPATH``), which it checks before moving anything."""
        rows = [f"{s} {e} {sha} {path_hex(p)}\n" for p, s, e, sha in self.segments()]
        return f"{EXPECT}\n{''.join(rows)}{EXPECT_END}\n".encode("ascii")

    def problems(self, listing: str) -> list[str]:
        """Files whose segments are not all in the pod's listing, as ``compare`` words them."""
        got = {(m.path, m.start, m.end, m.sha256) for m in parse_marks(listing.splitlines())}
        listed = {m[0] for m in got}
        out = []
        for name, chain in self.chains.items():
            segs = chain.segments(name) or []
            if name not in listed:
                out.append(f"{name} is missing")
            elif not segs or any(seg not in got for seg in segs):
                out.append(f"{name} differs (sha256)")
        return out


__all__ = [
    "CHECKPOINT",
    "DEFAULT_RETRIES",
    "Chain",
    "Mark",
    "ReceiveLedger",
    "SegmentHasher",
    "SendLedger",
    "backoff",
    "check_retries",
    "parse_mark",
    "parse_marks",
    "retry_line",
    "transport_failure",
]
