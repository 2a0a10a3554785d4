"""A job closed by its kernel's exit reads "closed at kernel exit" in the sessions API (the
sidebar and the live panels), also when the kernel could not write its closed-by note first: a
Role without `patch` on trainjobs (here: the local cluster answers 403 to it), as an API server
too slow for the seconds Jupyter gives a kernel to exit would. Before, the server said "deleted
outside trainjob-magics (e.g. kubectl delete)", which nobody did. A real JupyterLab server, real
kernels it starts, restarted and shut down through its REST API as the menu does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import JupyterLab, start_jupyterlab
from tests.helpers.hub import Kernel
from trainjob_magics.localcluster import LocalCluster

API = "/trainjob-magics/api"


@pytest.fixture
def lab_without_patch(own_cluster: LocalCluster, tmp_path: Path) -> Iterator[JupyterLab]:
    """JupyterLab (and its kernels) as a user who may do everything but patch TrainJobs."""
    token = own_cluster.add_user("no-patch", deny=[("patch", "trainjobs")])
    kubeconfig = own_cluster.write_kubeconfig(tmp_path / "kubeconfig", token)
    lab = start_jupyterlab(tmp_path, tmp_path / "lab", {"KUBECONFIG": str(kubeconfig)})
    yield lab
    lab.stop()


def _connect(lab: JupyterLab) -> tuple[str, dict[str, Any]]:
    """A kernel of ``lab`` with a session; (kernel id, the session's record once Running)."""
    model = lab.api("/api/kernels", "POST", {"name": "python3"})
    kernel = Kernel(lab.url + "/", lab.token, model["id"])
    try:
        result = kernel.run(
            "%load_ext trainjob_magics\n%trainjob_connect torch-distributed", timeout=180
        )
        assert result.status == "ok", result
    finally:
        kernel.close()
    snap = lab.api_until(
        f"{API}/sessions",
        lambda s: any(r.get("kernel") == model["id"] for r in s["sessions"]),
        timeout=60,
    )
    record = next(r for r in snap["sessions"] if r.get("kernel") == model["id"])
    return model["id"], record


def _gone_reason(lab: JupyterLab, record: dict[str, Any]) -> str:
    path = f"{API}/sessions/{record['namespace']}/{record['name']}?uid={record['uid']}"
    gone = lab.api_until(path, lambda r: r["state"] == "Gone", timeout=120)
    return str(gone["gone"]["reason"])


def test_a_restart_and_a_shutdown_read_as_kernel_exit_without_the_note(
    lab_without_patch: JupyterLab,
) -> None:
    lab = lab_without_patch
    kernel_id, record = _connect(lab)
    lab.api(f"/api/kernels/{kernel_id}/restart", "POST", {})
    assert _gone_reason(lab, record) == "closed at kernel exit"

    # the restarted kernel connects again; this time the kernel is shut down (closing its tab)
    kernel_id, record = _connect(lab)
    lab.api(f"/api/kernels/{kernel_id}", "DELETE")
    assert _gone_reason(lab, record) == "closed at kernel exit"
