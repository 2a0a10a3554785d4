"""The pod side of a verified transfer: the constant ``sh`` scripts, one exec each way (and, for
an upload's retry, a probe), and parsing what they report. Paths only ever travel as argv.

With ``python3`` (nearly every ML image) the pod unpacks or packs the tar stream itself and
hashes each file as it passes (``pod_python.py``): one process, one read of the data; each file
is hashed in segments (``resume.py``), so a stream that ended early can be resumed. Without it:
``tar`` (an upload goes again with :func:`upload_tar_argv`; a retry starts again), and the
files hashed with the first of ``openssl dgst -sha256``, ``sha256sum`` the image has (with
neither, ``wc -c`` gives their sizes); upload: after ``tar xf -``, the files that landed;
download: next to ``tar cf -``. Here each file is hashed as it is read (upload) or written
(download), and the two lists must match. An upload lands in a staging directory beside its
destination and is moved into place from there: by the pod's Python once the trailer matched,
or, on tar's way, by a second exec once the client checked the list (``tar xf -`` ends without
an error when its stream was cut between two members).
"""

from __future__ import annotations

import ast
import base64
import functools
import math
import re
import threading
import zlib

from ..errors import TransferError
from .pod_python import CLEAN_PY, PACK_PY, PROBE_PY, untar_code
from .resume import FileInfo, parse_marks
from .staging import STALE_AFTER

# Where the pod's python3 is looked for, in order: a system interpreter first (a version
# manager's shim on PATH, such as pyenv's, adds ~0.1 s to every start), then PATH's.
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "python3")

# The pod-side Python travels without its comments, compressed, in URL-safe base64 (the exec's
# argv is its URL, which many proxies and the local cluster limit to 8 KiB), as the argument
# before the name: ``python3 -c BOOT CODE NAME MODE``.
_BOOT = (
    "import binascii,sys,zlib;exec(zlib.decompress(binascii.a2b_base64("
    'sys.argv.pop(1).replace("-","+").replace("_","/"))))'
)

_AST_LOCK = threading.Lock()  # CPython 3.11's AST conversion is not safe in two threads at once


@functools.cache
def _packed(code: str) -> str:
    with _AST_LOCK:
        source = ast.unparse(ast.parse(code))  # the same code, without comments
    return base64.urlsafe_b64encode(zlib.compress(source.encode(), 9)).decode("ascii")


# Every verified script gets "$1 $2 $3 $4" = parent directory, entry name, packed pod-side
# Python, MODE:TOKEN, then the PYTHONS candidates; $py is the first that exists (empty: none).
# "$4" is MODE:TOKEN (``pod_python.py``).
_ARGS = f"boot='{_BOOT}'; d=$1 n=$2 code=$3 m=$4; shift 4; py=; for c do "
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

# handover STAGED PLACE: move a staged entry into place, as "tar xf -" would have written it
# (files replaced, directories merged, a directory never replaced by a file): a rename when
# nothing is in the way, else a local "tar" copy.
_HANDOVER = (
    "handover() { "
    'if [ ! -e "$2" ] && [ ! -L "$2" ]; then mv -- "$1" "$2"; '
    'else (cd -- "${1%/*}" && tar cf - -- "${1##*/}") | tar xf -; fi; }; '
)

# "tar xf -" into the staging directory $s/data (made afresh; removed when tar fails)
_STAGED_TAR = (
    'rm -rf -- "$s"; mkdir -p -- "$s/data" || exit; '
    '(cd -- "$s/data" && tar xf -) || { rc=$?; rm -rf -- "$s"; exit $rc; }; '
)

# Upload: python3 unpacks the stream into a staging directory, hashing each file as it writes
# it, checks the trailer and moves the files into place (UNTAR_PY, listing on stdout; the
# staging directory stays after a cut stream, exit 3, for a retry). Without python3 it stops
# before reading anything ("#trainjob-nopython", exit 5): UPLOAD_TAR_SH does it with tar.
UPLOAD_SH = (
    _ARGS
    + _NEEDS
    + 'mkdir -p -- "$d" && cd -- "$d" || exit; s=.trainjob-upload-${m#*:}; '
    + 'if [ -z "$py" ]; then echo "#trainjob-nopython" >&2; exit 5; fi; '
    + 'case $m in new:*) rm -rf -- "$s";; esac; '
    + '"$py" -I -S -c "$boot" "$code" "$n" "$m"; rc=$?; '
    + 'case $rc in 0|2) rm -rf -- "$s";; esac; exit $rc'
)

