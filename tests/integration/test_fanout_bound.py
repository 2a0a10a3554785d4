"""A fan-out to 256 pods (against the stub exec server, which spawns nothing) stays within the
pool's thread bound, and every pod answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.stub_exec import stub_refs, stub_server, stub_session, threads_during
from trainjob_magics.engine.exec.commands import CommandGroup
from trainjob_magics.engine.exec.fanout import run_on_pods
from trainjob_magics.engine.exec.pool import MAX_PARALLEL
from trainjob_magics.engine.result import PodRef
from trainjob_magics.engine.session import TrainJobSession

PODS = 256

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    with stub_server(0.05) as url:
        yield url


@pytest.fixture
def session(stub_url: str) -> TrainJobSession:
    return stub_session(stub_url)


def test_256_pods_within_the_pool_bound(session: TrainJobSession) -> None:
    pods = stub_refs(PODS)
    peak, _names, res = threads_during(lambda: session.execute("hostname", pods=pods))
    assert res.ok and len(res) == PODS
    assert {r.stdout for r in res.values()} == {f"stub-{i}\n" for i in range(PODS)}
    assert 1 <= peak <= min(PODS, MAX_PARALLEL)


def test_a_smaller_bound_is_never_exceeded(session: TrainJobSession) -> None:
    runner = session._commands  # the session's runner, as execute() uses it
    group = CommandGroup(runner)

    def run_one(ref: PodRef, on_output: Any) -> Any:
        return runner.run(ref.name, ["hostname"], container="node", group=group)

    peak, _names, res = threads_during(
        lambda: run_on_pods(run_one, stub_refs(PODS), group=group, max_parallel=16)
    )
    assert res.ok and len(res.results) == PODS
    assert 1 <= peak <= 16
