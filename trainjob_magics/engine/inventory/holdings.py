"""What a TrainJob's pods hold: their requests (GPU, CPU, memory) times how long they held them,
and the one line that says so (``8 GPU · 32 CPU · held 2 h 10 min (17.3 GPU-h) · idle 41 min``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from ..kube.names import GPU_RESOURCE
from ..kube.objects import parse_time, pod_phase
from .schema import Holds

_SUFFIXES: dict[str, int | Decimal] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity ("500m", "32", "256Gi", "1e3") as a number; 0 when unreadable."""
    text = str(value or "").strip()
    if not text:
        return 0.0
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and suffix != text:
            try:
                return float(Decimal(text[: -len(suffix)]) * Decimal(_SUFFIXES[suffix]))
            except InvalidOperation:
                return 0.0
    try:
        return float(Decimal(text))
    except InvalidOperation:
        return 0.0


@dataclass
class Requests:
    """Requests summed over containers (a limit stands in where a request is missing)."""

    gpu: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0  # bytes

    def add(self, other: Requests) -> None:
        self.gpu += other.gpu
        self.cpu += other.cpu
        self.memory += other.memory


def pod_requests(pod: Mapping[str, Any]) -> Requests:
    """What one pod asks the scheduler for (its containers; init containers run before)."""
    out = Requests()
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = dict(resources.get("limits") or {})
        asked.update(resources.get("requests") or {})
        out.add(
            Requests(
                gpu=parse_quantity(asked.get(GPU_RESOURCE)),
                cpu=parse_quantity(asked.get("cpu")),
                memory=parse_quantity(asked.get("memory")),
            )
        )
    return out


def holds_resources(pod: Mapping[str, Any]) -> bool:
    """A pod placed on a node and not finished holds what it requested."""
    placed = bool((pod.get("spec") or {}).get("nodeName"))
    return placed and pod_phase(pod) not in ("Succeeded", "Failed")


def _held_since(pod: Mapping[str, Any]) -> datetime | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            when = parse_time(cond.get("lastTransitionTime"))
            if when is not None:
                return when
    return parse_time((pod.get("metadata") or {}).get("creationTimestamp"))


@dataclass
class Holding:
    """What a job's pods hold now and the resource-hours they held so far."""

    requests: Requests
    held_seconds: float  # since the first pod that holds anything was placed
    gpu_hours: float
    cpu_hours: float
    idle_seconds: float | None = None

    def as_dict(self) -> Holds:
        return {
            "gpu": self.requests.gpu,
            "cpu": self.requests.cpu,
            "memoryBytes": self.requests.memory,
            "heldSeconds": round(self.held_seconds, 1),
            "gpuHours": round(self.gpu_hours, 3),
            "cpuHours": round(self.cpu_hours, 3),
            "idleSeconds": None if self.idle_seconds is None else round(self.idle_seconds, 1),
            "text": holding_line(self),
            # without the idle part: a page counts the idle time on from when it read this
            "heldText": holding_line(self, idle=False),
        }


def holding(
    pods: Iterable[Mapping[str, Any]],
    now: datetime | None = None,
    idle_since: datetime | None = None,
) -> Holding:
    """Sum what the placed, unfinished pods request, and request x time since each was placed."""
    now = now or datetime.now(timezone.utc)
    total = Requests()
    first: datetime | None = None
    gpu_h = cpu_h = 0.0
    for pod in pods:
        if not holds_resources(pod):
            continue
        asked = pod_requests(pod)
        total.add(asked)
        since = _held_since(pod) or now
        first = since if first is None else min(first, since)
        hours = max(0.0, (now - since).total_seconds()) / 3600
        gpu_h += asked.gpu * hours
        cpu_h += asked.cpu * hours
    held = max(0.0, (now - first).total_seconds()) if first else 0.0
    idle = None if idle_since is None else max(0.0, (now - idle_since).total_seconds())
    return Holding(total, held, gpu_h, cpu_h, idle)


def duration_words(seconds: float) -> str:
    """``41 s``, ``41 min``, ``2 h 10 min``, ``3 d 4 h``."""
    s = int(max(0, seconds))
    if s < 60:
        return f"{s} s"
    minutes = s // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _number(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}".rstrip("0").rstrip(".")


def _hours(value: float) -> str:
    """Resource-hours to one decimal, ``<0.1`` below (a few seconds held is not ``0.0``)."""
    return f"{value:.1f}" if value >= 0.05 else "<0.1"


def holding_line(h: Holding, *, idle: bool = True) -> str:
    """``8 GPU · 32 CPU · held 2 h 10 min (17.3 GPU-h) · idle 41 min``; pods that request
    neither: ``requests no GPU or CPU · up 7 s``; when nothing is placed yet: ``holds nothing
    yet`` (each plus the idle part)."""
    parts = []
    if h.requests.gpu:
        parts.append(f"{_number(h.requests.gpu)} GPU")
    if h.requests.cpu:
        parts.append(f"{_number(round(h.requests.cpu, 2))} CPU")
    if parts:
        hours = f"{_hours(h.gpu_hours)} GPU-h" if h.requests.gpu else f"{_hours(h.cpu_hours)} CPU-h"
        parts.append(f"held {duration_words(h.held_seconds)} ({hours})")
    elif h.held_seconds:  # placed pods that request no GPU or CPU: nothing to count in hours
        parts.append(f"requests no GPU or CPU · up {duration_words(h.held_seconds)}")
    else:
        parts.append("holds nothing yet")
    if idle and h.idle_seconds is not None:
        parts.append(f"idle {duration_words(h.idle_seconds)}")
    return " · ".join(parts)
