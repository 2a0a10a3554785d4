"""One TrainJob and its pods as the JSON record the sidebar and the live panels read, and the
record of a job that is gone (closed by whom, deleted, finished)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from ..kube.names import (
    CLOSED_BY_ANNOTATION,
    CREATED_BY_ANNOTATION,
    FORWARDS_ANNOTATION,
    IDLE_ANNOTATION,
    IDLE_STOP_ANNOTATION,
    JOBSET_NAME_LABEL,
    LAST_COMMAND_ANNOTATION,
    OWNER_HOST_ANNOTATION,
    OWNER_KERNEL_ANNOTATION,
)
from ..kube.objects import is_ready, parse_time, pod_name, pod_phase
from ..kueue.labels import queue_of
from ..trainjob.body import runtime_ref
from ..trainjob.orphans import job_state
from .holdings import duration_words, holding
from .schema import ForwardRow, GoneRecord, Queue, SessionRecord, UnknownRecord

IDLE_WARNING_SECONDS = 300.0  # the panels and the sidebar warn this long before an idle stop
IDLE_STOP_BY = "idle stop"  # the closed-by note of a session the kernel stopped for being idle


def _iso(when: datetime | None) -> str | None:
    return when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z") if when else None


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _queue_only(trainjob: Mapping[str, Any]) -> Queue | None:
    lq = queue_of(trainjob)
    return {"localQueue": lq} if lq else None


def forwards_of(notes: Mapping[str, Any]) -> list[ForwardRow]:
    """The open forwards the kernel noted (``localPort``, ``port``, ``pod``, ``link``); a link
    is kept only as http(s) or a path of this server (never ``javascript:``)."""
    try:
        raw = json.loads(str(notes.get(FORWARDS_ANNOTATION) or "[]"))
    except ValueError:
        return []
    found: list[ForwardRow] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        link = str(item.get("link") or "")
        if not (link.startswith(("http://", "https://")) or link.startswith("/")):
            continue
        try:
            local, port = int(item["localPort"]), int(item["port"])
        except (KeyError, TypeError, ValueError):
            continue
        found.append(
            {"localPort": local, "port": port, "pod": str(item.get("pod") or ""), "link": link}
        )
    return found


def pods_of(name: str, pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods of TrainJob ``name`` (its JobSet has the same name)."""
    return [
        p
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL) == name
    ]


def session_record(
    trainjob: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: datetime | None = None,
    queue: Queue | None = None,
    expected_pods: int = 0,
) -> SessionRecord:
    """What one TrainJob is, runs and holds, for the REST API (never any credential).
    ``expected_pods``: how many pods its JobSet runs (0: not known), the denominator of
    ``podsReady`` when more than the pods that exist (pods not created yet are not ready)."""
    now = now or datetime.now(timezone.utc)
    meta = trainjob.get("metadata") or {}
    notes = meta.get("annotations") or {}
    name = str(meta.get("name") or "")
    mine = sorted(pods_of(name, pods), key=pod_name)
    created = parse_time(meta.get("creationTimestamp"))
    last_command = parse_time(notes.get(LAST_COMMAND_ANNOTATION))
    idle_since = last_command or created
    held = holding(mine, now, idle_since)
    idle_stop = _number(notes.get(IDLE_STOP_ANNOTATION))
    state = job_state(trainjob, [pod_phase(p) for p in mine])
    stop_in = None
    if idle_stop is not None and held.idle_seconds is not None:
        stop_in = max(0.0, idle_stop - held.idle_seconds)
    ready = sum(1 for p in mine if is_ready(p))
    return {
        "name": name,
        "namespace": str(meta.get("namespace") or ""),
        "uid": str(meta.get("uid") or ""),
        "runtime": runtime_ref(trainjob)[0],
        "state": state,
        "kernel": str(notes.get(OWNER_KERNEL_ANNOTATION, "")),
        "host": str(notes.get(OWNER_HOST_ANNOTATION, "")),
        "user": str(notes.get(CREATED_BY_ANNOTATION, "")),
        "created": _iso(created),
        "ageSeconds": round(max(0.0, (now - created).total_seconds()), 1) if created else None,
        "lastCommand": _iso(last_command),
        "idleTimeout": _number(notes.get(IDLE_ANNOTATION)),
        "idleStopSeconds": idle_stop,
        "idleStopIn": None if stop_in is None else round(stop_in, 1),
        "idleWarning": stop_in is not None and stop_in <= IDLE_WARNING_SECONDS,
        "closing": str(notes.get(CLOSED_BY_ANNOTATION, "")),
        "forwards": forwards_of(notes),
        "pods": [{"name": pod_name(p), "phase": pod_phase(p), "ready": is_ready(p)} for p in mine],
        "podsReady": f"{ready}/{max(expected_pods, len(mine))}",
        "queue": queue.copy() if queue else _queue_only(trainjob),
        "holds": held.as_dict(),
        "gone": None,
    }


def gone_reason(last_seen: Mapping[str, Any] | None, closed_by: str | None = None) -> str:
    """Why a job we saw is no longer there, from the last version of it we saw (or
    ``closed_by``: who closed it, known here though its note could not be written)."""
    notes = ((last_seen or {}).get("metadata") or {}).get("annotations") or {}
    by = str(notes.get(CLOSED_BY_ANNOTATION, "")) or (closed_by or "")
    if by == IDLE_STOP_BY:
        idle = _number(notes.get(IDLE_STOP_ANNOTATION))
        return "stopped for being idle" + (
            f" (no command for {duration_words(idle)})" if idle else ""
        )
    if by:
        return (
            f"closed by {by}" if by.startswith("%") or by.startswith("the ") else f"closed at {by}"
        )
    state = job_state(last_seen or {}, [])
    if state in ("Complete", "Failed"):
        return f"finished ({state}) and deleted"
    return "deleted outside trainjob-magics (e.g. kubectl delete)"


def gone_record(
    name: str, namespace: str, uid: str, reason: str, when: datetime | None
) -> GoneRecord:
    """The record of a job that is no longer on the cluster."""
    return {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "state": "Gone",
        "gone": {"reason": reason, "at": _iso(when)},
        "pods": [],
        "podsReady": "0/0",
        "holds": None,
    }


def unknown_record(name: str, namespace: str, uid: str, problem: str) -> UnknownRecord:
    """The record of a job whose namespace is not read (yet): ``problem`` says why."""
    return {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "state": "Unknown",
        "problem": problem,
        "pods": [],
        "podsReady": "0/0",
        "holds": None,
        "gone": None,
    }
