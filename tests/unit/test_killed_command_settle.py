"""A killed command reads its pod again for a few seconds before calling it undisturbed: a real
kubelet writes an evicted pod's status after it killed the containers (the real stack's node,
an emptyDir over its sizeLimit). An interrupt of ours does not wait."""

from __future__ import annotations

import pytest

from trainjob_magics.engine.errors import PodGoneError
from trainjob_magics.engine.exec import commands
from trainjob_magics.engine.exec.commands import CommandRunner
from trainjob_magics.engine.exec.disruption import PodDisruption
from trainjob_magics.engine.exec.inflight import InFlight
from trainjob_magics.engine.result import ExecResult


class NoProbe:
    """The OOM probe's exec: the container is gone."""

    def run(self, *args, **kwargs):
        from trainjob_magics.engine.errors import PodNotRunningError

        raise PodNotRunningError("container not found")


def _runner(monkeypatch: pytest.MonkeyPatch, answers: list) -> tuple[CommandRunner, list]:
    reads: list[int] = []

    def disruption(api, namespace, pod):
        reads.append(1)
        return answers.pop(0) if answers else answers_last[0]

    answers_last = [answers[-1]]
    monkeypatch.setattr(commands, "pod_disruption", disruption)
    monkeypatch.setattr(commands.time, "sleep", lambda s: None)
    return CommandRunner(NoProbe(), "ns", InFlight(), api_client=object()), reads


def test_an_eviction_the_kubelet_writes_late_is_still_named(monkeypatch) -> None:
    evicted = PodDisruption("p", "evicted", "evicted by the kubelet (Usage of EmptyDir ...)")
    runner, reads = _runner(monkeypatch, [None, None, None, evicted])
    begun = runner.begin("p", ["sh", "-c", "sleep 300"], None, None)
    with pytest.raises(PodGoneError, match="evicted by the kubelet"):
        runner.succeeded(begun, ExecResult("", "", 137, pod="p"))
    assert len(reads) == 4


def test_our_own_stop_does_not_wait(monkeypatch) -> None:
    runner, reads = _runner(monkeypatch, [None])
    begun = runner.begin("p", ["sh", "-c", "sleep 300"], None, None)
    begun.command.stop_requested = True
    result = runner.succeeded(begun, ExecResult("", "", 137, pod="p"))
    assert result.returncode == 137 and len(reads) == 1


def test_a_dropped_stream_whose_stop_finds_the_node_gone_is_a_lost_pod(monkeypatch) -> None:
    """The node's machine died with the stream (its Node deleted after): the first read of the
    pod claims nothing, the stopper cannot reach the node, a second read names the loss."""
    from trainjob_magics.engine.errors import ConnectionLostError
    from trainjob_magics.engine.result import StopReport

    lost = PodDisruption("p", "lost", "lost: its node node-0 was deleted")
    runner, reads = _runner(monkeypatch, [None, lost])
    monkeypatch.setattr(
        commands,
        "stop_command",
        lambda *a, **k: StopReport("p", "x", False, "PodNotRunningError: its node was deleted"),
    )
    begun = runner.begin("p", ["sh", "-c", "sleep 300"], None, None)
    partial = ExecResult("before\n", "", None, pod="p")
    err = runner.failed(begun, ConnectionLostError("closed", partial=partial), None)
    assert isinstance(err, PodGoneError) and "lost" in str(err), err
    assert err.partial.stdout == "before\n" and len(reads) == 2


@pytest.mark.parametrize(
    ("version", "keeps_nodes"), [("v1.36.3", True), ("v1.36.3+trainjob-magics-local", False)]
)
def test_a_cluster_whose_only_node_was_deleted_still_keeps_nodes(
    monkeypatch, version: str, keeps_nodes: bool
) -> None:
    """A one-node cluster lists no Node once its node is deleted; only the local cluster (its
    /version says so) has none to delete."""
    from trainjob_magics.engine.exec import disruption

    def request(api, method, path, **kwargs):
        return {"items": []} if path.startswith("/api/v1/nodes") else {"gitVersion": version}

    monkeypatch.setattr(disruption, "request", request)
    assert disruption._serves_nodes(object()) is keeps_nodes
