"""Live panels keyed by TrainJob name and uid, cell panels, and a saved notebook closed and
opened again (issue 29), in JupyterLab (Light and Dark) and Notebook 7.

One notebook connects as NAME, runs a cell, closes, connects again as NAME (a new TrainJob
of the same name, another uid) and runs a cell: the first job's panels say it was closed,
the second job's say Running, though both name NAME. Saved, its tab closed, the second job
deleted with kubectl while no page shows it, reopened: every panel reads the job's real state
again (the kernel's drawing, still "Running", is dimmed), within 2 s; the cells' output stays
as it ran. Screenshots under artifacts/screenshots/."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import NotebookPage
from tests.helpers.kube import get_trainjob
from tests.helpers.live_panels import (
    STATIC,
    kubectl_delete,
    live_state,
    menu,
    wait_state,
    write_notebook,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(360)]

LOAD, CONNECT1, CELL1, CLOSE1, CONNECT2, CELL2, STATUS2 = range(7)
NOTEBOOK = "reopen.ipynb"


def _close_and_reopen(nbp: NotebookPage, during: Any) -> tuple[NotebookPage, float]:
    """Close the notebook's tab, call ``during()``, open the notebook again as a user does;
    the page showing it and when (``time.monotonic()``) it was asked to open."""
    page = nbp.page
    if nbp.frontend == "notebook7":  # one browser tab per notebook: close it, open another
        context = page.context
        page.close()
        during()
        page = context.new_page()
        page.set_default_timeout(60_000)
        started = time.monotonic()
        reopened = NotebookPage(nbp.lab, page, nbp.notebook, "notebook7").open()
        return reopened, started
    menu(page, "File", "Close Tab")
    page.locator(".jp-NotebookPanel").wait_for(state="detached")
    during()
    item = page.locator(".jp-DirListing-item", has_text=nbp.notebook)
    if not item.is_visible():  # the file browser is folded away: open it
        page.locator('.lm-TabBar-tab[data-id="filebrowser"]').click()
    started = time.monotonic()
    item.dblclick()
    page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for()
    return nbp, started


@pytest.mark.parametrize(
    ("frontend", "theme"),
    [("lab", "JupyterLab Light"), ("lab", "JupyterLab Dark"), ("notebook7", "")],
)
def test_old_panels_keep_their_job_and_a_reopened_notebook_is_live(
    frontend: str,
    theme: str,
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    name = f"tjmsame{secrets.token_hex(3)}"
    write_notebook(
        root / NOTEBOOK,
        "%load_ext trainjob_magics",
        f"%trainjob_connect torch-distributed --name {name}",
        "%%trainjob\necho first job",
        f"%trainjob_close {name}",
        f"%trainjob_connect torch-distributed --name {name}",
        "%%trainjob\necho second job",
        "%trainjob_status",
    )
    kubeconfig = own_cluster.kubeconfig_path
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(kubeconfig)})
    if theme:
        lab.set_theme(theme)
    nbp = open_notebook(lab, NOTEBOOK, frontend)
    nbp.run_all()
    nbp.wait_all_ran(timeout=240)
    tag = f"{frontend}-{theme.split()[-1].lower() if theme else 'default'}"

    # the same name, two TrainJobs: each panel shows its own
    closed = "Gone: closed by %trainjob_close"
    for index in (CONNECT1, CELL1):
        wait_state(live_state(nbp, index), "Gone", 5)
        assert closed in live_state(nbp, index).inner_text()
    for index in (CONNECT2, CELL2, STATUS2):
        wait_state(live_state(nbp, index), "Running", 5)
    assert live_state(nbp, CELL1).inner_text().startswith(f"ran in TrainJob {name} · now Gone")
    assert (
        live_state(nbp, CELL2).inner_text()
        == f"ran in TrainJob {name} · now Running · 1/1 pods ready"
    )
    # a cell's output stays as it ran, undimmed, beside the static HTML the kernel froze
    cell1 = nbp.cells().nth(CELL1)
    assert "first job" in cell1.locator(STATIC).inner_text()
    assert "exit code 0" in cell1.locator(STATIC).inner_text()
    assert cell1.locator(".tjm-stale").count() == 0
    assert nbp.cells().nth(CONNECT1).locator(f"{STATIC}.tjm-stale").count() == 1
    shots = [nbp.screenshot_cell(CELL2, screenshot_path("reopen", f"{tag}-second-job"))]
    shots.append(nbp.screenshot_cell(CELL1, screenshot_path("reopen", f"{tag}-first-job-closed")))

    # saved; while its tab is closed the second job is deleted behind the kernel's back
    nbp.save()
    assert get_trainjob(kubeconfig, name) is not None
    nbp, asked = _close_and_reopen(nbp, lambda: kubectl_delete(kubeconfig, name))
    shown = time.monotonic()
    for index in (CONNECT2, CELL2, STATUS2):  # within 2 s of the cells showing
        wait_state(live_state(nbp, index), "Gone", max(0.1, 2.0 - (time.monotonic() - shown)))
    took, took_total = time.monotonic() - shown, time.monotonic() - asked
    for index in (CONNECT2, CELL2, STATUS2):
        text = live_state(nbp, index).inner_text()
        assert "deleted outside trainjob-magics (e.g. kubectl delete)" in text, text
    for index in (CONNECT1, CELL1):  # the first job's panels still say theirs
        assert closed in live_state(nbp, index).inner_text()
    # what the kernel last drew (Running) is dimmed; the cells' output is not
    connect2 = nbp.cells().nth(CONNECT2)
    assert "Running" in connect2.locator(f"{STATIC}.tjm-stale").inner_text()
    assert "second job" in nbp.cells().nth(CELL2).locator(STATIC).inner_text()
    assert nbp.cells().nth(CELL2).locator(".tjm-stale").count() == 0
    shots.append(nbp.screenshot_cell(CONNECT2, screenshot_path("reopen", f"{tag}-reopened")))
    shots.append(nbp.screenshot_cell(CELL2, screenshot_path("reopen", f"{tag}-reopened-cell")))
    with capsys.disabled():
        print(
            f"\n{tag}: reopened panels said Gone {took_total:.2f} s after the open was asked "
            f"({took:.2f} s after the cells showed)\n  " + "\n  ".join(str(s) for s in shots)
        )
