"""``detect_preemption``: each signal that Kueue took the job away, alone, and none."""

from __future__ import annotations

from typing import Any

import pytest

from trainjob_magics.engine.kueue import admission
from trainjob_magics.engine.result import QueueStatus

RUNNING = {"spec": {"suspend": False}}
SUSPENDED = {"spec": {"suspend": True}}


def detect(
    monkeypatch: pytest.MonkeyPatch,
    qs: QueueStatus,
    *,
    baseline: int = 0,
    trainjob: dict[str, Any] = RUNNING,
) -> QueueStatus | None:
    monkeypatch.setattr(admission, "queue_status", lambda *a, **k: qs)
    return admission.detect_preemption(None, "ns", "job", "uid", "user-queue", baseline, trainjob)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["Preempted", "Evicted", "Deactivated"])
def test_a_workload_taken_away_is_seen_while_the_job_is_not_suspended(
    monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    qs = QueueStatus(state, reason=state)
    assert detect(monkeypatch, qs) is qs


def test_an_eviction_count_that_grew_is_seen_even_when_admitted_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    qs = QueueStatus("Admitted", evictions=2)
    assert detect(monkeypatch, qs, baseline=1) is qs
    assert detect(monkeypatch, qs, baseline=2) is None


def test_suspended_and_not_admitted_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    qs = QueueStatus("Queued")
    assert detect(monkeypatch, qs, trainjob=SUSPENDED) is qs


@pytest.mark.parametrize("state", ["Admitted", "QuotaReserved", "Queued", "Unknown"])
def test_an_undisturbed_job_is_not_preempted(monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    assert detect(monkeypatch, QueueStatus(state, evictions=1), baseline=1) is None
