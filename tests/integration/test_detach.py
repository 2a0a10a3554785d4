"""``%%trainjob --detach`` in a real InteractiveShell against the local cluster: the handle line
and ``_trainjob``, one line for each misuse, and ``%reset`` / ``%unload_ext`` leaving a job
with a live detached run alone with one line (tests/realcluster/test_detach_real.py has the
kernels, the killed kernel and the job's end on every runtime)."""

from __future__ import annotations

import time

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.kernels import load_magics_code
from tests.helpers.kube import get_trainjob
from tests.helpers.polling import wait_until
from trainjob_magics import DetachedRun
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


def shown(
    sh: InteractiveShell, source: str, capsys: pytest.CaptureFixture[str]
) -> tuple[bool, str]:
    capsys.readouterr()
    res = sh.run_cell(source)
    out = capsys.readouterr()
    return res.success, out.out + out.err


def _state(cluster: LocalCluster, name: str) -> str:
    job = get_trainjob(cluster.kubeconfig_path, name)
    for c in (job or {}).get("status", {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return c["type"]
    return "Deleted" if job is None else "Running"


def test_detach_cell_returns_at_once_with_its_handle(shell, cluster, capsys) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive --nodes 2")
    t0 = time.monotonic()
    ok, out = shown(shell, "%%trainjob --detach\nsleep 60; exit 0\n", capsys)
    took = time.monotonic() - t0
    handle = shell.user_ns["_trainjob"]
    assert ok and isinstance(handle, DetachedRun) and took < 1.0, (took, out)
    assert out.strip() == (
        f"{handle.line()}: follow it with %trainjob_logs --follow, or attach from any kernel "
        f"with %trainjob_connect --attach {handle.trainjob}"
    )
    assert handle.run == 1 and handle.pods == (shell.user_ns["_trainjob"].pods[0],)
    # one line each: a second run, options a detached run cannot take
    ok, out = shown(shell, "%%trainjob --detach\necho again\n", capsys)
    assert not ok and "Traceback" not in out
    assert [x for x in out.splitlines() if "already has detached run 1 running" in x], out
    ok, out = shown(shell, "%%trainjob --detach --pod all --timeout 5\nhostname\n", capsys)
    assert not ok and "--detach takes no --pod, --timeout" in out and "Traceback" not in out
    # interactive cells still work, and the session list marks the run
    ok, out = shown(shell, "%%trainjob\necho interactive\n", capsys)
    assert ok and "interactive" in out
    ok, out = shown(shell, "%trainjob_sessions", capsys)
    assert ok and "detached run 1" in out, out
    ok, out = shown(shell, "%trainjob_close", capsys)
    errors = [x for x in out.splitlines() if "closing would kill it" in x]
    assert not ok and len(errors) == 1 and "sleep 60; exit 0" in errors[0], out
    assert "%trainjob_close --force" in errors[0] and _state(cluster, handle.trainjob) == "Running"
    ok, out = shown(shell, "%trainjob_close --force", capsys)
    assert ok and f"TrainJob {handle.trainjob} deleted" in out, out


@pytest.mark.parametrize("how", ["reset -f", "unload_ext trainjob_magics"])
def test_reset_and_unload_leave_a_live_detached_run_alone(shell, cluster, capsys, how) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as d")
    ok, out = shown(shell, "%%trainjob --detach d\nfor i in $(seq 30); do sleep 1; done\n", capsys)
    assert ok, out
    name = shell.user_ns["_trainjob"].trainjob
    ok, out = shown(shell, f"%{how}", capsys)
    left = [x for x in out.splitlines() if x.startswith("Left session 'd' running")]
    assert ok and len(left) == 1 and len(out.strip().splitlines()) == 1, out
    assert f"%trainjob_close {name} --force" in left[0] and "seq 30" in left[0], out
    assert _state(cluster, name) == "Running"
    if how.startswith("unload"):
        shell.run_line_magic("load_ext", "trainjob_magics")
        shell.run_line_magic(
            "config", f"TrainJobMagics.kubeconfig = {str(cluster.kubeconfig_path)!r}"
        )
    ok, out = shown(shell, f"%trainjob_close {name}", capsys)  # no session here: by name
    errors = [x for x in out.splitlines() if "closing would kill it" in x]
    assert not ok and len(errors) == 1 and f"%trainjob_close {name} --force" in errors[0], out
    assert _state(cluster, name) == "Running"
    ok, out = shown(shell, f"%trainjob_close {name} --force", capsys)
    assert ok and "deleted" in out, out
    wait_until(lambda: get_trainjob(cluster.kubeconfig_path, name) is None, timeout=60)


def test_interrupting_a_follow_stops_following_not_the_run(cluster, kernel) -> None:
    reply, out = kernel.run_text(
        load_magics_code(cluster.kubeconfig_path, widgets="off")
        + "\n%trainjob_connect mpi-interactive\n",
        timeout=120,
    )
    assert reply["status"] == "ok", out
    body = "for i in $(seq 40); do echo tick-$i; sleep 0.5; done"
    reply, out = kernel.run_text(f"%%trainjob --detach\n{body}\n")
    assert reply["status"] == "ok", out
    kc = kernel.kc
    msg_id = kc.execute("%trainjob_logs --follow")
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while not any("tick-3" in s for s in seen):  # following live
        assert time.monotonic() < deadline, seen
        msg = kc.get_iopub_msg(timeout=10)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            seen.append(msg["content"]["text"])
    kernel.km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "ok"  # stopped following: no error, no traceback
    reply, out = kernel.run_text("%trainjob_sessions")  # the run was not stopped
    assert "detached run 1" in out and "(ended)" not in out, out
    reply, out = kernel.run_text("%%trainjob\ncat ${TMPDIR:-/tmp}/trainjob-magics/detached/1/exit")
    assert reply["status"] == "error", out  # no exit code yet: it still runs
    reply, out = kernel.run_text("%trainjob_close --force", timeout=120)
    assert reply["status"] == "ok" and "deleted" in out, out


def test_idle_stop_leaves_a_live_detached_run_alone(shell, cluster, capsys) -> None:
    shell.run_line_magic("trainjob_connect", "mpi-interactive --as i --idle-stop 2s")
    ok, out = shown(shell, "%%trainjob --detach i\nsleep 60\n", capsys)
    assert ok, out
    name = shell.user_ns["_trainjob"].trainjob
    registry = shell.magics_manager.registry["TrainJobMagics"].registry
    wait_until(lambda: "i" not in registry, timeout=30)  # the idle stop acted
    assert _state(cluster, name) == "Running"
    ok, out = shown(shell, "%%trainjob i\necho hi\n", capsys)
    lines = [x for x in out.splitlines() if "idle stop at" in x]
    assert not ok and len(lines) == 1 and "Left session 'i' running" in lines[0], out
    assert f"%trainjob_close {name} --force" in lines[0] and "sleep 60" in lines[0], out
    ok, out = shown(shell, f"%trainjob_close {name} --force", capsys)
    assert ok and "deleted" in out, out
