"""The pod side of a verified transfer: the constant ``sh`` scripts, one exec each way, and
parsing what they report. Paths only ever travel as argv.

With ``python3`` (nearly every ML image) the pod unpacks or packs the tar stream itself and
hashes each file as it passes (``pod_python.py``): one process, one read of the data. Without
it: ``tar``, and the files hashed with the first of ``openssl dgst -sha256``, ``sha256sum`` the
image has (with neither, ``wc -c`` gives their sizes); upload: after ``tar xf -``, the files
that landed; download: next to ``tar cf -``. Here each file is hashed as it is read (upload)
or written (download), and the two lists must match.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from dataclasses import dataclass

from ..errors import TransferError
from .pod_python import PACK_PY, UNTAR_PY

# Where the pod's python3 is looked for, in order: a system interpreter first (a version
# manager's shim on PATH, such as pyenv's, adds ~0.1 s to every start), then PATH's.
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "python3")

# The pod-side Python travels compressed (the exec's argv is its URL, which servers limit to
# ~8 KiB), as the argument before the name: ``python3 -c BOOT CODE NAME``.
_BOOT = "import binascii,sys,zlib;exec(zlib.decompress(binascii.a2b_base64(sys.argv.pop(1))))"


def _packed(code: str) -> str:
    return base64.b64encode(zlib.compress(code.encode(), 9)).decode("ascii")


# Every verified script gets "$1 $2 $3" = parent directory, entry name, packed pod-side Python,
# then the PYTHONS candidates; $py is the first that exists (empty: no python3).
_ARGS = f"boot='{_BOOT}'; d=$1 n=$2 code=$3; shift 3; py=; for c do "
_ARGS += 'if command -v "$c" >/dev/null 2>&1; then py=$c; break; fi; done; '

NO_TOOLS = "#trainjob-notools"
# Neither python3 nor tar (a minimal image): "#trainjob-notools" on stderr, exit 127, before
# anything is made in the pod (no_tools_message says what to do)
_NEEDS = (
    'if [ -z "$py" ] && ! command -v tar >/dev/null 2>&1; then '
    'echo "#trainjob-notools" >&2; exit 127; fi; '
)
_NEEDS_TAR = 'command -v tar >/dev/null 2>&1 || { echo "#trainjob-notools" >&2; exit 127; }; '


def no_tools_message(pod: str) -> str:
    """One line for a pod whose image has neither python3 nor tar."""
    return (
        f"file transfer needs python3 or tar in the pod, and pod {pod} has neither: use an "
        "image with one of them (python3 also runs %%trainjob --python), or copy files with "
        "a command of your own (e.g. base64 in a %%trainjob cell)"
    )


# Without python3: hash_files PATH prints "#trainjob-TOOL" (openssl, sha256sum or wc), then one
# line per regular file under PATH (given as ./NAME: a name may start with "-").
_HASH_FILES = (
    "hash_files() { "
    "if command -v openssl >/dev/null 2>&1; then echo '#trainjob-openssl'; "
    'find "$1" -type f -exec openssl dgst -sha256 -r {} +; '
    "elif command -v sha256sum >/dev/null 2>&1; then echo '#trainjob-sha256sum'; "
    'find "$1" -type f -exec sha256sum -- {} +; '
    "else echo '#trainjob-wc'; "
    'find "$1" -type f -exec wc -c -- {} +; fi; }; '
)

# Upload: python3 unpacks the stream and hashes each file as it writes it (UNTAR_PY, listing on
# stdout); without it, "tar xf -", then the files that landed are hashed.
UPLOAD_SH = (
    _ARGS
    + _NEEDS
    + 'mkdir -p -- "$d" && cd -- "$d" || exit; '
    + 'if [ -n "$py" ]; then exec "$py" -I -S -c "$boot" "$code" "$n"; fi; '
    + "tar xf - || exit; "
    + _HASH_FILES
    + 'hash_files "./$n"'
)

# Download: the tar stream goes to stdout; stderr gets "#trainjob-kind file|dir SIZE" first (or
# "#trainjob-missing" / "#trainjob-other", exit 2), then tar's messages, then the files' hashes.
# python3 packs and hashes in one read (PACK_PY); without it, "tar cf -" and, next to it, the
# hashing of the same files. The exit status is tar's.
DOWNLOAD_SH = (
    _ARGS + _NEEDS + 'cd -- "$d" 2>/dev/null || { echo "#trainjob-missing" >&2; exit 2; }; '
    'if [ ! -e "$n" ] && [ ! -L "$n" ]; then echo "#trainjob-missing" >&2; exit 2; fi; '
    'if [ -L "$n" ] || { [ ! -f "$n" ] && [ ! -d "$n" ]; }; then '
    'echo "#trainjob-other" >&2; exit 2; fi; '
    'if [ -d "$n" ]; then k=dir; s=$(du -sk -- "$n" 2>/dev/null); s=${s%%[!0-9]*}; '
    's=$(( ${s:-0} * 1024 )); else k=file; s=$(wc -c < "$n"); fi; '
    'echo "#trainjob-kind $k $s" >&2; '
    'if [ -n "$py" ]; then exec "$py" -I -S -c "$boot" "$code" "$n"; fi; '
    + _HASH_FILES
    + 'tar cf - -- "$n" & t=$!; h=$(hash_files "./$n" 2>/dev/null); wait $t; rc=$?; '
    "printf '%s\\n' \"$h\" >&2; exit $rc"
)

_UNTAR, _PACK = _packed(UNTAR_PY), _packed(PACK_PY)

# verify=False: plain tar, as kubectl cp does.
UNPACK_SH = _NEEDS_TAR + 'mkdir -p -- "$1" && exec tar xf - -C "$1"'
PACK_SH = (
    _NEEDS_TAR + 'cd -- "$1" 2>/dev/null || { echo "#trainjob-missing" >&2; exit 2; }; '
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
    return ["sh", "-c", UPLOAD_SH, "sh", parent, name, _UNTAR, *PYTHONS]


def download_argv(parent: str, name: str, verify: bool) -> list[str]:
    """The pod-side command that writes ``parent/name`` as a tar stream to stdout."""
    if not verify:
        return ["sh", "-c", PACK_SH, "sh", parent, name]
    return ["sh", "-c", DOWNLOAD_SH, "sh", parent, name, _PACK, *PYTHONS]


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
