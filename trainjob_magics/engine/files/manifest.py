"""The remote manifest (size and sha256 of every file) that verifies a transfer, and comparing
it with the local one."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import TransferError

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


@dataclass
class FileInfo:
    """Size and sha256 (empty when the pod could only count bytes) of one regular file."""

    size: int
    sha256: str = ""


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
