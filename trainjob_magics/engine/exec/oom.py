"""Whether a command killed with exit status 137 ran out of memory, and the limit it ran into.

The kernel's OOM killer picks the largest process of the container's memory cgroup, usually the
command itself; the container (and so the pod) lives on, so nothing in the pod's status says
so. The container's own cgroup does: ``oom_kill`` counts its OOM kills (cgroup v2
``memory.events``; v1 ``memory.oom_control``, Linux 4.13+), and ``memory.max`` (v2) or
``memory.limit_in_bytes`` (v1) is its limit. A runtime mounts the container's cgroup at
``/sys/fs/cgroup`` (runc: read-only, its own namespace on v2), so one small read in the pod
answers. A count higher than the last one seen for the pod means this command was killed."""

from __future__ import annotations

import re

# one exec: the OOM counters, a separator, the limits (v2 and v1; the missing ones print nothing)
PROBE = (
    "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null;"
    " echo ---;"
    " cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null"
)
PROBE_ARGV = ["sh", "-c", PROBE]
NO_LIMIT = 1 << 62  # v1 writes 9223372036854771712 for "no limit", v2 "max"
_UNITS = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def parse_probe(text: str) -> tuple[int | None, int | None]:
    """(OOM kills so far, memory limit in bytes) from :data:`PROBE`'s output; None: unknown
    (no cgroup memory files readable) or no limit."""
    counters, _, limits = text.partition("---")
    kills = [int(n) for n in re.findall(r"^oom_kill (\d+)$", counters, re.M)]
    limit = None
    for token in limits.split():
        if token.isdigit() and int(token) < NO_LIMIT:
            limit = int(token)
            break
    return (max(kills) if kills else None), limit


def format_bytes(n: int) -> str:
    """A limit as a Kubernetes quantity when it is a whole number of a binary unit: ``160Mi``."""
    for unit, size in _UNITS:
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n} bytes"


def oom_note(kills_before: int, kills_now: int | None, limit: int | None) -> str:
    """The note for a killed command, or '' when the kernel killed nothing new."""
    if kills_now is None or kills_now <= kills_before:
        return ""
    where = f"the container's memory limit ({format_bytes(limit)})" if limit else "memory"
    return (
        f"out of memory: the kernel's OOM killer ended it at {where}; use less memory or ask "
        "for more (%trainjob_connect --memory, connect(memory=...))"
    )


__all__ = ["PROBE_ARGV", "format_bytes", "oom_note", "parse_probe"]
