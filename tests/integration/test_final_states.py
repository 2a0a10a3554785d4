"""States that stay true, in a real ipykernel against the local cluster: a session's status
panels are static HTML (no widget model) kept current through their display handles; when the
session ends (close, interrupted or timed-out connect, kernel restart, the job ending by itself)
every panel of it says so, with the wall-clock elapsed time."""

from __future__ import annotations

import queue
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.kernels import Kernel, load_magics_code
from tests.helpers.polling import wait_until
from tests.integration.proctools import marker_processes
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics.views.live import PANEL_MIME

pytestmark = pytest.mark.timeout(240)


WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"


def display_ids(msgs: list[dict[str, Any]]) -> list[str]:
    """Display ids of the cell's displays (shown through a display handle)."""
    return [
        m["content"]["transient"]["display_id"]
        for m in msgs
        if m["msg_type"] == "display_data" and m["content"].get("transient", {}).get("display_id")
    ]


def frozen(msgs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """display id -> the last bundle (text/html + text/plain) it was updated to."""
    out = {}
    for m in msgs:
        data = m["content"].get("data", {})
        if m["msg_type"] == "update_display_data" and "text/html" in data:
            out[m["content"]["transient"]["display_id"]] = data
    return out


def headline(bundle: dict[str, str]) -> str:
    """The status panel's text before the pods it last saw."""
    return bundle["text/plain"].split("as last seen")[0]


def drain(k: Kernel, seconds: float = 3.0) -> list[dict[str, Any]]:
    """Every iopub message that arrives until none came for ``seconds``."""
    msgs = []
    while True:
        try:
            msgs.append(k.kc.get_iopub_msg(timeout=seconds))
        except queue.Empty:
            return msgs


def setup(k: Kernel, kubeconfig: Path) -> None:
    reply, _ = k.run(load_magics_code(kubeconfig, widgets="on"))
    assert reply["status"] == "ok", reply


def no_widgets(msgs: list[dict[str, Any]]) -> None:
    """Nothing displayed needs a widget model: no comm opened, no widget view shown."""
    assert not [m for m in msgs if m["msg_type"].startswith("comm_")]
    for m in msgs:
        assert WIDGET_VIEW_MIME not in m["content"].get("data", {}), m


def test_close_says_deleted_in_the_connect_panel_and_the_status_panel(
    kernel: Kernel, cluster: LocalCluster
) -> None:
    setup(kernel, cluster.kubeconfig_path)
    reply, connect_msgs = kernel.run("%trainjob_connect mpi-interactive --nodes 2 --max-runtime 1h")
    assert reply["status"] == "ok", reply
    (panel,) = display_ids(connect_msgs)
    prints = [m for m in connect_msgs if m["msg_type"] == "stream"]
    assert not prints, prints  # the panel says the session is ready; nothing is printed under it
    no_widgets(connect_msgs)
    ready = [m for m in connect_msgs if m["content"].get("data")][-1]["content"]["data"]
    assert set(ready) == {"text/html", "text/plain", PANEL_MIME}
    assert "Running" in headline(ready) and "ready: TrainJob" in ready["text/plain"]
    reply, status_msgs = kernel.run("%trainjob_status")
    no_widgets(status_msgs)
    (status,) = display_ids(status_msgs)
    assert panel in frozen(status_msgs)  # %trainjob_status brings the connect panel up to date
    reply, close_msgs = kernel.run("%trainjob_close")
    assert reply["status"] == "ok", reply
    final = frozen(close_msgs)
    assert set(final) == {panel, status}, final
    for bundle in final.values():
        head = headline(bundle)
        assert " · Deleted · " in head and "Running" not in head, head
        # the true final state, and its history: ready (or shown), then closed, and when
        history = r"Ready (after \d+\.\d s|when shown) · deleted by %trainjob_close"
        assert re.search(history + r" \d+\.\d s later · session 'default' closed", head), head
        assert "max runtime 1h00m" in head and "left" not in head
        assert "Deleted" in bundle["text/html"].split("<details")[0]
    no_widgets(close_msgs)


def test_kernel_restart_freezes_panels_closed_at_kernel_exit(
    kernel: Kernel, cluster: LocalCluster
) -> None:
    setup(kernel, cluster.kubeconfig_path)
    reply, connect_msgs = kernel.run("%trainjob_connect mpi-interactive --nodes 2")
    assert reply["status"] == "ok", reply
    (panel,) = display_ids(connect_msgs)
    kernel.km.restart_kernel(now=False)  # Kernel > Restart: the shutdown hooks run
    final = frozen(drain(kernel))
    assert panel in final, final
    head = headline(final[panel])
    assert "Closed at kernel exit" in head and "Running" not in head, head
    assert "deleted" in head


@pytest.fixture(scope="module")
def kueue_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster whose ClusterQueue holds 4 CPUs (a node with room for more)."""
    root = tmp_path_factory.mktemp("final-states")
    with LocalCluster(root_dir=root / "cluster", kueue=True) as cluster:
        yield cluster


def test_interrupted_and_timed_out_queued_connects_say_so(kueue_cluster: LocalCluster) -> None:
    with Kernel() as k:
        setup(k, kueue_cluster.kubeconfig_path)
        reply, _ = k.run("%trainjob_connect torch-distributed --cpu 4 --queue user-queue --as a")
        assert reply["status"] == "ok", reply
        # the second job waits for quota; Ctrl-C while it is queued
        msg_id = k.kc.execute("%trainjob_connect torch-distributed --cpu 4 --queue user-queue")
        msgs: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while not any("Queued" in str(m["content"].get("data")) for m in msgs):
            assert time.monotonic() < deadline, "the second connect never showed Queued"
            msgs.append(k.kc.get_iopub_msg(timeout=60))
        time.sleep(1.5)  # a queued wait of a second or more: its elapsed time must not read 0s
        k.km.interrupt_kernel()
        reply = k.kc.get_shell_msg(timeout=60)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "error"
        msgs += drain(k, 2.0)
        (bundle,) = frozen(msgs).values()
        text = bundle["text/plain"]
        assert " · Interrupted · " in text and "Queued" not in text.split("Kueue:")[0], text
        elapsed = re.search(r"elapsed (\d+)s", text)
        assert elapsed and int(elapsed.group(1)) >= 1, text
        # said once: by the error below the panel, not by the panel too
        assert "is deleted since nothing ran in it yet" in reply["content"]["evalue"], reply
        assert "is deleted since" not in text, text
        # a connect that times out while queued
        reply, msgs = k.run(
            "%trainjob_connect torch-distributed --cpu 4 --queue user-queue --as c --timeout 3"
        )
        assert reply["status"] == "error", reply
        (bundle,) = frozen(msgs).values()
        assert " · Timed out · " in bundle["text/plain"], bundle["text/plain"]
        # the panel shows the queue position; the error says what happened and what to do
        panel = bundle["text/plain"]
        assert panel.count("position 1") == 1 and "keeps its place" not in panel, panel
        error = reply["evalue"]
        assert "still queued in LocalQueue user-queue after 3s;" in error, error
        assert "position" not in error and "%trainjob_close " in error, error
        reply, _ = k.run("%trainjob_close --all")
        assert reply["status"] == "ok", reply


def test_a_job_that_ended_by_itself_reads_failed_in_its_panel(
    kernel: Kernel, cluster: LocalCluster
) -> None:
    """The kubelet evicts the trainer pod mid-command: the job fails (backoffLimit 0); the
    cells say so, and the connect panel reads Failed instead of Running."""
    setup(kernel, cluster.kubeconfig_path)
    reply, connect_msgs = kernel.run("%trainjob_connect torch-distributed")
    assert reply["status"] == "ok", reply
    (panel,) = display_ids(connect_msgs)
    reply, text = kernel.run_text(
        "from trainjob_magics.magics.extension import loaded_magics\n"
        "print(loaded_magics(get_ipython()).host.registry.get('default').session.pod)"
    )
    pod = text.strip().splitlines()[-1]
    marker = f"{4000 + secrets.randbelow(5000)}.7"
    msg_id = kernel.kc.execute(f"%%trainjob\necho before; sleep {marker}")
    wait_until(lambda: marker_processes(f"sleep {marker}"), timeout=30)
    cluster.faults.evict_pod("default", pod, "The node was low on resource: memory.")
    msgs = []
    while True:
        msg = kernel.kc.get_iopub_msg(timeout=60)
        msgs.append(msg)
        state = msg["content"].get("execution_state")
        if msg["parent_header"].get("msg_id") == msg_id and state == "idle":
            break
    assert kernel.kc.get_shell_msg(timeout=30)["content"]["ename"] == "PodGoneError"
    reply, again = kernel.run("%%trainjob\necho again")  # the next cell says the job ended
    assert reply["status"] == "error" and "is Failed" in reply["evalue"], reply
    final = frozen(msgs + again)
    assert panel in final, final
    head = headline(final[panel])
    assert " · Failed · " in head and "Running" not in head, head
    reply, _ = kernel.run("%trainjob_close")
    assert reply["status"] == "ok", reply


def _run_until_idle(k: Kernel, code: str, started: Any) -> tuple[dict[str, Any], list[Any]]:
    """Execute ``code``; once ``started()`` holds, the caller's disruption happens; returns the
    shell reply's content and the cell's iopub messages."""
    msg_id = k.kc.execute(code)
    started()
    msgs = []
    while True:
        msg = k.kc.get_iopub_msg(timeout=60)
        msgs.append(msg)
        mine = msg["parent_header"].get("msg_id") == msg_id
        if mine and msg["content"].get("execution_state") == "idle":
            return k.kc.get_shell_msg(timeout=30)["content"], msgs


@pytest.mark.parametrize(
    ("take_away", "state", "said"),
    [
        ("preempt", "Preempted", "Kueue preempted TrainJob {name} (Preempted: Preempted to "),
        # waitForPodsReady (on by default from Kueue 0.19): Evicted, reason PodsReadyTimeout,
        # no Preempted condition (kueue pkg/controller/core/workload_controller.go)
        ("evict", "Evicted", "Kueue evicted TrainJob {name} (PodsReadyTimeout: Exceeded the "),
    ],
)
def test_a_preempted_session_reads_preempted_in_its_panel(
    kueue_cluster: LocalCluster, take_away: str, state: str, said: str
) -> None:
    """Kueue preempts (or evicts) the job while a cell runs: the cell fails with
    SessionPreemptedError and the connect panel reads Preempted (Evicted), not Running, and
    what Kueue did with its reason."""
    with Kernel() as k:
        setup(k, kueue_cluster.kubeconfig_path)
        reply, connect_msgs = k.run("%trainjob_connect torch-distributed --queue user-queue")
        assert reply["status"] == "ok", reply
        (panel,) = display_ids(connect_msgs)
        reply, text = k.run_text(
            "from trainjob_magics.magics.extension import loaded_magics\n"
            "print(loaded_magics(get_ipython()).host.registry.get('default').session.name)"
        )
        name = text.strip().splitlines()[-1]
        marker = f"{4000 + secrets.randbelow(5000)}.3"

        def preempt() -> None:
            wait_until(lambda: marker_processes(f"sleep {marker}"), timeout=30)
            kueue_cluster.kueue.set_quota({"cpu": "0"})  # nothing readmits it meanwhile
            getattr(kueue_cluster.kueue, take_away)(name)

        try:
            reply, msgs = _run_until_idle(k, f"%%trainjob\necho started; sleep {marker}", preempt)
            assert reply["ename"] == "SessionPreemptedError", reply
            final = frozen(msgs)
            assert panel in final, final
            head = headline(final[panel])
            assert f" · {state} · " in head and "Running" not in head, head
            assert said.format(name=name) in head, head
            assert f"; it is {state.lower()}, waiting for readmission; " in head, head
        finally:
            kueue_cluster.kueue.set_quota({"cpu": "4"})
        reply, _ = k.run("%trainjob_close")
        assert reply["status"] == "ok", reply
