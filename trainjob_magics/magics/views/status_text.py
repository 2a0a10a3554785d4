"""Plain-text status: pod tables, the status headline and Kueue line, the sessions table."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
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
    rows: list[tuple[str, ...]] = []
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


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], indent: str = "") -> str:
    """Left-aligned text table."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in (header, *rows)
    ]
    return "\n".join(lines)


POD_TABLE_LIMIT = 8  # beyond this many pods the widget folds its pod table under one line


def duration_seconds(value: Any) -> float | None:
    """Seconds of a ``--max-runtime`` value (3600, "90s", "1h30m"); None when unset or unreadable.

    The same forms the engine accepts (engine/kueue/labels.py ``parse_duration``); the value
    was validated when the session connected.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[u] for n, u in parts)


def runtime_limit(state: str, elapsed: float, max_runtime: float | None) -> str:
    """``max runtime 1h00m (58m12s left)``; the time left only while the job runs."""
    if not max_runtime:
        return ""
    text = f"max runtime {format_seconds(max_runtime)}"
    if state == "Running":
        text += f" ({format_seconds(max(0.0, max_runtime - elapsed))} left)"
    return text


def status_headline(
    status: Any, elapsed: float | None = None, max_runtime: float | None = None, state: str = ""
) -> str:
    """``TrainJob x · namespace ns · runtime r · Running · elapsed 12s · max runtime 1h00m``.

    ``state`` replaces the job's state (a final state such as ``Deleted``)."""
    el = status.elapsed if elapsed is None else elapsed
    shown = state or status.state
    parts = [
        f"TrainJob {status.name}",
        f"namespace {status.namespace}",
        f"runtime {status.runtime or '-'}",
        shown,
        f"elapsed {format_seconds(el)}",
    ]
    limit = runtime_limit(shown, el, max_runtime)
    if limit:
        parts.append(limit)
    return " · ".join(parts)


_SHORT_QUOTA = re.compile(
    r"insufficient unused quota for (?P<res>\S+) in flavor (?P<flavor>\S+), "
    r"(?P<amount>\S+) more needed"
)
_OVER_QUOTA = re.compile(
    r"insufficient quota for (?P<res>\S+) in flavor (?P<flavor>\S+), request > maximum "
    r"capacity \((?P<need>\S+) > (?P<have>\S+)\)"
)


def kueue_reason(message: str) -> str:
    """Kueue's admission message with the useful part first: ``4 more cpu needed (flavor
    default)``, ``cpu request 8 exceeds the quota 4 (flavor default)``, else the message."""
    found = [
        f"{m['amount']} more {m['res']} needed (flavor {m['flavor']})"
        for m in _SHORT_QUOTA.finditer(message)
    ]
    found += [
        f"{m['res']} request {m['need']} exceeds the quota {m['have']} (flavor {m['flavor']})"
        for m in _OVER_QUOTA.finditer(message)
    ]
    return "; ".join(found) or message


def queue_line(status: Any) -> str | None:
    """``Kueue: 4 more cpu needed (flavor default) · position 1 in LocalQueue q (1 in
    ClusterQueue cq)`` when the job waits in Kueue: why first, then where, each queue named
    once; other Kueue states as Kueue says them."""
    queue = getattr(status, "queue", None)
    if queue is None:
        return None
    if getattr(queue, "state", "") == "Queued" and hasattr(queue, "position_text"):
        reason = kueue_reason(queue.message) if queue.message else "waiting for quota"
        return f"Kueue: queued, {reason} · {queue.position_text()}"
    text = queue.summary() if hasattr(queue, "summary") else str(queue)
    return None if text == status.message else f"Kueue: {text}"


def status_message(status: Any) -> str:
    """The status message, unless it only repeats Kueue's summary (the Kueue line says it)."""
    queue = getattr(status, "queue", None)
    if queue is not None and hasattr(queue, "summary") and status.message == queue.summary():
        return "" if queue_line(status) else status.message
    return status.message


def shape_lines(shape: Any) -> list[str]:
    """The trainer pod's volumes, service account and placement, one line each (only what
    it has): ``Volumes: pvc data -> /data, shm 8Gi -> /dev/shm``."""
    if shape is None:
        return []
    lines = []
    if shape.volumes:
        lines.append("Volumes: " + ", ".join(shape.volumes))
    if shape.service_account:
        lines.append(f"Service account: {shape.service_account}")
    place = []
    if shape.node:
        place.append(f"node {shape.node}")
    if shape.node_selector:
        place.append("selector " + ", ".join(shape.node_selector))
    if shape.tolerations:
        place.append("tolerations " + ", ".join(shape.tolerations))
    if shape.image_pull_secrets:
        place.append("pull secrets " + ", ".join(shape.image_pull_secrets))
    if place:
        lines.append("Placement: " + " · ".join(place))
    return lines


