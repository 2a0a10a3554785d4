"""``%trainjob_sessions --all`` and ``%trainjob_close NAME``: every TrainJob of the project."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .status_text import format_age, table

HEADER = ("NAME", "STATE", "RUNTIME", "AGE", "OWNER", "KERNEL", "IDLE", "THIS KERNEL")


def searched(namespaces: list[str]) -> str:
    """`` in namespace a`` / `` in namespaces a, b`` (empty when unknown)."""
    if not namespaces:
        return ""
    return f" in namespace{'s' if len(namespaces) > 1 else ''} {', '.join(namespaces)}"


def format_trainjobs(jobs: Iterable[Any], own_names: set[str], namespaces: list[str]) -> str:
    """A table of managed TrainJobs (a NAMESPACE column when several were searched), which
    namespaces were searched, and how to attach to or close one."""
    jobs = list(jobs)
    if not jobs:
        return f"No TrainJobs created by trainjob-magics{searched(namespaces)}."
    several = len(namespaces) > 1
    rows = []
    for j in jobs:
        owner = f"{j.user}@{j.host}:{j.pid}" if j.host else "?"
        idle = f"{float(j.idle_timeout):g}s" if j.idle_timeout else "off"
        mine = "yes" if j.name in own_names else ""
        row = (j.name, j.state, j.runtime, format_age(j.created), owner, j.kernel[:8], idle, mine)
        rows.append((j.namespace, *row) if several else row)
    header = ("NAMESPACE", *HEADER) if several else HEADER
    return (
        f"TrainJobs created by trainjob-magics{searched(namespaces)}:\n"
        + table(header, rows)
        + "\nAttach: %trainjob_connect --attach NAME    Close: %trainjob_close NAME"
    )
