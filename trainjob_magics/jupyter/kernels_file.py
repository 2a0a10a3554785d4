"""The namespaces this user's kernels connected in, noted by the magics beside the kernels'
connection files (the Jupyter runtime directory)."""

from __future__ import annotations

import json
from pathlib import Path

FILE_NAME = "trainjob-magics-namespaces.json"


def read_namespaces(runtime_dir: str | Path) -> list[str]:
    """The namespaces noted in ``runtime_dir`` (none when the file is missing or unreadable)."""
    try:
        data = json.loads((Path(runtime_dir) / FILE_NAME).read_text())
    except (OSError, ValueError):
        return []
    return [str(ns) for ns in data if isinstance(ns, str)] if isinstance(data, list) else []


def note_namespace(runtime_dir: str | Path, namespace: str) -> None:
    """Add ``namespace`` to the file (best effort: a read-only directory notes nothing)."""
    known = read_namespaces(runtime_dir)
    if namespace in known:
        return
    path = Path(runtime_dir) / FILE_NAME
    tmp = path.with_name(f".{FILE_NAME}.tmp")
    try:
        tmp.write_text(json.dumps([*known, namespace]))
        tmp.replace(path)
    except OSError:
        pass
