"""Faults only a real stack throws (docs/faults.md, "Faults on the real stack"): kube-apiserver
and etcd restarts, the Kueue controller down while a connect is queued, the node lost under a
running session. Each asserts what the user sees, within a bound, on the real node (kubelet and
containerd).

Faults are destructive, so the module starts a stack of its own (devtools.realstack.stack.up in
a temporary folder, its node in a slot of its own beside the suite's stack) and takes it down at
the end: then the host must be as the module found it (network links, sysctls, iptables, mounts,
cgroups, network namespaces). Without kubectl or the stack's builds (Go) it skips, naming what
is missing; with ``TRAINJOB_MAGICS_REQUIRE_REALSTACK=1`` it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.realstack import fixtures, paths, procs, realnode, stack
from devtools.realstack.context import NodeShape, StackContext
from devtools.realstack.realnode import host
from devtools.realstack.versions import Versions
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E

pytestmark = pytest.mark.timeout(600)
REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"
RUNTIME = "torch-distributed"
BOUND = 90.0  # a fault's effect reaches the user within this (a loaded 2-core machine)


def _missing(why: str) -> None:
    if REQUIRE:
        pytest.fail(f"real stack required (TRAINJOB_MAGICS_REQUIRE_REALSTACK=1): {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def rs() -> Iterator[StackContext]:
    if shutil.which("kubectl") is None:
        _missing("kubectl is not on PATH")
    versions = Versions().resolved()
    if shutil.which("go") is None and not paths.bin_dir("kubernetes", versions.kubernetes).exists():
        _missing("Go is not installed and the real stack's builds are not cached")
    run = Path(tempfile.mkdtemp(prefix="tjm-faults-"))
    before, stacks = host.snapshot(), host.stacks_on_host()
    try:
        # with the hub too: `down` must take its processes and leave the host as it was
        ctx = stack.up(run, versions, NodeShape(gpus=0), jupyterhub=True)
    except procs.StackError as exc:
        stack.down(run)
        _missing(f"the real stack did not start: {exc}")
    yield ctx
    slot = ctx.node_slot
    processes = stack.stack_processes(run)
    assert len(processes) >= 12, processes  # the control plane, the node, the controllers, hub
    for name in ("jupyterhub", "hub-proxy", "hub-relay"):
        assert procs.pid_of(run, name) in processes, name
    stack.down(run)
    # `down` returns only when they are gone: a `down; up` cannot race them (issue 36)
    survivors = [p for p in processes if procs.alive(p)]
    assert not survivors, f"still running when down returned: {survivors}"
    # other stacks (the suite's own, a matrix run) may change the host meanwhile: only this
    # module's stack is compared
    others = {**stacks, **host.stacks_on_host()}
    after = host.only_slot(host.snapshot(), slot, others)
    before = host.only_slot(before, slot, others)
    changed = {
        k: (
            sorted(set(map(str, before[k])) - set(map(str, after[k]))),
            sorted(set(map(str, after[k])) - set(map(str, before[k]))),
        )
        if isinstance(before[k], list)
        else (before[k], after[k])
        for k in before
        if before[k] != after[k]
    }
    assert not changed, f"the host changed (before-only, after-only): {changed}"


def kc(ctx: StackContext) -> str:
    return str(ctx.admin_kubeconfig)


def kubectl(ctx: StackContext, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": kc(ctx)}
    proc = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def until(what: str, check: Callable[[], Any], timeout: float = BOUND) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Cell:
    """``session.execute(command)`` in a thread, streaming; ``wait()`` gives (result, error)."""

    def __init__(self, session: TrainJobSession, command: str) -> None:
        self.streamed: list[str] = []
        self.notices: list[str] = []
        self.result: Any = None
        self.error: BaseException | None = None
        self.ended = 0.0
        self.thread = threading.Thread(target=self._run, args=(session, command), daemon=True)
        self.thread.start()
        until("the cell's first line", lambda: self.streamed, timeout=30)

    def _run(self, session: TrainJobSession, command: str) -> None:
        try:
            self.result = session.execute(
                command,
                on_output=lambda _p, _s, text: self.streamed.append(text),
                on_notice=self.notices.append,
            )
        except BaseException as exc:
            self.error = exc
        self.ended = time.monotonic()

    def wait(self, timeout: float = BOUND) -> Cell:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the cell hangs"
        return self


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    return text


@pytest.fixture(scope="module")
def session(rs: StackContext) -> Iterator[TrainJobSession]:
    s = connect(RUNTIME, config_file=kc(rs), namespace=fixtures.NAMESPACE, timeout=120)
    yield s
    s.close(timeout=120)


def test_apiserver_restart_during_a_short_cell_completes(rs, session) -> None:
    """SIGTERM: kube-apiserver drains for up to 10 s, keeping the exec stream: the cell ends."""
    cell = Cell(session, "echo before; sleep 4; echo after; exit 3")
    procs.restart(rs.run, "kube-apiserver")
    cell.wait()
    assert cell.error is None, cell.error
    assert cell.result.returncode == 3 and cell.result.stdout == "before\nafter\n"
    assert session.execute("echo next", timeout=BOUND).stdout == "next\n"


def test_apiserver_restart_cuts_a_long_cell_with_one_line(rs, session) -> None:
    cell = Cell(session, "echo before; sleep 300; echo after")
    started = time.monotonic()
    procs.restart(rs.run, "kube-apiserver")
    cell.wait()
    err = cell.error
    assert isinstance(err, E.ConnectionLostError), repr(err)
    text = one_line(err)
    assert f"the connection to pod {session.pod} was lost before the command finished" in text
    assert "stopped the remote command" in text and err.stopped
    assert err.partial is not None and err.partial.stdout == "before\n"
    assert cell.ended - started < BOUND
    assert any("API server unreachable" in n for n in cell.notices), cell.notices
    assert session.execute("echo next", timeout=BOUND).stdout == "next\n"


def test_etcd_restart_mid_cell_does_not_touch_the_cell(rs, session) -> None:
    cell = Cell(session, "echo before; sleep 12; echo after; exit 3")
    procs.restart(rs.run, "etcd")
    cell.wait()
    assert cell.error is None, cell.error
    assert cell.result.returncode == 3 and cell.result.stdout == "before\nafter\n"
    assert session.execute("echo next", timeout=BOUND).stdout == "next\n"


def test_cell_started_while_etcd_is_down_waits_then_runs(rs, session) -> None:
    procs.stop(rs.run, "etcd")
    started = time.monotonic()
    back = threading.Timer(8.0, procs.restart, args=(rs.run, "etcd"))
    back.start()
    try:
        result = session.execute("echo during", timeout=BOUND)
    finally:
        back.join()
    assert result.ok and result.stdout == "during\n"
    assert time.monotonic() - started < BOUND
    assert session.status().state == "Running"


def test_kueue_down_while_a_connect_is_queued(rs) -> None:
    ns, queue = fixtures.QUEUED_NAMESPACE, fixtures.LOCAL_QUEUES[0]
    # the ClusterQueue's cpu quota is the real node's allocatable: two pods of half each fill
    # it (and the node), so the next session waits for quota
    half = f"{int(_millicores(rs.nodes.cpus) * rs.nodes.count / 2)}m"
    blocker = connect(
        RUNTIME, config_file=kc(rs), namespace=ns, queue=queue, num_nodes=2, cpu=half, timeout=120
    )
    seen: list[Any] = []
    out: dict[str, Any] = {}

    def queued() -> None:
        try:
            out["s"] = connect(
                RUNTIME,
                config_file=kc(rs),
                namespace=ns,
                queue=queue,
                cpu="500m",
                timeout=300,
                on_status=seen.append,
            )
        except BaseException as exc:
            out["e"] = exc

    thread = threading.Thread(target=queued, daemon=True)
    thread.start()
    try:
        until("the connect queued", lambda: any(s.state == "Queued" for s in seen))
        procs.stop(rs.run, "kueue")
        until(
            "the status to say Kueue is not answering",
            lambda: "Kueue is not answering" in seen[-1].message,
        )
        # Kueue's TrainJob webhook (failurePolicy Fail) refuses every create meanwhile
        with pytest.raises(E.ApiServerError) as refused:
            connect(RUNTIME, config_file=kc(rs), namespace=fixtures.NAMESPACE, timeout=30)
        assert "the admission webhook mtrainjob.kb.io" in one_line(refused.value)
        assert "kubectl get pods -n kueue-system" in str(refused.value)
        kubectl(rs, "delete", "trainjob", "-n", ns, blocker.name, "--wait=false")
        assert thread.is_alive()  # still queued: nothing admits it while Kueue is down
        procs.restart(rs.run, "kueue")
        thread.join(BOUND + 60)
        assert not thread.is_alive() and "e" not in out, out.get("e")
        s = out["s"]
        assert s.status().queue.state == "Admitted"
        assert s.execute("echo admitted").stdout == "admitted\n"
        s.close(timeout=120)
    finally:
        if procs.pid_of(rs.run, "kueue") is None:
            procs.restart(rs.run, "kueue")
        blocker.close(timeout=120)


def test_node_lost_under_a_running_session(rs) -> None:
    """Last: the node's machine goes away (its kubelet, runtime and containers killed, its Node
    deleted, as a cloud's node controller does), then comes back."""
    s = connect(RUNTIME, config_file=kc(rs), namespace=fixtures.NAMESPACE, timeout=120)
    try:
        old = s.pod
        node = s.status().pods[0].node
        cell = Cell(s, "echo before; sleep 300")
        started = time.monotonic()
        realnode.lose(rs)
        cell.wait()
        err = cell.error
        assert isinstance(err, E.PodGoneError), repr(err or cell.result)
        assert f"pod {old} was lost: its node {node} was deleted while the command ran" in (
            one_line(err)
        )
        assert err.partial.stdout == "before\n" and cell.ended - started < 30
        assert "was lost" in s.status().disruption
        # while the node is gone the next command says so in one line
        with pytest.raises(E.PodNotRunningError) as gone:
            s.execute("echo next", timeout=BOUND)
        assert f"its node {node} was deleted" in one_line(gone.value)
        t = time.monotonic()
        realnode.revive(rs)
        # the node is back: the session runs on the pod again, or on its Job's replacement
        result = until(
            "the session to run a command on the node that came back",
            lambda: s.execute("echo next", timeout=BOUND),
            timeout=180,
        )
        assert result.stdout == "next\n" and s.status().state == "Running"
        assert time.monotonic() - t < 240
    finally:
        if procs.pid_of(rs.run, "kubelet") is None:
            realnode.revive(rs)
        s.close(timeout=120)


def _millicores(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