def protocols_line(status: Any) -> str:
    """``Protocols (server fallback): exec v4.channel.k8s.io · forward 8080 websocket
    (v4.channel.k8s.io)`` when a stream of the session took the API server's fallback (no v5
    exec, no port-forward tunnel); "" otherwise (nothing to say on a current server)."""
    protocols = getattr(status, "protocols", None)
    if protocols is None or not protocols.fallback:
        return ""
    return f"Protocols (server fallback): {protocols.summary()}"


def format_status(
    status: Any,
    now: datetime | None = None,
    elapsed: float | None = None,
    max_runtime: float | None = None,
    state: str = "",
    note: str = "",
) -> str:
    """Headline, message, Kueue line and pod table of a ``JobStatus`` (``state``: a final
    state shown instead of the job's; ``note``: one more line, e.g. what was deleted)."""
    out = [status_headline(status, elapsed, max_runtime, state)]
    message = "" if state else status_message(status)  # no longer true once it ended
    if message:
        out.append(f"  {message}")
    kueue = queue_line(status)
    if kueue:
        out.append(f"  {kueue}")
    if getattr(status, "problem", "") and not state:
        out.append(f"  Waiting: {status.problem}")
    if getattr(status, "disruption", ""):
        out.append(f"  Last disruption: {status.disruption}")
    out += [f"  {line}" for line in shape_lines(getattr(status, "shape", None))]
    protocols = protocols_line(status)
    if protocols:
        out.append(f"  {protocols}")
    if note:
        out.append(f"  {note}")
    pods = list(status.pods or [])
    if pods:
        if state:
            out.append(f"  {ended_pods_line(pods)}:")
        elif len(pods) > POD_TABLE_LIMIT:
            out.append(f"  {pods_summary(pods)}")
        out.append(table(POD_COLUMNS, pod_rows(pods, now), indent="  "))
    else:
        out.append("  (no pods yet)")
    return "\n".join(out)


def ended_pods_line(pods: list[Any]) -> str:
    """``4 pods as last seen, before the session ended``."""
    n = len(pods)
    return f"{n} pod{'s' if n != 1 else ''} as last seen, before the session ended"


def pods_summary(pods: Iterable[Any]) -> str:
    """``32 pods: 31 Running, 1 Pending · 31 ready · waiting: ImagePullBackOff``."""
    pods = list(pods)
    phases: dict[str, int] = {}
    for p in pods:
        phases[p.phase or "-"] = phases.get(p.phase or "-", 0) + 1
    ready = sum(1 for p in pods if p.ready)
    text = f"{len(pods)} pods: " + ", ".join(f"{n} {ph}" for ph, n in phases.items())
    text += f" · {ready} ready"
    restarts = sum(int(p.restarts or 0) for p in pods)
    if restarts:
        text += f" · {restarts} restarts"
    reasons = sorted({p.waiting_reason for p in pods if p.waiting_reason})
    if reasons:
        text += f" · waiting: {', '.join(reasons)}"
    return text


# The engine's count of running pods in its message, said once by the line instead.
POD_COUNT = re.compile(r" \(\d+/\d+ (?:node )?pods running\)$")


def status_change_line(status: Any) -> str:
    """One line per observed change while waiting: state, pods running, waiting reasons."""
    pods = list(status.pods or [])
    running = sum(1 for p in pods if p.phase == "Running")
    reasons = sorted({p.waiting_reason for p in pods if p.waiting_reason})
    line = f"[{format_seconds(status.elapsed)}] {status.name}: {status.state}"
    if pods:  # of every pod the job runs: an MPI launcher comes after its node pods
        total = max(len(pods), getattr(status, "pods_expected", 0) or 0)
        line += f", {running}/{total} pods running"
    if reasons:
        line += f" ({', '.join(reasons)})"
    message = status_message(status)
    if pods:  # the count is said above: "waiting for the launcher pod (0/2 node pods running)"
        message = POD_COUNT.sub("", message)
    if message:
        line += f" - {message}"
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
