"""States that stay true, in a real ipykernel against the local cluster: when a session ends
(close, interrupted or timed-out connect, kernel restart) every live widget of it is replaced by
static HTML saying so, with the wall-clock elapsed time."""

from __future__ import annotations

import queue
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.kernels import Kernel, load_magics_code
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(240)


def display_ids(msgs: list[dict[str, Any]]) -> list[str]:
    """Display ids of the cell's displays (widgets shown through a display handle)."""
    return [
        m["content"]["transient"]["display_id"]
        for m in msgs
        if m["msg_type"] == "display_data" and m["content"].get("transient", {}).get("display_id")
    ]


def frozen(msgs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """display id -> the last static bundle (text/html + text/plain) it was updated to."""
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


def test_close_freezes_the_connect_panel_and_status_widget(
    kernel: Kernel, cluster: LocalCluster
) -> None:
    setup(kernel, cluster.kubeconfig_path)
    reply, connect_msgs = kernel.run("%trainjob_connect mpi-interactive --nodes 2 --max-runtime 1h")
    assert reply["status"] == "ok", reply
    (panel,) = display_ids(connect_msgs)
    prints = [m for m in connect_msgs if m["msg_type"] == "stream"]
    assert not prints, prints  # the panel says the session is ready; nothing is printed under it
    reply, status_msgs = kernel.run("%trainjob_status")
    (status,) = display_ids(status_msgs)
    reply, close_msgs = kernel.run("%trainjob_close")
    assert reply["status"] == "ok", reply
    final = frozen(close_msgs)
    assert set(final) == {panel, status}, final
    for bundle in final.values():
        head = headline(bundle)
        assert " · Deleted · " in head and "Running" not in head, head
        assert "deleted; session 'default' closed" in head
        assert "max runtime 1h00m" in head and "left" not in head
        assert "Deleted" in bundle["text/html"].split("<details")[0]
    # the panels' models are closed: a saved notebook keeps the static HTML, not a widget
    assert any(m["msg_type"] == "comm_close" for m in close_msgs)


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
    with LocalCluster(root_dir=root / "cluster", kueue=True, cpus=8, memory="32Gi") as cluster:
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
        while not any("Queued" in str(m["content"]) for m in msgs if m["msg_type"] == "comm_msg"):
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
        assert "is deleted since nothing ran in it yet" in text
        # a connect that times out while queued
        reply, msgs = k.run(
            "%trainjob_connect torch-distributed --cpu 4 --queue user-queue --as c --timeout 3"
        )
        assert reply["status"] == "error", reply
        (bundle,) = frozen(msgs).values()
        assert " · Timed out · " in bundle["text/plain"], bundle["text/plain"]
        reply, _ = k.run("%trainjob_close --all")
        assert reply["status"] == "ok", reply
