"""``%trainjob_sessions --all`` and ``%trainjob_close NAME``: every TrainJob of the project."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .status_text import format_age, table

HEADER = ("NAME", "STATE", "RUNTIME", "AGE", "OWNER", "KERNEL", "IDLE", "THIS KERNEL")


def format_trainjobs(jobs: Iterable[Any], own_names: set[str], namespace: str = "") -> str:
    """A table of managed TrainJobs plus how to attach to or close one."""
    jobs = list(jobs)
    if not jobs:
        where = f" in namespace {namespace}" if namespace else ""
        return f"No TrainJobs created by trainjob-magics{where}."
    rows = []
    for j in jobs:
        owner = f"{j.user}@{j.host}:{j.pid}" if j.host else "?"
        idle = f"{float(j.idle_timeout):g}s" if j.idle_timeout else "off"
        mine = "yes" if j.name in own_names else ""
        rows.append(
            (j.name, j.state, j.runtime, format_age(j.created), owner, j.kernel[:8], idle, mine)
        )
    ns = jobs[0].namespace
    return (
        f"TrainJobs created by trainjob-magics in namespace {ns}:\n"
        + table(HEADER, rows)
        + "\nAttach: %trainjob_connect --attach NAME    Close: %trainjob_close NAME"
    )
