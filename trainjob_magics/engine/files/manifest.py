"""The pod side of a verified transfer: the constant ``sh`` scripts that unpack or pack a tar
stream while hashing it (``tee`` into a FIFO read by a hasher, so the pod reads the stream once),
and parsing what they report.

The hasher is the first of ``openssl dgst -sha256``, ``python3`` (hashlib), ``sha256sum`` that
the image has; with none, ``wc -c`` counts the bytes (verified by size). Without ``mktemp`` or
``mkfifo`` an upload is checked by the size of every file that landed, and a download hashes a
second ``tar`` of the same files. Paths only ever travel as argv.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import TransferError

HASH_PY = (
    "import hashlib, sys\n"
    "h = hashlib.sha256()\n"
    "for b in iter(lambda: sys.stdin.buffer.read(1 << 20), b''):\n"
    "    h.update(b)\n"
    "print(h.hexdigest())\n"
)

_HASH_IN = (
    "hash_in() { "
    "if command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r; "
    'elif command -v python3 >/dev/null 2>&1; then python3 -c "$hash_py"; '
    "elif command -v sha256sum >/dev/null 2>&1; then sha256sum; "
    "else wc -c; fi; }; "
)

_FIFO = (
    "fifo() { "
    "d=$(mktemp -d 2>/dev/null || mktemp -d ./.trainjob-XXXXXX 2>/dev/null) || return 1; "
    'mkfifo "$d/p" 2>/dev/null && return 0; rm -rf "$d"; return 1; }; '
)

# $1 parent directory (created), $2 entry name, $3 HASH_PY. Prints "#trainjob-hash H" (H: the
# sha256 or byte count of the stream as tar read it), or, without a FIFO, "#trainjob-sizes" and
# "N path" per file. The exit status is tar's.
UPLOAD_SH = (
    'mkdir -p -- "$1" && cd -- "$1" || exit 1; hash_py=$3; ' + _HASH_IN + _FIFO + "if fifo; then "
    'hash_in < "$d/p" > "$d/h" & '
    'tee -- "$d/p" | { tar xf - && cat > /dev/null; }; rc=$?; wait; '
    'h=; read -r h _ < "$d/h"; rm -rf "$d"; echo "#trainjob-hash $h"; exit $rc; fi; '
    'tar xf - || exit; echo "#trainjob-sizes"; exec find "$2" -type f -exec wc -c -- {} +'
)

# $1 parent directory, $2 entry name, $3 HASH_PY. The tar stream goes to stdout; stderr gets
# "#trainjob-kind file|dir SIZE" first (or "#trainjob-missing" / "#trainjob-other", exit 2) and
# "#trainjob-hash H" last. The exit status is tar's.
DOWNLOAD_SH = (
    'cd -- "$1" 2>/dev/null || { echo "#trainjob-missing" >&2; exit 2; }; hash_py=$3; '
    'if [ ! -e "$2" ] && [ ! -L "$2" ]; then echo "#trainjob-missing" >&2; exit 2; fi; '
    'if [ -L "$2" ] || { [ ! -f "$2" ] && [ ! -d "$2" ]; }; then '
    'echo "#trainjob-other" >&2; exit 2; fi; '
    'if [ -d "$2" ]; then k=dir; s=$(du -sk -- "$2" 2>/dev/null); s=${s%%[!0-9]*}; '
    's=$(( ${s:-0} * 1024 )); else k=file; s=$(wc -c < "$2"); fi; '
    'echo "#trainjob-kind $k $s" >&2; ' + _HASH_IN + _FIFO + "if fifo; then "
    'hash_in < "$d/p" > "$d/h" & '
    '{ tar cf - -- "$2"; echo $? > "$d/rc"; } | tee -- "$d/p"; wait; '
    'h=; rc=1; read -r h _ < "$d/h"; read -r rc < "$d/rc"; rm -rf "$d"; '
    'else tar cf - -- "$2"; rc=$?; h=$(tar cf - -- "$2" | hash_in); h=${h%% *}; fi; '
    'echo "#trainjob-hash $h" >&2; exit $rc'
)

# verify=False: plain tar, as kubectl cp does.
UNPACK_SH = 'mkdir -p -- "$1" && exec tar xf - -C "$1"'
PACK_SH = 'cd -- "$1" 2>/dev/null || { echo "#trainjob-missing" >&2; exit 2; }; ' + (
    'if [ ! -e "$2" ] && [ ! -L "$2" ]; then echo "#trainjob-missing" >&2; exit 2; fi; '
    'if [ -d "$2" ]; then k=dir; else k=file; fi; echo "#trainjob-kind $k 0" >&2; '
    'exec tar cf - -- "$2"'
)

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass
class FileInfo:
    """Size and sha256 (empty when not known) of one regular file."""

    size: int
    sha256: str = ""


@dataclass(frozen=True)
class StreamCheck:
    """What the pod measured of the stream: its sha256, or only its byte count."""

    method: str  # "sha256" | "size"
    value: str


def upload_argv(parent: str, name: str, verify: bool) -> list[str]:
    """The pod-side command that unpacks a tar stream from stdin into ``parent``."""
    if not verify:
        return ["sh", "-c", UNPACK_SH, "sh", parent]
    return ["sh", "-c", UPLOAD_SH, "sh", parent, name, HASH_PY]


def download_argv(parent: str, name: str, verify: bool) -> list[str]:
    """The pod-side command that writes ``parent/name`` as a tar stream to stdout."""
    if not verify:
        return ["sh", "-c", PACK_SH, "sh", parent, name]
    return ["sh", "-c", DOWNLOAD_SH, "sh", parent, name, HASH_PY]


def parse_hash(value: str) -> StreamCheck:
    """The hasher's answer: a sha256, or a byte count (``wc -c``); raise when it has none."""
    value = value.strip().lower()
    if _SHA256.fullmatch(value):
        return StreamCheck("sha256", value)
    if value.isdigit():
        return StreamCheck("size", value)
    raise TransferError(
        "the pod could not hash the transfer (no openssl, python3, sha256sum or wc worked); "
        "pass verify=False to copy without the check"
    )


def stream_problem(check: StreamCheck, sha256: str, size: int) -> str | None:
    """Why the pod's view of the stream differs from ours; None when it matches."""
    if check.method == "sha256" and check.value != sha256:
        return (
            f"the tar stream's sha256 differs ({check.value[:12]}... in the pod, "
            f"{sha256[:12]}... sent or received here)"
        )
    if check.method == "size" and int(check.value) != size:
        return f"the tar stream has {check.value} bytes in the pod, {size} sent"
    return None


def parse_sizes(lines: list[str]) -> dict[str, FileInfo]:
    """``wc -c`` lines (``N path``; ``N total`` skipped) as {path: FileInfo(size)}."""
    files: dict[str, FileInfo] = {}
    for line in lines:
        count, _, path = line.strip().partition(" ")
        if path != "total" and count.isdigit():
            files[path] = FileInfo(int(count))
    return files


def compare(expected: dict[str, FileInfo], actual: dict[str, FileInfo]) -> list[str]:
    """Mismatches between two manifests (only paths in ``expected`` count)."""
    problems: list[str] = []
    for path, want in expected.items():
        got = actual.get(path)
        if got is None:
            problems.append(f"{path} is missing")
        elif want.sha256 and got.sha256 and want.sha256 != got.sha256:
            problems.append(f"{path} differs (sha256)")
        elif want.size >= 0 and got.size >= 0 and want.size != got.size:
            problems.append(f"{path} has {got.size} bytes, expected {want.size}")
    return problems
