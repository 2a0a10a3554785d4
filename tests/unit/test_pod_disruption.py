"""Reading why a pod went away (engine/exec/disruption.py) and what the next command does."""

from __future__ import annotations

from typing import Any

import pytest

from trainjob_magics.engine.exec.disruption import PodDisruption, read_disruption
from trainjob_magics.engine.trainjob.status import after_pod_gone


def pod(**status: Any) -> dict[str, Any]:
    meta = {"name": "p"}
    if status.pop("deleting", False):
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": "Running", **status}}


def target(reason: str, message: str) -> dict[str, Any]:
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("obj", "cause", "text"),
    [
        (
            pod(
                conditions=[target("EvictionByEvictionAPI", "Eviction API: evicting")],
                deleting=True,
            ),
            "evicted",
            "pod p was evicted through the Eviction API (Eviction API: evicting)",
        ),
        (
            pod(conditions=[target("TerminationByKubelet", "low on memory")], phase="Failed"),
            "evicted",
            "pod p was evicted by the kubelet (low on memory)",
        ),
        (
            pod(conditions=[target("PreemptionByScheduler", "default-scheduler: preempting")]),
            "preempted",
            "pod p was preempted by the scheduler (default-scheduler: preempting)",
        ),
        (
            pod(conditions=[target("DeletionByTaintManager", "Taint manager: deleting")]),
            "deleted",
            "pod p was deleted by the taint manager (Taint manager: deleting)",
        ),
        (
            pod(phase="Failed", reason="Evicted", message="The node was low on resource: memory."),
            "evicted",
            "pod p was evicted by the kubelet (The node was low on resource: memory.)",
        ),
        (pod(deleting=True), "deleted", "pod p was deleted"),
        (pod(phase="Succeeded"), "stopped", "pod p stopped: its container ended (pod Succeeded)"),
    ],
)
def test_what_took_the_pod_away(obj: dict[str, Any], cause: str, text: str) -> None:
    found = read_disruption(obj, "p")
    assert isinstance(found, PodDisruption)
    assert (found.cause, found.describe()) == (cause, text)


def test_a_running_pod_was_not_disrupted() -> None:
    """An exit code 137 from a pod still Running is the command's own (e.g. OOM-killed)."""
    not_true = {"type": "DisruptionTarget", "status": "False", "reason": "EvictionByEvictionAPI"}
    assert read_disruption(pod(), "p") is None
    assert read_disruption(pod(conditions=[not_true]), "p") is None


def test_after_pod_gone_says_what_the_next_command_does() -> None:
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "message": "boom"}]}}
    assert after_pod_gone("t", None).startswith("TrainJob t no longer exists")
    assert after_pod_gone("t", failed) == (
        "TrainJob t has ended (Failed: boom): close the session and connect again"
    )
    assert "waits for the trainer pod TrainJob t recreates" in after_pod_gone("t", {"status": {}})
