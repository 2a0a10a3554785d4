"""Interrupts stop the remote command's whole process tree (SIGINT, SIGTERM, SIGKILL).

The local cluster runs pod processes as local processes, so "every remote process gone" is
checked through /proc; the pod's pid files (``$TMPDIR/trainjob-magics/*.pid``) must be gone too.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from tests.helpers.kernels import Kernel, load_magics_code, shown_text
from tests.helpers.mpi import mpirun_sh
from tests.integration.proctools import marker_processes, wait_dead
from trainjob_magics import connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


def pid_files(cluster: LocalCluster, pod: str) -> list[str]:
    d = cluster.pod_dir("default", pod) / ".tmp" / "trainjob-magics"
    return sorted(p.name for p in d.glob("*.pid")) if d.is_dir() else []


def body(marker: str) -> str:
    """``sleep 1000`` under sh with a child process (plus a background one ignoring SIGINT)."""
    return f"echo started\nsh -c 'sleep 1000.{marker}1; :' &\nsleep 1000.{marker}2\n"


def new_marker() -> str:
    """Digits that make this test's ``sleep 1000.<digits>`` command lines unique."""
    return f"{os.getpid() % 100000:05d}{int(time.time() * 1000) % 100000:05d}"


def sleep_pids(marker: str) -> list[int]:
    """The test's ``sleep`` processes."""
    return marker_processes(f"sleep 1000.{marker}", prefix=True)


def tree_pids(marker: str) -> list[int]:
    """Every process of the command: wrapper, shells, sleeps (all carry the marker)."""
    return marker_processes(marker)


# ------------------------------------------------------------------ engine: execute()


def test_execute_ctrl_c_stops_tree_and_keeps_output(cluster: LocalCluster) -> None:
    s = connect("mpi-interactive", config_file=str(cluster.kubeconfig_path), timeout=30)
    marker = new_marker()
    try:
        seen: list[str] = []
        started = threading.Event()

        def on_output(pod: str, stream: str, text: str) -> None:
            seen.append(text)
            started.set()

        def ctrl_c() -> None:
            started.wait(10)
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)  # what the terminal does on Ctrl-C

        threading.Thread(target=ctrl_c, daemon=True).start()
        with pytest.raises(E.CommandInterruptedError) as info:
            s.execute(["sh", "-c", body(marker).replace("1000", "1000")], on_output=on_output)
        t0 = time.monotonic()
        assert wait_dead(tree_pids(marker), 5) == []
        assert "stopped the remote command" in str(info.value)
        assert info.value.partial is not None and info.value.partial.stdout == "started\n"
        assert "".join(seen) == "started\n"
        assert wait_dead(sleep_pids(marker), 5) == []
        assert time.monotonic() - t0 < 5
        assert pid_files(cluster, s.pod) == []
        assert s.execute("echo still-usable").stdout == "still-usable\n"
    finally:
        s.close(timeout=20)


def test_interrupt_from_another_thread_stops_mpirun_ranks(
    cluster: LocalCluster, mpi_impl: str
) -> None:
    s = connect(
        "mpi-interactive", num_nodes=2, config_file=str(cluster.kubeconfig_path), timeout=30
    )
    marker = new_marker()
    try:
        box: dict[str, Any] = {}
        ranks: list[str] = []

        def run() -> None:
            try:
                box["r"] = s.execute(
                    mpirun_sh(mpi_impl, f"-np 2 sh -c 'echo rank $$; sleep 1000.{marker}; :'"),
                    on_output=lambda p, st, t: ranks.append(t),
                )
            except BaseException as exc:
                box["e"] = exc

        t = threading.Thread(target=run)
        t.start()
        deadline = time.monotonic() + 15
        while len(sleep_pids(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(sleep_pids(marker)) == 2
        tree = tree_pids(marker)
        t0 = time.monotonic()
        reports = s.interrupt()
        assert len(reports) == 1 and reports[0].stopped, reports
        assert wait_dead(tree, 5) == []
        t.join(10)
        assert time.monotonic() - t0 < 5
        assert "r" in box and box["r"].returncode != 0  # the command ended, killed
        assert "rank" in "".join(ranks)
        assert pid_files(cluster, s.pod) == []
    finally:
        s.close(timeout=20)


# ------------------------------------------------------------------ %%trainjob in a real kernel


def test_kernel_interrupt_stops_trainjob_cell(kernel: Kernel, cluster: LocalCluster) -> None:
    marker = new_marker()
    reply, _ = kernel.run(
        load_magics_code(cluster.kubeconfig_path, widgets="off")
        + "\n%trainjob_connect mpi-interactive"
    )
    assert reply["status"] == "ok", reply
    msgs: list[dict[str, Any]] = []
    msg_id = kernel.kc.execute("%%trainjob\n" + body(marker))
    deadline = time.monotonic() + 20
    while len(sleep_pids(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(sleep_pids(marker)) == 2
    tree = tree_pids(marker)
    assert len(tree) >= 4  # wrapper sh, cell sh, child sh, 2 sleeps
    t0 = time.monotonic()
    kernel.km.interrupt_kernel()  # Kernel > Interrupt: SIGINT to the kernel process
    reply = kernel.kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kernel.kc.get_shell_msg(timeout=30)
    while True:
        m = kernel.kc.get_iopub_msg(timeout=10)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        msgs.append(m)
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
    assert wait_dead(tree, 5) == []
    assert time.monotonic() - t0 < 5
    assert tree_pids(marker) == []
    assert reply["content"]["status"] == "error"  # the cell failed
    shown = shown_text(msgs)
    assert "started" in shown  # the output received so far stays shown
    assert "interrupted: stopped the remote command" in shown
    errors = [m for m in msgs if m["msg_type"] == "error"]
    assert len(errors) == 1 and len(errors[0]["content"]["traceback"]) == 1  # one line
    reply, msgs = kernel.run('%%trainjob\nls "$TMPDIR/trainjob-magics"; echo done')
    assert reply["status"] == "ok"
    listing = shown_text(msgs)
    assert "done" in listing
    # the stopper removed the interrupted command's pid file: only this `ls` command's own is left
    assert listing.count(".pid") <= 1, listing
    reply, _ = kernel.run("%trainjob_close --all")
    assert reply["status"] == "ok"
