"""The ranks' panel of an ``mpirun`` cell in JupyterLab and Notebook 7 (issue 35): its head counts
the ranks apart from the launcher, one row per rank ends with that rank's last line (here its
hostname), and no row or line says "pods" for ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.live_panels import run_cell, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
NOTEBOOK = "ranks.ipynb"


@pytest.mark.parametrize("frontend", ["lab", "notebook7"])
def test_the_ranks_panel_reads_by_rank(
    frontend: str,
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    write_notebook(
        root / NOTEBOOK,
        "%load_ext trainjob_magics",
        "%trainjob_connect mpi-interactive --nodes 3",
        "%%trainjob\nmpirun hostname",
    )
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, NOTEBOOK, frontend)
    run_cell(nbp, 0)
    run_cell(nbp, 1)
    cell = run_cell(nbp, 2)
    counts = cell.locator(".tjm-pod-summary .tjm-pod-counts")
    counts.first.wait_for(timeout=60_000)
    assert counts.first.inner_text().startswith("3 ranks · 3 ✓"), counts.first.inner_text()
    names = cell.locator(".tjm-pod-summary .tjm-pod-name").all_inner_texts()
    lasts = cell.locator(".tjm-pod-summary .tjm-pod-last").all_inner_texts()
    rows = dict(zip(names, lasts, strict=True))
    ranks = {n: last for n, last in rows.items() if n.startswith("rank ")}
    assert sorted(n.split(" · ")[0] for n in ranks) == ["rank 0", "rank 1", "rank 2"], rows
    # each rank's hostname is the pod's (the pod name is the hostname and a suffix)
    assert all(n.split(" · ")[1].startswith(last) and last for n, last in ranks.items()), rows
    assert len(set(ranks.values())) == 3, rows
    nbp.screenshot_cell(2, screenshot_path(f"ranks-{frontend}", "done"))
