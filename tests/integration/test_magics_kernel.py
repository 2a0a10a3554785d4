"""Magics in a real ipykernel: error replies fail the cell, widgets render, restart cleans up."""

from __future__ import annotations

import time

import pytest

from tests.helpers.kernels import Kernel, load_magics_code
from tests.helpers.kube import trainjob_names, wait_trainjob_gone
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


def trainjobs(cluster: LocalCluster) -> list[str]:
    """Live TrainJob names in the default namespace."""
    return trainjob_names(cluster.kubeconfig_path, include_deleting=False)


def wait_gone(cluster: LocalCluster, name: str, timeout: float) -> bool:
    return wait_trainjob_gone(cluster.kubeconfig_path, name, timeout)


def setup(k: Kernel, cluster: LocalCluster) -> None:
    reply, _ = k.run(load_magics_code(cluster.kubeconfig_path))
    assert reply["status"] == "ok", reply


def job_name(k: Kernel) -> str:
    _reply, out = k.run_text(
        "from trainjob_magics.magics.extension import loaded_magics\n"
        "print(loaded_magics(get_ipython()).registry.find().session.name)"
    )
    return out.strip()


def test_errors_fail_the_cell_and_widgets_render(kernel: Kernel, cluster: LocalCluster) -> None:
    setup(kernel, cluster)
    reply, msgs = kernel.run("%trainjob_connect mpi-interactive --nodes 2")
    assert reply["status"] == "ok", reply
    types = [m["msg_type"] for m in msgs]
    # the status panel: one display kept current through its display id, with no widget model
    assert "display_data" in types and "update_display_data" in types
    assert "comm_open" not in types
    reply, msgs = kernel.run("%%trainjob\necho partial-output\nexit 3")
    assert reply["status"] == "error" and reply["ename"] == "TrainJobCellError", reply
    assert "exited with code 3" in reply["evalue"] and len(reply["traceback"]) == 1
    errors = [m for m in msgs if m["msg_type"] == "error"]
    assert len(errors) == 1 and "Traceback" not in "".join(errors[0]["content"]["traceback"])
    # the output widget's final text fallback keeps what was received, plus the footer
    updates = [
        m["content"]["data"].get("text/plain", "")
        for m in msgs
        if m["msg_type"] == "update_display_data"
    ]
    assert updates and "partial-output" in updates[-1] and "exit code 3" in updates[-1]
    states = " ".join(
        str(m["content"].get("data", {}).get("state", {}).get("value", ""))
        for m in msgs
        if m["msg_type"] == "comm_msg"
    )
    assert "partial-output" in states and "tjm-stdout" in states
    reply, _ = kernel.run("%%trainjob --no-raise-error\nexit 3")
    assert reply["status"] == "ok"
    reply, msgs = kernel.run("%trainjob_connect mpi-interactive --bogus")
    assert reply["status"] == "error" and reply["ename"] == "TrainJobUsageError"
    assert reply["traceback"] and "--bogus" in reply["traceback"][0]
    assert cluster.token not in str(msgs)


def test_restart_and_shutdown_delete_the_trainjobs(kernel: Kernel, cluster: LocalCluster) -> None:
    setup(kernel, cluster)
    reply, _ = kernel.run("%trainjob_connect mpi-interactive --nodes 2 --as a")
    assert reply["status"] == "ok", reply
    first = job_name(kernel)
    assert first in trainjobs(cluster)
    t0 = time.monotonic()
    kernel.restart()
    assert wait_gone(cluster, first, timeout=15), "the TrainJob outlived the kernel restart"
    assert time.monotonic() - t0 < 20
    setup(kernel, cluster)
    reply, _ = kernel.run("%trainjob_connect mpi-interactive --nodes 2")
    assert reply["status"] == "ok", reply
    second = job_name(kernel)
    kernel.stop()
    assert wait_gone(cluster, second, timeout=15), "the TrainJob outlived the kernel shutdown"
