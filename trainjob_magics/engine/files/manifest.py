"""The pod side of a verified transfer: the constant ``sh`` scripts, one exec each way, and
parsing what they report. Paths only ever travel as argv.

Both ways the pod hashes the files themselves (from the page cache) with the first of
``openssl dgst -sha256``, ``python3`` (hashlib), ``sha256sum`` the image has; with none,
``wc -c`` gives their sizes. Upload: after ``tar xf -``, the files that landed. Download: next
to ``tar cf -``, which streams them (nothing extra in the data's path). Here each file is hashed
as it is read (upload) or written (download), and the two lists must match.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..errors import TransferError

FILES_PY = (
    "import hashlib, json, os, sys\n"
    "top = sys.argv[1]\n"
    "walk = os.walk(top) if os.path.isdir(top) else [(os.path.dirname(top), [], "
    "[os.path.basename(top)])]\n"
    "for root, dirs, files in walk:\n"
    "    for f in files:\n"
    "        p = os.path.join(root, f)\n"
    "        if os.path.isfile(p) and not os.path.islink(p):\n"
    "            h = hashlib.sha256()\n"
    "            with open(p, 'rb') as fh:\n"
    "                for b in iter(lambda: fh.read(1 << 20), b''):\n"
    "                    h.update(b)\n"
    "            print(json.dumps({'path': p, 'sha256': h.hexdigest()}))\n"
)

# hash_files PATH: "#trainjob-TOOL" (openssl, python, sha256sum or wc), then one line per
# regular file under PATH (given as ./NAME: a name may start with "-").
_HASH_FILES = (
    "hash_files() { "
    "if command -v openssl >/dev/null 2>&1; then echo '#trainjob-openssl'; "
    'find "$1" -type f -exec openssl dgst -sha256 -r {} +; '
    "elif command -v python3 >/dev/null 2>&1; then echo '#trainjob-python'; "
    'python3 -c "$files_py" "$1"; '
    "elif command -v sha256sum >/dev/null 2>&1; then echo '#trainjob-sha256sum'; "
    'find "$1" -type f -exec sha256sum -- {} +; '
    "else echo '#trainjob-wc'; "
    'find "$1" -type f -exec wc -c -- {} +; fi; }; '
)

# $1 parent directory (created), $2 entry name, $3 FILES_PY. After tar, the files that landed.
UPLOAD_SH = (
    'mkdir -p -- "$1" && cd -- "$1" && tar xf - || exit; files_py=$3; '
    + _HASH_FILES
    + 'hash_files "./$2"'
)

# $1 parent directory, $2 entry name, $3 FILES_PY. The tar stream goes to stdout; stderr gets
# "#trainjob-kind file|dir SIZE" first (or "#trainjob-missing" / "#trainjob-other", exit 2),
# then tar's messages, then the files' hashes (once tar is done). The exit status is tar's.
DOWNLOAD_SH = (
    'cd -- "$1" 2>/dev/null || { echo "#trainjob-missing" >&2; exit 2; }; files_py=$3; '
    'if [ ! -e "$2" ] && [ ! -L "$2" ]; then echo "#trainjob-missing" >&2; exit 2; fi; '
    'if [ -L "$2" ] || { [ ! -f "$2" ] && [ ! -d "$2" ]; }; then '
    'echo "#trainjob-other" >&2; exit 2; fi; '
    'if [ -d "$2" ]; then k=dir; s=$(du -sk -- "$2" 2>/dev/null); s=${s%%[!0-9]*}; '
    's=$(( ${s:-0} * 1024 )); else k=file; s=$(wc -c < "$2"); fi; '
    'echo "#trainjob-kind $k $s" >&2; '
    + _HASH_FILES
    + 'tar cf - -- "$2" & t=$!; h=$(hash_files "./$2" 2>/dev/null); wait $t; rc=$?; '
    "printf '%s\\n' \"$h\" >&2; exit $rc"
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


def upload_argv(parent: str, name: str, verify: bool) -> list[str]:
    """The pod-side command that unpacks a tar stream from stdin into ``parent``."""
    if not verify:
        return ["sh", "-c", UNPACK_SH, "sh", parent]
    return ["sh", "-c", UPLOAD_SH, "sh", parent, name, FILES_PY]


def download_argv(parent: str, name: str, verify: bool) -> list[str]:
    """The pod-side command that writes ``parent/name`` as a tar stream to stdout."""
    if not verify:
        return ["sh", "-c", PACK_SH, "sh", parent, name]
    return ["sh", "-c", DOWNLOAD_SH, "sh", parent, name, FILES_PY]


def _unescape(line: str) -> tuple[str, str]:
    """``(digest, path)`` of a ``sha256sum``/``openssl -r`` line; a leading backslash means
    the name has ``\\n`` and ``\\\\`` escapes."""
    escaped = line.startswith("\\")
    digest, _, path = (line[1:] if escaped else line).partition(" ")
    path = path[1:] if path[:1] in ("*", " ") else path
    if escaped:
        path = path.replace("\\n", "\n").replace("\\\\", "\\")
    return digest, path


TOOLS = ("openssl", "python", "sha256sum", "wc")


def parse_files(text: str) -> tuple[str, dict[str, FileInfo]]:
    """``(method, {path: FileInfo})`` from a script's list of hashed files (``hash_files``,
    paths as ``./NAME/...``); method is ``sha256`` or ``size``."""
    lines = text.splitlines()
    markers = {f"#trainjob-{tool}" for tool in TOOLS}
    start = next((i for i, ln in enumerate(lines) if ln in markers), None)
    if start is None:
        detail = " ".join(ln for ln in lines if not ln.startswith("#trainjob-"))[:200]
        raise TransferError(f"the pod did not list the files it hashed: {detail or 'nothing'}")
    tool, rows = lines[start][len("#trainjob-") :], lines[start + 1 :]
    method, files = _parse_rows(tool, rows)
    return method, {(p[2:] if p.startswith("./") else p): f for p, f in files.items()}


def _parse_rows(tool: str, rows: list[str]) -> tuple[str, dict[str, FileInfo]]:
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
