"""The sidebar's forwards and the pod table at 800 px (issue 36), in JupyterLab (Chromium):

- a session without a forward says "No port forward open" and has no button to open one; once
  ``%trainjob_forward PORT`` runs, its row lists the forward (pod port, local port) with a
  button that opens the link the kernel shows for it (the kernel's local port, not the pod's),
  and the page the pod serves loads; ``--stop`` takes it off again;
- at an 800 px window with the sidebar open, the status panel's pod table does not scroll
  sideways and its pod names are not wrapped a few letters a line.

Screenshots under artifacts/screenshots/."""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.live_panels import (
    live_state,
    open_sidebar,
    run_cell,
    serve_cell,
    wait_state,
    write_notebook,
)
from tests.helpers.polling import wait_until
from tests.helpers.ports import free_port

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def test_the_sidebar_lists_and_opens_the_kernels_forwards(
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    port, text = free_port(), f"pod page {secrets.token_hex(4)}"
    write_notebook(
        root / "fwd.ipynb",
        "%load_ext trainjob_magics",
        "%trainjob_connect torch-distributed",
        serve_cell(port, text),
        f"%trainjob_forward {port}",
        "%trainjob_forward --list",
        f"%trainjob_forward --stop {port}",
    )
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "fwd.ipynb")
    page = nbp.page
    for index in range(3):
        run_cell(nbp, index)
    sidebar = open_sidebar(nbp)
    row = sidebar.locator(".tjm-sidebar-session").first
    row.locator(".tjm-sidebar-no-forward", has_text="No port forward open").wait_for()
    assert row.locator(".tjm-forward").count() == 0

    run_cell(nbp, 3)
    listed = run_cell(nbp, 4).inner_text()
    link = re.search(r"(http://127\.0\.0\.1:(\d+)/)", listed)
    assert link, listed
    url, local_port = link.group(1), int(link.group(2))
    assert local_port != port  # the kernel's own port: the pod's would be the old bug's link
    item = row.locator(f'.tjm-sidebar-forward[data-port="{port}"]')
    item.wait_for(timeout=30_000)
    words = item.inner_text()
    assert f"port {port}" in words and f"local port {local_port}" in words, words
    assert row.locator(".tjm-sidebar-no-forward").count() == 0
    sidebar.screenshot(path=str(screenshot_path("sidebar_forwards", "listed")))
    with page.context.expect_page() as opened:
        item.locator(".tjm-forward", has_text=f"Open port {port}").click()
    tab = opened.value
    tab.wait_for_load_state()
    assert tab.url == url, tab.url
    assert tab.locator("h1").inner_text() == text
    tab.close()

    # stopped: off the list, the line says none is open
    run_cell(nbp, 5)
    row.locator(".tjm-sidebar-no-forward", has_text="No port forward open").wait_for(timeout=30_000)
    assert row.locator(".tjm-forward").count() == 0


_TABLE = """() => [...document.querySelectorAll('.jp-Notebook .tjm-pods-scroll')]
  .filter(el => el.offsetParent !== null)
  .map(el => {
    const name = el.querySelector('tbody td');
    const lh = parseFloat(getComputedStyle(name).lineHeight) || 16;
    return {scroll: el.scrollWidth - el.clientWidth, width: el.clientWidth,
            nameLines: Math.round(name.getBoundingClientRect().height / lh),
            name: name.textContent};
  })"""


def test_the_pod_table_fits_800px_with_the_sidebar_open(
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    write_notebook(
        root / "narrow.ipynb",
        "%load_ext trainjob_magics",
        "%trainjob_connect mpi-interactive --nodes 2",
        "%trainjob_status",
    )
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "narrow.ipynb")
    page = nbp.page
    page.set_viewport_size({"width": 800, "height": 900})
    for index in range(3):
        run_cell(nbp, index)
    wait_state(live_state(nbp, 2), "Running", 10)
    open_sidebar(nbp)
    page.locator(".tjm-sidebar-session").first.wait_for()
    boxes = wait_until(lambda: page.evaluate(_TABLE), timeout=10)
    nbp.screenshot_cell(2, screenshot_path("pod_table", "800px-sidebar-open"))
    for box in boxes:
        assert box["scroll"] <= 0, boxes  # no sideways scroll
        # a pod name (31 characters) on one line, two at most: not a few letters a line
        assert box["nameLines"] <= 2, boxes
