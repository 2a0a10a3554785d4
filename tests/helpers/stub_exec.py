"""The stub exec server (``benchmarks.stub_exec --answer``) for fan-out tests: a session on
it, pod refs, and the threads a piece of work starts."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient, Configuration

from trainjob_magics.engine.result import PodRef
from trainjob_magics.engine.session import TrainJobSession

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def stub_server(answer: float) -> Iterator[str]:
    """The stub in its own process, answering every exec after ``answer`` s; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.stub_exec", "--answer", str(answer)],
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


def stub_session(url: str) -> TrainJobSession:
    cfg = Configuration(host=url, api_key={"authorization": "stub"})
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return TrainJobSession("stub", "default", "stub", ApiClient(cfg), "stub-0", "node")


def stub_refs(n: int, prefix: str = "stub") -> list[PodRef]:
    return [PodRef(f"{prefix}-{i}", "node", i, "Running", "node") for i in range(n)]


def threads_during(work: Callable[[], Any]) -> tuple[int, set[str], Any]:
    """The most threads alive at once above those before ``work`` (sampled), every new
    thread's name, and what ``work`` returned."""
    before = {t.ident for t in threading.enumerate()}
    peak = [0]
    names: set[str] = set()
    done = threading.Event()
    me = threading.current_thread()

    def sample() -> None:
        while not done.wait(0.001):
            new = [
                t
                for t in threading.enumerate()
                if t.ident not in before and t is not me and t.name != "stub-sampler"
            ]
            peak[0] = max(peak[0], len(new))
            names.update(t.name for t in new)

    sampler = threading.Thread(target=sample, daemon=True, name="stub-sampler")
    sampler.start()
    try:
        result = work()
    finally:
        done.set()
        sampler.join()
    return peak[0], names, result
