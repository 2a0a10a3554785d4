"""Events as the real components record them (client-go tools/record): one core/v1 Event per
(object, reason, message, source), its ``count`` and ``lastTimestamp`` bumped when it repeats
(the EventCorrelator's aggregation of identical events)."""

from __future__ import annotations

import secrets
from typing import Any

from .resources import EVENTS
from .store import Store, now_rfc3339


def involved_object(obj: dict[str, Any]) -> dict[str, Any]:
    """The ``involvedObject`` reference to ``obj``."""
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    return {k: v for k, v in ref.items() if v}


def record_event(
    store: Store,
    obj: dict[str, Any],
    *,
    reason: str,
    message: str,
    type: str = "Normal",
    component: str,
) -> dict[str, Any]:
    """Record (or bump) the Event ``reason``/``message`` about ``obj`` from ``component``
    (e.g. ``default-scheduler``, ``kubelet``, ``kueue-admission``); returns the Event."""
    ref = involved_object(obj)
    namespace = ref.get("namespace") or "default"
    now = now_rfc3339()
    events, _rv = store.list(EVENTS, namespace)
    for event in events:
        same = event.get("involvedObject") or {}
        if (
            same.get("uid", same.get("name")) == ref.get("uid", ref.get("name"))
            and same.get("name") == ref.get("name")
            and event.get("reason") == reason
            and event.get("message") == message
            and (event.get("source") or {}).get("component") == component
        ):

            def bump(e: dict[str, Any]) -> None:
                e["count"] = int(e.get("count") or 1) + 1
                e["lastTimestamp"] = now

            return store.mutate(EVENTS, namespace, event["metadata"]["name"], bump)
    return store.create(
        EVENTS,
        {
            "metadata": {
                "name": f"{ref.get('name', 'object')}.{secrets.token_hex(8)}",
                "namespace": namespace,
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": "",
        },
        namespace,
    )


__all__ = ["involved_object", "record_event"]
