"""Look at the local cluster's pod processes through /proc (they are local processes)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (zombies count as dead: PID 1 here does not reap orphans)."""
    return _state(pid) not in (None, "Z", "X")


def processes_with_env(key: str, value: str) -> list[int]:
    """Live pids whose environment holds ``key=value``."""
    needle = f"{key}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in env and alive(int(entry)):
            found.append(int(entry))
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def wait_dead(pids: list[int], timeout: float) -> list[int]:
    """Wait until every pid is dead; returns those still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def marker_processes(marker: str, prefix: bool = False) -> list[int]:
    """Live pids whose command line contains (or, with ``prefix``, starts with) ``marker``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        line = cmdline(int(entry))
        if (line.startswith(marker) if prefix else marker in line) and alive(int(entry)):
            out.append(int(entry))
    return out
