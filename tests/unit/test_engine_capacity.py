"""Whether an unschedulable trainer pod can ever fit (issue 24): the local cluster's only node,
as its /version tells it, against the pod's request; a real cluster waits for a node."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from trainjob_magics.engine import ConnectTimeoutError, JobStatus, PodStartError
from trainjob_magics.engine.trainjob import readiness
from trainjob_magics.engine.trainjob.capacity import (
    LocalNode,
    beyond_node,
    never_fits_line,
    parse_quantity,
    pod_requests,
)
from trainjob_magics.magics.views.status import render_status_html
from trainjob_magics.magics.views.status_text import format_status, status_change_line

REAL = "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."  # noqa: E501
LOCAL = "0/1 nodes are available: 1 Insufficient cpu."
NODE = LocalNode("local-node", {"cpu": Fraction(64), "memory": Fraction(2**38), "pods": 110})


def trainer(cpu: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "j-node-0-0-abcde",
            "labels": {"jobset.sigs.k8s.io/replicatedjob-name": "node"},
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
        },
        "spec": {"containers": [{"name": "node", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    }


def test_quantities_and_requests_as_the_scheduler_counts_them() -> None:
    assert parse_quantity("500m") == Fraction(1, 2)
    assert parse_quantity("16Gi") == 16 * 2**30 and parse_quantity("1e3") == 1000
    assert parse_quantity("lots") is None
    pod = {
        "spec": {
            "containers": [
                {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}},
                {"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "3"}}}],
            "overhead": {"memory": "64Mi"},
        }
    }
    assert pod_requests(pod) == {"cpu": 3, "nvidia.com/gpu": 1, "memory": 2**30 + 64 * 2**20}


def test_only_a_request_above_the_node_never_fits() -> None:
    assert beyond_node(trainer("64", LOCAL), NODE) == []  # fits an empty node: others hold it
    assert beyond_node(trainer("100", LOCAL), NODE) == [("cpu", 100, 64)]
    line = never_fits_line("j", beyond_node(trainer("64500m", LOCAL), NODE), NODE)
    assert line == (
        "TrainJob j asks for cpu 64500m per pod, but the local cluster's only node (local-node) "
        "holds cpu 64, and no other node can join: ask for less with cpu=..., or start the local "
        "cluster with a larger --cpus (trainjob-magics local-cluster --cpus 64500m)"
    )


class Watcher:
    """One look at the pods, as the watch's first list gives them."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.objects = {p["metadata"]["name"]: p for p in pods}

    def run(self, deadline: float, check: Any, refresh: Any = None) -> Any:
        refresh()
        return check()


def wait(monkeypatch: pytest.MonkeyPatch, pod: dict[str, Any], node: LocalNode | None) -> Any:
    monkeypatch.setattr(readiness, "job_pods_watcher", lambda *a: Watcher([pod]))
    monkeypatch.setattr(readiness, "fetch_trainjob", lambda *a: {"metadata": {"name": "j"}})
    monkeypatch.setattr(readiness, "local_node", lambda api: node)
    monkeypatch.setattr(readiness, "fetch_jobset", lambda *a: None)  # no get on jobsets
    seen: list[JobStatus] = []
    with pytest.raises((ConnectTimeoutError, PodStartError)) as info:
        readiness.wait_for_trainer_pod(
            None, "ns", "j", None, runtime="torch", timeout=1, on_status=seen.append
        )  # type: ignore[arg-type]
    return info.value, seen[-1]


def test_a_real_cluster_waits_for_a_node_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    exc, status = wait(monkeypatch, trainer("100", REAL), None)
    said = (
        "pod j-node-0-0-abcde waits for a node that can hold it (a cluster autoscaler may add "
        f"one): {REAL}"
    )
    assert isinstance(exc, ConnectTimeoutError) and f"waiting because {said}" in str(exc)
    assert status.problem == said
    # both views show it while the connect waits
    assert f"Waiting: {said}" in format_status(status)
    assert f"waiting: {said}" in status_change_line(status)
    assert "a cluster autoscaler may add one" in render_status_html(status)


def test_the_local_cluster_fails_at_once_only_above_its_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exc, status = wait(monkeypatch, trainer("100", LOCAL), NODE)
    assert isinstance(exc, PodStartError)
    assert str(exc).startswith("TrainJob j asks for cpu 100 per pod") and "\n" not in str(exc)
    assert str(exc).endswith(f"; the scheduler says: {LOCAL}")
    assert status.problem == f"pod j-node-0-0-abcde: Unschedulable: {LOCAL}"
    exc, status = wait(monkeypatch, trainer("2", LOCAL), NODE)  # the node is full, for now
    assert isinstance(exc, ConnectTimeoutError)
    assert status.problem == f"pod j-node-0-0-abcde: Unschedulable: {LOCAL}"
