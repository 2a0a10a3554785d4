"""A fan-out runs every pod's exec on one thread (the reactor): hundreds of pods, beyond the
old thread bound, with no thread per pod; a pod the reactor cannot run (a 404 handshake) goes
the usual way, alone. Against the stub exec server (plain HTTP) and the local cluster (HTTPS)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.stub_exec import stub_refs, stub_server, stub_session, threads_during
from trainjob_magics.engine import connect
from trainjob_magics.engine.errors import ApiServerError, PodNotRunningError
from trainjob_magics.engine.exec.commands import CommandGroup
from trainjob_magics.engine.exec.fanout import run_on_pods
from trainjob_magics.engine.exec.multiplexed import Multiplexed
from trainjob_magics.engine.exec.pool import MAX_PARALLEL
from trainjob_magics.engine.result import ExecResult, MultiExecResult, PodRef
from trainjob_magics.engine.session import TrainJobSession
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    with stub_server(0.05) as url:
        yield url


@pytest.fixture
def stub(stub_url: str) -> TrainJobSession:
    return stub_session(stub_url)


def fan_out(session: TrainJobSession, pods: list[PodRef]) -> tuple[MultiExecResult, list[str]]:
    """``hostname`` on ``pods`` through the reactor; also the pods that went the usual way."""
    runner = session._commands  # the session's runner, as execute() uses it
    group = CommandGroup(runner)
    usual: list[str] = []

    def run_one(ref: PodRef, on_output: Any) -> ExecResult:
        usual.append(ref.name)
        return runner.run(ref.name, ["hostname"], container="node", group=group)

    spec = Multiplexed(runner, ["hostname"], lambda ref: "node")
    return run_on_pods(run_one, pods, group=group, multiplexed=spec), usual


def test_more_pods_than_the_old_bound_on_one_thread(stub: TrainJobSession) -> None:
    n = MAX_PARALLEL + 44
    seen: dict[str, str] = {}
    finished: list[str] = []

    def on_output(pod: str, stream: str, text: str) -> None:
        seen[pod] = seen.get(pod, "") + text

    peak, names, res = threads_during(
        lambda: stub.execute(
            "hostname",
            pods=stub_refs(n),
            on_output=on_output,
            on_done=lambda pod, result, error: finished.append(pod),
        )
    )
    assert res.ok and len(res) == n
    assert {r.stdout for r in res.values()} == {f"stub-{i}\n" for i in range(n)}
    assert seen == {f"stub-{i}": f"stub-{i}\n" for i in range(n)}  # live, per pod
    assert sorted(finished) == sorted(res.pods)
    assert peak <= 2, names  # the reactor (no thread per pod)
    assert any(name.startswith("trainjob-reactor") for name in names), names


def test_a_pod_the_reactor_cannot_run_goes_the_usual_way(stub: TrainJobSession) -> None:
    pods = [*stub_refs(20), PodRef("gone-1", "node", 20, "Running", "node")]
    res, usual = fan_out(stub, pods)
    assert usual == ["gone-1"]  # only the pod the reactor handed back
    assert res.failed == ["gone-1"]
    assert isinstance(res.errors["gone-1"], PodNotRunningError)
    assert "pod gone-1 is gone from namespace default" in str(res.errors["gone-1"])
    assert all(res.results[p.name].stdout == f"{p.name}\n" for p in pods[:20])
    assert stub._commands.inflight == {}  # nothing left registered


def test_a_bad_upgrade_fails_that_pod_without_running_it_twice(stub: TrainJobSession) -> None:
    """A 101 whose accept key is wrong may have started the command: no second try."""
    res, usual = fan_out(stub, [*stub_refs(3), PodRef("badaccept-1", "node", 3, "Running", "node")])
    assert usual == []
    assert res.failed == ["badaccept-1"]
    assert isinstance(res.errors["badaccept-1"], ApiServerError)
    assert stub._commands.inflight == {}


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[Any]:
    s = connect("torch-distributed", num_nodes=4, config_file=str(local_cluster.kubeconfig_path))
    yield s
    s.close(timeout=30)


def test_https_fan_out_runs_on_the_reactor(session: Any) -> None:
    _peak, names, res = threads_during(
        lambda: session.execute('echo "$POD_NAME"; echo err >&2; exit 3', pods="all")
    )
    assert len(res) == 4 and res.failed == res.pods  # exit 3 everywhere
    assert all(
        r.returncode == 3 and r.stdout == f"{p}\n" and r.stderr == "err\n" for p, r in res.items()
    )
    assert any(name.startswith("trainjob-reactor") for name in names), names
    assert not any(name.startswith("trainjob-exec") for name in names), names
