"""A fan-out to 256 pods (against the stub exec server, which spawns nothing) stays within the
pool's thread bound, and every pod answers."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration

from trainjob_magics.engine.exec.commands import CommandGroup
from trainjob_magics.engine.exec.fanout import run_on_pods
from trainjob_magics.engine.exec.pool import MAX_PARALLEL
from trainjob_magics.engine.result import PodRef
from trainjob_magics.engine.session import TrainJobSession

ROOT = Path(__file__).resolve().parents[2]
PODS = 256

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.stub_exec", "--answer", "0.05"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = (proc.stdout.readline() if proc.stdout else "").strip()
        assert url.startswith("http://"), f"stub did not start (exit {proc.poll()})"
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def session(stub_url: str) -> TrainJobSession:
    cfg = Configuration(host=stub_url, api_key={"authorization": "stub"})
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return TrainJobSession("stub", "default", "stub", ApiClient(cfg), "stub-0", "node")


def refs(n: int) -> list[PodRef]:
    return [PodRef(f"stub-{i}", "node", i, "Running", "node") for i in range(n)]


def peak_threads_during(work: Callable[[], Any]) -> tuple[int, Any]:
    """Threads above those alive before, at their most while ``work`` runs (sampled)."""
    base = threading.active_count()
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.001):
            peak[0] = max(peak[0], threading.active_count() - 1 - base)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = work()
    finally:
        done.set()
        sampler.join()
    return peak[0], result


def test_256_pods_within_the_pool_bound(session: TrainJobSession) -> None:
    pods = refs(PODS)
    peak, res = peak_threads_during(lambda: session.execute("hostname", pods=pods))
    assert res.ok and len(res) == PODS
    assert {r.stdout for r in res.values()} == {f"stub-{i}\n" for i in range(PODS)}
    assert 1 <= peak <= min(PODS, MAX_PARALLEL)


def test_a_smaller_bound_is_never_exceeded(session: TrainJobSession) -> None:
    runner = session._commands  # the session's runner, as execute() uses it
    group = CommandGroup(runner)

    def run_one(ref: PodRef, on_output: Any) -> Any:
        return runner.run(ref.name, ["hostname"], container="node", group=group)

    peak, res = peak_threads_during(
        lambda: run_on_pods(run_one, refs(PODS), group=group, max_parallel=16)
    )
    assert res.ok and len(res.results) == PODS
    assert 1 <= peak <= 16
