"""Why a pod waits, from the pod and its Events (shapes as kube-scheduler and the kubelet write
them: pkg/scheduler/schedule_one.go, pkg/kubelet/images/image_manager.go)."""

from __future__ import annotations

from trainjob_magics.engine.kube.events import Event, parse_core_event, parse_events_v1
from trainjob_magics.engine.trainjob.pending import pod_problem, pull_failures


def pod(waiting: str | None = None, message: str = "", scheduled: bool = True) -> dict:
    status: dict = {"phase": "Pending", "conditions": []}
    if not scheduled:
        status["conditions"].append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
            }
        )
    if waiting:
        status["containerStatuses"] = [
            {"name": "node", "state": {"waiting": {"reason": waiting, "message": message}}}
        ]
    return {"metadata": {"name": "p-0"}, "status": status}


def failed_pull(count: int) -> Event:
    return Event("Failed", 'Failed to pull image "x:1": not found', "Pod", "p-0", "Warning", count)


def test_unschedulable_pod_names_the_scheduler_message() -> None:
    found = pod_problem(pod(scheduled=False))
    assert found is not None and not found.hopeless
    assert found.line() == (
        "pod p-0: Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )
    event = Event("FailedScheduling", "0/3 nodes are available: 3 Insufficient cpu.", "Pod", "p-0")
    assert "3 Insufficient cpu" in pod_problem(pod(scheduled=False), [event]).message


def test_invalid_image_name_is_hopeless_at_once() -> None:
    found = pod_problem(pod("InvalidImageName", 'couldn\'t parse image name "BAD IMAGE"'))
    assert found is not None and found.hopeless and found.reason == "InvalidImageName"


def test_pull_errors_become_hopeless_after_the_retries() -> None:
    waiting = pod("ImagePullBackOff", 'Back-off pulling image "x:1"')
    assert not pod_problem(waiting, [failed_pull(2)], image_pull_retries=3).hopeless
    found = pod_problem(waiting, [failed_pull(3)], image_pull_retries=3)
    assert found.hopeless and found.message == 'Failed to pull image "x:1": not found'
    assert pull_failures([failed_pull(2), failed_pull(1)]) == 3


def test_a_running_or_plain_pending_pod_has_no_problem() -> None:
    assert pod_problem(pod()) is None


def test_both_event_apis_parse_alike() -> None:
    core = parse_core_event(
        {
            "reason": "Failed",
            "message": "Failed  to pull\\n image",
            "type": "Warning",
            "count": 4,
            "involvedObject": {"kind": "Pod", "name": "p-0"},
            "lastTimestamp": "2026-12-01T10:00:00Z",
        }
    )
    v1 = parse_events_v1(
        {
            "reason": "Failed",
            "note": "Failed  to pull\\n image",
            "type": "Warning",
            "series": {"count": 4, "lastObservedTime": "2026-12-01T10:00:00.000000Z"},
            "regarding": {"kind": "Pod", "name": "p-0"},
        }
    )
    assert (core.reason, core.kind, core.name, core.count) == ("Failed", "Pod", "p-0", 4)
    assert (v1.reason, v1.kind, v1.name, v1.count) == ("Failed", "Pod", "p-0", 4)
    assert core.last is not None and v1.last is not None
