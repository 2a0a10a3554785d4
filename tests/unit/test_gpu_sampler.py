"""``GpuSampler`` (engine/inventory/gpu_sampler.py) on a recording exec client: one exec per pod
at most every interval however many callers ask at once, only pods that request GPUs, the lead
pod first (busy there: no other pod is sampled), the caller's busy pods never sampled, a failed
exec one answer and no noise."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from trainjob_magics.engine.errors import PermissionDeniedError
from trainjob_magics.engine.inventory.gpu_sampler import GpuSampler
from trainjob_magics.engine.result import ExecResult

ROWS = "nvidia-smi\n0, T4, 12, 100, 15360\nexit 0\n"
LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def pod(name: str, role: str = "node", gpu: int = 1, index: int = 0) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpu)}} if gpu else {}
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL: role, "jobset.sigs.k8s.io/job-index": str(index)},
        },
        "spec": {"containers": [{"name": "node", "resources": resources}]},
        "status": {"phase": "Running"},
    }


class Client:
    """Answers every probe as ``answers`` says (per pod: stdout or an exception)."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[tuple[str, str]] = []  # (pod, mode)
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()

    def run(self, namespace: str, name: str, argv: Sequence[str], **kw: Any) -> ExecResult:
        with self.lock:
            self.calls.append((name, argv[4]))
        self.gate.wait(10)
        answer = self.answers.get(name, ROWS)
        if isinstance(answer, Exception):
            raise answer
        return ExecResult(answer, "", 0, 0.01, pod=name)


def test_one_exec_per_pod_however_many_ask_at_once() -> None:
    client = Client()
    client.gate.clear()  # the first probes hang until every caller is waiting
    sampler = GpuSampler(client, every=3600)  # type: ignore[arg-type]
    pods = [pod("j-node-0", index=0), pod("j-node-1", index=1), pod("j-node-2", index=2)]
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(sampler.sample("ns", pods)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    client.gate.set()
    for t in threads:
        t.join(30)
    assert len(results) == 8
    assert sorted(client.calls) == [
        ("j-node-0", "sample"),
        ("j-node-1", "sample"),
        ("j-node-2", "sample"),
    ]
    assert sampler.execs == 3
    for answers in results:
        assert [a.pod for a in answers] == ["j-node-0", "j-node-1", "j-node-2"]
        assert all(a.state == "ok" and a.gpus[0].utilization == 12 for a in answers)
    sampler.every = 0  # the interval passed: each pod once more
    sampler.sample("ns", pods)
    assert sampler.execs == 6


def test_only_running_pods_that_request_gpus() -> None:
    client = Client()
    sampler = GpuSampler(client)  # type: ignore[arg-type]
    pending = pod("j-node-1", index=1)
    pending["status"]["phase"] = "Pending"
    assert sampler.sample("ns", [pod("j-node-0", gpu=0), pending]) == []
    assert client.calls == [] and sampler.execs == 0


def test_a_busy_lead_pod_means_no_pod_is_sampled() -> None:
    client = Client({"j-launcher-0": "busy\n"})
    sampler = GpuSampler(client)  # type: ignore[arg-type]
    pods = [pod("j-launcher-0", role="launcher", gpu=0), pod("j-node-0"), pod("j-node-1", index=1)]
    answers = sampler.sample("ns", pods)
    assert client.calls == [("j-launcher-0", "check")]  # the launcher holds no GPU: a check
    assert [(a.pod, a.state) for a in answers] == [("j-node-0", "busy"), ("j-node-1", "busy")]


def test_an_idle_lead_lets_the_others_be_sampled_and_busy_pods_are_skipped() -> None:
    client = Client({"j-launcher-0": "idle\n", "j-node-1": "busy\n"})
    sampler = GpuSampler(client)  # type: ignore[arg-type]
    pods = [
        pod("j-launcher-0", role="launcher", gpu=0),
        pod("j-node-0"),
        pod("j-node-1", index=1),
        pod("j-node-2", index=2),
    ]
    answers = sampler.sample("ns", pods, busy={"j-node-2"})
    assert [(a.pod, a.state) for a in answers] == [
        ("j-node-0", "ok"),
        ("j-node-1", "busy"),  # the pod's own check: one of our commands runs there
        ("j-node-2", "busy"),  # the caller's command runs there: no exec at all
    ]
    assert sorted(client.calls) == [
        ("j-launcher-0", "check"),
        ("j-node-0", "sample"),
        ("j-node-1", "sample"),
    ]
    client.calls.clear()
    assert [a.state for a in sampler.sample("ns", pods, lead="j-node-2", busy={"j-node-2"})] == [
        "busy",
        "busy",
        "busy",
    ]
    assert client.calls == []


def test_a_failed_exec_is_one_answer_and_no_noise(caplog: pytest.LogCaptureFixture) -> None:
    denied = PermissionDeniedError("permission denied: cannot create pods/exec in namespace ns")
    client = Client({"j-node-0": denied, "j-node-1": "absent\n"})
    sampler = GpuSampler(client)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="trainjob_magics"):
        answers = sampler.sample("ns", [pod("j-node-0"), pod("j-node-1", index=1)])
    assert answers[0].state == "error" and "cannot create pods/exec" in answers[0].message
    assert answers[1].state == "absent"
    assert caplog.records == []
