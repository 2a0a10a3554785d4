"""Kueue labels on a TrainJob: queue name, priority class and maximum run time."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .api import MAX_EXEC_TIME_LABEL, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL


def queue_labels(
    queue: str | None, priority_class: str | None, max_exec_seconds: int | None
) -> dict[str, str]:
    """TrainJob metadata labels for Kueue (only the ones that are set)."""
    labels: dict[str, str] = {}
    if queue:
        labels[QUEUE_NAME_LABEL] = queue
    if priority_class:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    if max_exec_seconds:
        labels[MAX_EXEC_TIME_LABEL] = str(int(max_exec_seconds))
    return labels


def queue_of(trainjob: Mapping[str, Any] | None) -> str | None:
    """The LocalQueue a TrainJob is labelled with, or None."""
    labels = ((trainjob or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(QUEUE_NAME_LABEL) or None


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str | int | float | None) -> int | None:
    """Seconds from 3600, "90s", "30m", "8h", "1h30m", "2d"; None stays None.

    Raises ValueError on anything else or a non-positive duration.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            parts = _DURATION.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(
                    f"invalid duration {value!r}: use seconds or e.g. '90s', '30m', '8h', '1h30m'"
                )
            seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    if seconds < 1:
        raise ValueError(f"duration must be at least 1 second, got {value!r}")
    return round(seconds)
