"""Calling the user's callbacks (``on_status``): a callback that raises is logged, never
allowed to break the wait it reports on."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def notify(callback: Callable[..., Any] | None, *args: Any) -> None:
    """``callback(*args)`` unless it is None; its exceptions are logged, not raised."""
    if callback is None:
        return
    try:
        callback(*args)
    except Exception:
        log.warning("%s callback failed", getattr(callback, "__name__", "on_status"), exc_info=True)


__all__ = ["notify"]
