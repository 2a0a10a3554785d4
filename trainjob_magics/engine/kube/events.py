"""Events about an object: core/v1 ``events`` (``involvedObject``), else events.k8s.io/v1
(``regarding``) when the first cannot be read. A real API server shows the same events through
both; RBAC may allow only one of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubernetes.client import ApiClient

from ..errors import NotFoundError, PermissionDeniedError, TrainJobError
from .objects import parse_time
from .requests import request

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Event:
    """One Event, as much as the engine uses of it."""

    reason: str
    message: str
    kind: str  # of the object it is about
    name: str
    type: str = "Normal"  # "Normal" | "Warning"
    count: int = 1
    last: datetime | None = None


def parse_core_event(item: Mapping[str, Any]) -> Event:
    obj = item.get("involvedObject") or {}
    return Event(
        reason=str(item.get("reason") or ""),
        message=" ".join(str(item.get("message") or "").split()),
        kind=str(obj.get("kind") or ""),
        name=str(obj.get("name") or ""),
        type=str(item.get("type") or "Normal"),
        count=int(item.get("count") or 1),
        last=parse_time(item.get("lastTimestamp") or item.get("eventTime"))
        or parse_time((item.get("metadata") or {}).get("creationTimestamp")),
    )


def parse_events_v1(item: Mapping[str, Any]) -> Event:
    obj = item.get("regarding") or {}
    series = item.get("series") or {}
    return Event(
        reason=str(item.get("reason") or ""),
        message=" ".join(str(item.get("note") or "").split()),
        kind=str(obj.get("kind") or ""),
        name=str(obj.get("name") or ""),
        type=str(item.get("type") or "Normal"),
        count=int(series.get("count") or item.get("deprecatedCount") or 1),
        last=parse_time(series.get("lastObservedTime") or item.get("eventTime"))
        or parse_time((item.get("metadata") or {}).get("creationTimestamp")),
    )


def events_about(api: ApiClient, namespace: str, name: str, kind: str | None = None) -> list[Event]:
    """The events about object ``name`` (of ``kind`` when given), oldest first; [] when
    neither events API can be read."""
    selector = f"involvedObject.name={name}" + (f",involvedObject.kind={kind}" if kind else "")
    try:
        data = request(
            api,
            "GET",
            f"/api/v1/namespaces/{namespace}/events",
            verb="list",
            resource="events",
            namespace=namespace,
            query=[("fieldSelector", selector)],
            timeout=10.0,
        )
        found = [parse_core_event(i) for i in data.get("items") or []]
    except (PermissionDeniedError, NotFoundError):
        selector = f"regarding.name={name}" + (f",regarding.kind={kind}" if kind else "")
        try:
            data = request(
                api,
                "GET",
                f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
                verb="list",
                resource="events.events.k8s.io",
                namespace=namespace,
                query=[("fieldSelector", selector)],
                timeout=10.0,
            )
        except TrainJobError:
            return []
        found = [parse_events_v1(i) for i in data.get("items") or []]
    except TrainJobError:
        return []
    return sorted(found, key=lambda e: e.last or EPOCH)


__all__ = ["Event", "events_about", "parse_core_event", "parse_events_v1"]