# The staging directories of uploads that never ended ("$5" minutes: STALE_AFTER; sh's sweep,
# pod_python's SWEEP without python3): renamed to .trainjob-upload-gone-*, then removed, when
# nothing under them changed (ctime) for that long and, where flock(1) is, nobody holds the lock.
_SWEEP_SH = (
    "sweep() { for e in .trainjob-upload-*; do "
    '[ -d "$e" ] && [ ! -L "$e" ] && [ "$e" != "$s" ] || continue; t=${e#.trainjob-upload-}; '
    'case $t in gone-*) rm -rf -- "$e"; continue;; ""|*[!0-9a-f]*) continue;; esac; '
    'if [ -e "$e/lock" ] && command -v flock >/dev/null 2>&1 && ! flock -n "$e/lock" true; '
    "then continue; fi; "
    '[ -z "$(find "$e" -cmin -"${1:-60}" 2>/dev/null | head -n 1)" ] || continue; '
    'g=.trainjob-upload-gone-$$-$t; mv -- "$e" "$g" 2>/dev/null || continue; rm -rf -- "$g"; '
    'echo "#trainjob-swept $e" >&2; done; }; '
)

# Upload with tar ("$1 $2 $3 $4 $5" = parent, name, token, 1 to hash, sweep minutes): "tar xf -"
# into the staging directory, the files that landed hashed, and nothing more: the client checks
# them and moves them into place with HANDOVER_SH (a stream cut between two members ends tar
# without an error). No resume (a retry starts again). verify=False (plain tar, as kubectl cp
# does) takes this way too, without the hashing.
UPLOAD_TAR_SH = (
    _NEEDS_TAR
    + 'mkdir -p -- "$1" && cd -- "$1" || exit; n=$2 s=.trainjob-upload-$3; '
    + _SWEEP_SH
    + 'sweep "${5:-60}"; '
    + _HASH_FILES
    + _STAGED_TAR
    + 'if [ "$4" = 1 ]; then (cd -- "$s/data" && hash_files "./$n"); fi; exit 0'
)

# Tar's way, once the client checked what landed ("$1 $2 $3" = parent, token, name): the staged
# entry moved into place, the staging directory removed ("#trainjob-nostage", exit 4: gone).
HANDOVER_SH = (
    'cd -- "$1" || exit; s=.trainjob-upload-$2 n=$3; '
    'if [ ! -e "$s/data/$n" ] && [ ! -L "$s/data/$n" ]; then '
    'echo "#trainjob-nostage" >&2; exit 4; fi; : > "$s/handover" || exit; '
    + _HANDOVER
    + 'handover "$s/data/$n" "$n"; rc=$?; rm -rf -- "$s"; exit $rc'
)

# An upload's retry first asks what the pod holds (PROBE_PY): "#trainjob-python" then the
# journal, "#trainjob-nostage" or, without python3, "#trainjob-nopython" (start again).
PROBE_SH = (
    _ARGS + 'cd -- "$d" 2>/dev/null || { echo "#trainjob-nostage"; exit 0; }; '
    'if [ -z "$py" ]; then echo "#trainjob-nopython"; exit 0; fi; '
    'exec "$py" -I -S -c "$boot" "$code" "$n" "$m"'
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
    'if [ -n "$py" ]; then exec "$py" -I -S -c "$boot" "$code" "$n" "$m"; fi; '
    + _HASH_FILES
    + 'tar cf - -- "$n" & t=$!; h=$(hash_files "./$n" 2>/dev/null); wait $t; rc=$?; '
    "printf '%s\\n' \"$h\" >&2; exit $rc"
)

