"""``pods=...`` fan-out on a torch-distributed job with 8 nodes, over real HTTPS/WebSocket."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from trainjob_magics.engine import connect
from trainjob_magics.engine.errors import ConnectionLostError, InvalidInputError
from trainjob_magics.engine.result import MultiExecResult
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

LINES = 300
SCRIPT = (
    f'i=1; while [ $i -le {LINES} ]; do echo "$POD_NAME line $i"; i=$((i+1)); done; '
    'echo "err $POD_NAME" >&2'
)


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[Any]:
    s = connect("torch-distributed", num_nodes=8, config_file=str(local_cluster.kubeconfig_path))
    yield s
    s.close(timeout=30)


def run(session: Any, command: Any, pods: Any, **kw: Any) -> MultiExecResult:
    result = session.execute(command, pods=pods, **kw)
    assert isinstance(result, MultiExecResult)
    return result


def test_all_eight_pods_output_correct_and_complete(session: Any) -> None:
    chunks: dict[str, list[tuple[str, str]]] = {}
    lock = threading.Lock()

    def on_output(pod: str, stream: str, text: str) -> None:
        with lock:
            chunks.setdefault(pod, []).append((stream, text))

    result = run(session, SCRIPT, "all", on_output=on_output)
    assert len(result) == 8 and result.ok and result.failed == []
    labels = sorted(result.labels.values(), key=lambda s: int(s.split("-")[1]))
    assert labels == [f"node-{i}" for i in range(8)]
    assert session.pod in result  # the trainer (node-0) is one of them
    for pod, res in result.items():
        expected = "".join(f"{pod} line {i}\n" for i in range(1, LINES + 1))
        assert res.returncode == 0 and res.pod == pod
        assert res.stdout == expected  # complete, in order, nothing from another pod
        assert res.stderr == f"err {pod}\n"
        streamed = "".join(t for s, t in chunks[pod] if s == "stdout")
        assert streamed == expected
    assert "8 pods ok" in result.summary()


def test_one_failing_pod_is_named(session: Any) -> None:
    victim = run(session, "true", "node-3").pods[0]
    result = run(session, f'echo "hi $POD_NAME"; [ "$POD_NAME" != {victim} ] || exit 7', "all")
    assert result.failed == [victim]
    assert not result.ok
    assert result[victim].returncode == 7 and result[victim].stdout == f"hi {victim}\n"
    assert result.reason(victim) == "exit 7"
    assert f"1 of 8 pods failed: {victim} [node-3] (exit 7)" == result.summary()
    assert all(r.returncode == 0 for p, r in result.items() if p != victim)


def test_slow_pod_does_not_hold_back_the_others(session: Any) -> None:
    slow = run(session, "true", "node-5").pods[0]
    first_seen: dict[str, float] = {}
    started = time.monotonic()

    def on_output(pod: str, stream: str, text: str) -> None:
        first_seen.setdefault(pod, time.monotonic() - started)

    result = run(
        session,
        f'[ "$POD_NAME" = {slow} ] && sleep 3; echo done',
        "all",
        on_output=on_output,
    )
    assert result.ok
    fast = [t for p, t in first_seen.items() if p != slow]
    assert len(fast) == 7 and max(fast) < 2.0, first_seen
    assert first_seen[slow] >= 3.0


def test_dropped_connection_is_that_pods_own_error(session: Any, cluster: LocalCluster) -> None:
    victim = run(session, "true", "node-6").pods[0]
    cluster.faults.drop_exec(victim, after_bytes=100)
    result = run(session, "head -c 100000 /dev/zero | tr '\\0' x; echo", "all")
    assert result.failed == [victim]
    assert isinstance(result.errors[victim], ConnectionLostError)
    assert result[victim].returncode is None
    assert result.reason(victim).startswith("ConnectionLostError: ")
    assert "ConnectionLostError" in result.summary()
    for pod, res in result.items():
        if pod != victim:
            assert res.returncode == 0 and len(res.stdout) == 100001


def test_targets_role_index_list_and_unknown(session: Any) -> None:
    result = run(session, "echo $POD_NAME", "node-1,node-2")
    assert [result.labels[p] for p in result] == ["node-1", "node-2"]
    assert [r.stdout.strip() for r in result.values()] == result.pods
    single = session.execute("echo $POD_NAME", pods="trainer")
    assert single.stdout.strip() == session.pod  # "trainer" keeps the plain ExecResult
    with pytest.raises(InvalidInputError, match=r"node-8.*node \(node-0\.\.node-7\)"):
        session.execute("true", pods="node-8")


def test_stdin_goes_to_every_pod(session: Any) -> None:
    result = run(session, "wc -c", "all", stdin=b"x" * 100_000)
    assert {r.stdout.strip() for r in result.values()} == {"100000"}


# 8 concurrent execs vs one after another: benchmarks/ row ``fanout`` (no timing in tests).
