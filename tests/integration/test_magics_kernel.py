"""Magics in a real ipykernel: error replies fail the cell, widgets render, restart cleans up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from trainjob_magics.localcluster import LocalCluster


def trainjobs(cluster: LocalCluster) -> list[str]:
    """Live TrainJob names in the default namespace."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        items = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs"
        )["items"]
    finally:
        api.close()
    return [i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp")]


def wait_gone(cluster: LocalCluster, name: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name not in trainjobs(cluster):
            return True
        time.sleep(0.2)
    return False


pytestmark = pytest.mark.timeout(180)


class Kernel:
    def __init__(self) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 60) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Execute ``code``; returns the reply content and the iopub messages of the cell."""
        msgs: list[dict[str, Any]] = []
        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=msgs.append)
        return reply["content"], msgs

    def restart(self) -> None:
        self.km.restart_kernel(now=False)
        self.kc.wait_for_ready(timeout=60)

    def stop(self) -> None:
        """Shut the kernel down politely (shutdown_request), once."""
        if self.km.has_kernel:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=False)


@pytest.fixture
def kernel(cluster: LocalCluster) -> Iterator[Kernel]:
    k = Kernel()
    try:
        yield k
    finally:
        k.stop()


def setup(k: Kernel, cluster: LocalCluster) -> None:
    reply, _ = k.run(
        "%load_ext trainjob_magics\n"
        f"%config TrainJobMagics.kubeconfig = {str(cluster.kubeconfig_path)!r}"
    )
    assert reply["status"] == "ok", reply


def job_name(k: Kernel) -> str:
    _reply, msgs = k.run(
        "from trainjob_magics.magics.extension import loaded_magics\n"
        "print(loaded_magics(get_ipython()).registry.find().session.name)"
    )
    return "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream").strip()


def test_errors_fail_the_cell_and_widgets_render(kernel: Kernel, cluster: LocalCluster) -> None:
    setup(kernel, cluster)
    reply, msgs = kernel.run("%trainjob_connect mpi-interactive --nodes 2")
    assert reply["status"] == "ok", reply
    types = [m["msg_type"] for m in msgs]
    assert "comm_open" in types and "display_data" in types  # the live status widget
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