# verify=False: plain tar, as kubectl cp does.
PACK_SH = (
    _NEEDS_TAR + 'cd -- "$1" 2>/dev/null || { echo "#trainjob-missing" >&2; exit 2; }; '
    'if [ ! -e "$2" ] && [ ! -L "$2" ]; then echo "#trainjob-missing" >&2; exit 2; fi; '
    'if [ -d "$2" ]; then k=dir; else k=file; fi; echo "#trainjob-kind $k 0" >&2; '
    'exec tar cf - -- "$2"'
)

# What an upload that failed for good or was stopped leaves in the pod: its attempts stopped
# (CLEAN_PY; a hand-over in progress is waited for) and its staging directory removed.
CLEAN_SH = (
    _ARGS + 'cd -- "$d" 2>/dev/null || exit 0; '
    'if [ -n "$py" ]; then exec "$py" -I -S -c "$boot" "$code" "$n" "$m"; fi; '
    "s=.trainjob-upload-${m#*:} i=0; "
    'while [ -e "$s/handover" ] && [ $i -lt 20 ]; do sleep 1; i=$((i + 1)); done; '
    'if [ $i -gt 0 ] && [ ! -e "$s/handover" ]; then echo "#trainjob-handedover"; fi; '
    'rm -rf -- "$s"'
)

_SHA256 = re.compile(r"[0-9a-f]{64}")


def upload_argv(
    parent: str,
    name: str,
    verify: bool,
    token: str = "0",
    mode: str = "new",
    stale: float = STALE_AFTER,
) -> list[str]:
    """The pod-side command that unpacks a tar stream from stdin into ``parent`` (through the
    staging directory ``.trainjob-upload-TOKEN``); ``mode``: ``new`` (which first sweeps the
    staging directories nothing holds nor changed in for ``stale`` seconds) or ``resume``
    (``pod_python.py``). ``verify=False``: :func:`upload_tar_argv` without the hashing."""
    if not verify:
        return upload_tar_argv(parent, name, token, verify=False, stale=stale)
    code = _packed(untar_code(stale))
    return ["sh", "-c", UPLOAD_SH, "sh", parent, name, code, f"{mode}:{token}", *PYTHONS]


def upload_tar_argv(
    parent: str, name: str, token: str, verify: bool = True, stale: float = STALE_AFTER
) -> list[str]:
    """The upload with ``tar`` (a pod without python3; ``verify=False``): into the staging
    directory only (:func:`handover_argv` moves it into place); the sweep's bound in whole
    minutes (``find -cmin``), at least 1 unless ``stale`` is 0."""
    minutes = str(max(1, math.ceil(stale / 60)) if stale > 0 else 0)
    flag = "1" if verify else "0"
    return ["sh", "-c", UPLOAD_TAR_SH, "sh", parent, name, token, flag, minutes]


def handover_argv(parent: str, token: str, name: str) -> list[str]:
    """The pod-side command that moves a tar upload's staged entry into place."""
    return ["sh", "-c", HANDOVER_SH, "sh", parent, token, name]


def download_argv(
    parent: str, name: str, verify: bool, token: str = "0", mode: str = "new"
) -> list[str]:
    """The pod-side command that writes ``parent/name`` as a tar stream to stdout; ``mode``
    ``resume`` reads from stdin what to skip and where to start (``pod_python.py``)."""
    if not verify:
        return ["sh", "-c", PACK_SH, "sh", parent, name]
    code = _packed(PACK_PY)
    return ["sh", "-c", DOWNLOAD_SH, "sh", parent, name, code, f"{mode}:{token}", *PYTHONS]


def probe_argv(parent: str, name: str, token: str) -> list[str]:
    """The pod-side command that says what an upload's earlier attempts left to go on from."""
    return ["sh", "-c", PROBE_SH, "sh", parent, name, _packed(PROBE_PY), f"probe:{token}", *PYTHONS]


def clean_argv(parent: str, name: str, token: str) -> list[str]:
    """The pod-side command that stops an upload's attempts and removes its staging
    directory."""
    code = _packed(CLEAN_PY)
    return ["sh", "-c", CLEAN_SH, "sh", parent, name, code, f"clean:{token}", *PYTHONS]


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
    if tool == "python":  # marks (resume.py): a file's last segment; its sha256 if it is whole
        for mark in parse_marks(rows):
            if mark.final:
                files[mark.path] = FileInfo(mark.end, mark.sha256 if mark.start == 0 else "")
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
