"""JobState: what the controller tracks for one TrainJob."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .podspec import PodSlot


@dataclass
class JobState:
    """What the controller tracks for one TrainJob (by uid)."""

    namespace: str
    name: str
    uid: str
    runtime: dict[str, Any]
    jobset_spec: dict[str, Any] = field(default_factory=dict)
    job_uids: dict[tuple[str, int], str] = field(default_factory=dict)
    pods: dict[PodSlot, str] = field(default_factory=dict)  # slot -> current pod name
    started_rjobs: set[str] = field(default_factory=set)
    finished: bool = False
    was_suspended: bool = False
    started_at: float | None = None
    hostfile: Path | None = None
