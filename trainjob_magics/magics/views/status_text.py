"""Plain-text status: pod tables, the status headline and Kueue line, the sessions table."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any


def format_age(created: datetime | None, now: datetime | None = None) -> str:
    """Kubectl-style age: ``42s``, ``3m12s``, ``2h5m``, ``3d``; ``-`` when unknown."""
    if created is None:
        return "-"
    now = now or datetime.now(timezone.utc)
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    sec = max(0, int((now - created).total_seconds()))
    return format_seconds(sec)


def format_seconds(sec: float) -> str:
    """``42s``, ``3m12s``, ``2h5m``, ``3d4h``."""
    sec = int(sec)
    if sec < 60:
        return f"{sec}s"
    if sec < 3600:
        return f"{sec // 60}m{sec % 60:02d}s"
    if sec < 86400:
        return f"{sec // 3600}h{sec % 3600 // 60:02d}m"
    return f"{sec // 86400}d{sec % 86400 // 3600}h"


POD_COLUMNS = ("NAME", "ROLE", "PHASE", "READY", "NODE", "RESTARTS", "AGE", "WAITING")


def pod_rows(pods: Iterable[Any], now: datetime | None = None) -> list[tuple[str, ...]]:
    """Rows of the pod table (trainer pod marked with ``*``)."""
    rows = []
    for p in pods:
        rows.append(
            (
                p.name + (" *" if getattr(p, "is_trainer", False) else ""),
                p.role or "-",
                p.phase or "-",
                "yes" if p.ready else "no",
                p.node or "-",
                str(p.restarts),
                format_age(p.created, now),
                p.waiting_reason or "",
            )
        )
    return rows


def table(header: tuple[str, ...], rows: list[tuple[str, ...]], indent: str = "") -> str:
    """Left-aligned text table."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in (header, *rows)
    ]
    return "\n".join(lines)


def status_headline(status: Any, elapsed: float | None = None) -> str:
    """``TrainJob x · namespace ns · runtime r · Running · 12s``."""
    el = status.elapsed if elapsed is None else elapsed
    parts = [
        f"TrainJob {status.name}",
        f"namespace {status.namespace}",
        f"runtime {status.runtime or '-'}",
        status.state,
        f"elapsed {format_seconds(el)}",
    ]
    return " · ".join(parts)


def queue_line(status: Any) -> str | None:
    """``Kueue: <queue state, position, message>`` when the job is queued through Kueue."""
    queue = getattr(status, "queue", None)
    if queue is None:
        return None
    text = queue.summary() if hasattr(queue, "summary") else str(queue)
    return None if text == status.message else f"Kueue: {text}"


def format_status(status: Any, now: datetime | None = None, elapsed: float | None = None) -> str:
    """Headline, message, Kueue line and pod table of a ``JobStatus``."""
    out = [status_headline(status, elapsed)]
    if status.message:
        out.append(f"  {status.message}")
    kueue = queue_line(status)
    if kueue:
        out.append(f"  {kueue}")
    if getattr(status, "problem", ""):
        out.append(f"  Waiting: {status.problem}")
    if getattr(status, "disruption", ""):
        out.append(f"  Last disruption: {status.disruption}")
    pods = list(status.pods or [])
    if pods:
        out.append(table(POD_COLUMNS, pod_rows(pods, now), indent="  "))
    else:
        out.append("  (no pods yet)")
    return "\n".join(out)


def status_change_line(status: Any) -> str:
    """One line per observed change while waiting: state, pods running, waiting reasons."""
    pods = list(status.pods or [])
    running = sum(1 for p in pods if p.phase == "Running")
    reasons = sorted({p.waiting_reason for p in pods if p.waiting_reason})
    line = f"[{format_seconds(status.elapsed)}] {status.name}: {status.state}"
    if pods:
        line += f", {running}/{len(pods)} pods running"
    if reasons:
        line += f" ({', '.join(reasons)})"
    if status.message:
        line += f" - {status.message}"
    kueue = queue_line(status)
    if kueue and status.state not in ("Running",):
        line += f" [{kueue}]"
    if getattr(status, "problem", ""):
        line += f" - waiting: {status.problem}"
    return line


@dataclass
class SessionRow:
    """One row of ``%trainjob_sessions``."""

    alias: str
    name: str
    namespace: str
    runtime: str
    state: str
    default: bool


SESSION_COLUMNS = ("ALIAS", "TRAINJOB", "NAMESPACE", "RUNTIME", "STATE")


def format_sessions(rows: list[SessionRow]) -> str:
    """Text table of this kernel's sessions (default marked with ``*``)."""
    if not rows:
        return "No TrainJob sessions in this kernel. Start one with %trainjob_connect RUNTIME."
    body = [
        (r.alias + (" *" if r.default else ""), r.name, r.namespace, r.runtime or "-", r.state)
        for r in rows
    ]
    return table(SESSION_COLUMNS, body) + "\n(* = default session)"
