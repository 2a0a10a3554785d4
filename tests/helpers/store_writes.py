"""Every object a local-cluster Store has written, with the object it replaced."""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple


class Write(NamedTuple):
    plural: str
    group: str
    obj: dict[str, Any]
    old: dict[str, Any] | None  # None for a create


def store_writes(store: Any, since: int = 0) -> list[Write]:
    """Every create and update after resourceVersion ``since`` that the store still
    remembers (its watch history), oldest first."""
    loop = asyncio.new_event_loop()
    try:
        events, _, sub = store.subscribe(None, since, loop)
        store.unsubscribe(sub)
    finally:
        loop.close()
    out = []
    for event in events:
        if event.type in ("ADDED", "MODIFIED"):
            plural, _, group = event.kind_key.partition(".")
            out.append(Write(plural, group, event.obj, event.old))
    return out
