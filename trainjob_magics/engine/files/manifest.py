"""The pod side of a verified transfer: the constant ``sh`` scripts, one exec each way, and
parsing what they report. Paths only ever travel as argv.

Upload: ``tar xf -`` unpacks the stream, then the files that landed are hashed (from the page
cache) by the first of ``openssl dgst -sha256``, ``python3`` (hashlib), ``sha256sum`` the image
has; with none, ``wc -c`` gives their sizes. Download: ``tar cf -`` writes the stream to stdout
while a second ``tar`` of the same files, piped into the same kind of hasher, runs next to it
(no ``tee`` in the data's path), and reports the stream's sha256 on stderr.
"""

from __future__ import annotations

import json
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

FILES_PY = (
    "import hashlib, json, os, sys\n"
    "for root, dirs, files in os.walk(sys.argv[1]) if os.path.isdir(sys.argv[1]) else "
    "[(os.path.dirname(sys.argv[1]), [], [os.path.basename(sys.argv[1])])]:\n"
    "    for f in files:\n"
    "        p = os.path.join(root, f)\n"
    "        if os.path.isfile(p) and not os.path.islink(p):\n"
    "            h = hashlib.sha256()\n"
    "            with open(p, 'rb') as fh:\n"
    "                for b in iter(lambda: fh.read(1 << 20), b''):\n"
    "                    h.update(b)\n"
    "            print(json.dumps({'path': p, 'sha256': h.hexdigest()}))\n"
)

_HASH_IN = (
    "hash_in() { "
    "if command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r; "
    'elif command -v python3 >/dev/null 2>&1; then python3 -c "$hash_py"; '
    "elif command -v sha256sum >/dev/null 2>&1; then sha256sum; "
    "else wc -c; fi; }; "
)

# $1 parent directory (created), $2 entry name, $3 FILES_PY. After tar: "#trainjob-METHOD"
# (openssl, python, sha256sum or wc), then one line per regular file that landed.
UPLOAD_SH = (
    'mkdir -p -- "$1" && cd -- "$1" && tar xf - || exit; '
    "if command -v openssl >/dev/null 2>&1; then echo '#trainjob-openssl'; "
    'exec find "$2" -type f -exec openssl dgst -sha256 -r {} +; fi; '
    "if command -v python3 >/dev/null 2>&1; then echo '#trainjob-python'; "
    'exec python3 -c "$3" "$2"; fi; '
    "if command -v sha256sum >/dev/null 2>&1; then echo '#trainjob-sha256sum'; "
    'exec find "$2" -type f -exec sha256sum -- {} +; fi; '
    "echo '#trainjob-wc'; exec find \"$2\" -type f -exec wc -c -- {} +"
)

# $1 parent directory, $2 entry name, $3 HASH_PY. The tar stream goes to stdout; stderr gets
# "#trainjob-kind file|dir SIZE" first (or "#trainjob-missing" / "#trainjob-other", exit 2) and
# "#trainjob-hash H" (the stream's sha256, or its byte count) when the second tar is done. The
# exit status is tar's.
DOWNLOAD_SH = (
    'cd -- "$1" 2>/dev/null || { echo "#trainjob-missing" >&2; exit 2; }; hash_py=$3; '
    'if [ ! -e "$2" ] && [ ! -L "$2" ]; then echo "#trainjob-missing" >&2; exit 2; fi; '
    'if [ -L "$2" ] || { [ ! -f "$2" ] && [ ! -d "$2" ]; }; then '
    'echo "#trainjob-other" >&2; exit 2; fi; '
    'if [ -d "$2" ]; then k=dir; s=$(du -sk -- "$2" 2>/dev/null); s=${s%%[!0-9]*}; '
    's=$(( ${s:-0} * 1024 )); else k=file; s=$(wc -c < "$2"); fi; '
    'echo "#trainjob-kind $k $s" >&2; '
    + _HASH_IN
    + '{ h=$(tar cf - -- "$2" 2>/dev/null | hash_in); echo "#trainjob-hash ${h%% *}" >&2; } & '
    'tar cf - -- "$2"; rc=$?; wait; exit $rc'
)

# verify=False: plain tar, as kubectl cp does.
UNPACK_SH = 'mkdir -p -- "$1" && exec tar xf - -C "$1"'
PACK_SH = (
    'cd -- "$1" 2>/dev/null || { echo "#trainjob-missing" >&2; exit 2; }; '
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
    return ["sh", "-c", UPLOAD_SH, "sh", parent, name, FILES_PY]


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
            f"{sha256[:12]}... received; did files change during the copy?)"
        )
    if check.method == "size" and int(check.value) != size:
        return f"the tar stream has {check.value} bytes in the pod, {size} sent"
    return None


def _unescape(line: str) -> tuple[str, str]:
    """``(digest, path)`` of a ``sha256sum``/``openssl -r`` line; a leading backslash means
    the name has ``\\n`` and ``\\\\`` escapes."""
    escaped = line.startswith("\\")
    digest, _, path = (line[1:] if escaped else line).partition(" ")
    path = path[1:] if path[:1] in ("*", " ") else path
    if escaped:
        path = path.replace("\\n", "\n").replace("\\\\", "\\")
    return digest, path


def parse_files(text: str) -> tuple[str, dict[str, FileInfo]]:
    """``(method, {path: FileInfo})`` from the upload script's report of the files that landed;
    method is ``sha256`` or ``size``."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("#trainjob-")), None)
    if start is None:
        raise TransferError(
            f"the pod did not list what it unpacked: {' '.join(text.split())[:200]}"
        )
    tool, rows = lines[start][len("#trainjob-") :], lines[start + 1 :]
    files: dict[str, FileInfo] = {}
    if tool == "wc":
        for line in rows:
            count, _, path = line.strip().partition(" ")
            if path != "total" and count.isdigit():
                files[path] = FileInfo(int(count))
        return "size", files
    if tool == "python":
        for line in rows:
            item = json.loads(line)
            files[item["path"]] = FileInfo(-1, item["sha256"])
        return "sha256", files
    for line in rows:
        digest, path = _unescape(line)
        if _SHA256.fullmatch(digest):
            files[path] = FileInfo(-1, digest)
        elif files and not line.startswith("\\"):  # a newline in the last name (unescaped)
            last = next(reversed(files))
            files[f"{last}\n{line}"] = files.pop(last)
    return "sha256", files


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
