"""Many pods in JupyterLab + Chromium, in a 900-px-wide window: ``--pod all`` on 32 pods with
one failing pod shows the failure without a click (live and frozen), identical output is
grouped, the status table folds under one line, and closing the session freezes the panels."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.browser.conftest import NotebookPage
from tests.helpers.kube import trainjob_names
from tests.helpers.polling import wait_until
from trainjob_magics.localcluster import LocalCluster

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

PODS = 32
FAILING = 7

# The failing pod exits at once; the others print, then wait until the test has looked at the
# live view (it creates GO; the local cluster's pods are processes of this machine).
CELL = """%%trainjob --pod all --no-raise-error
echo "loading data"
case "$HOSTNAME" in
  *-node-0-{failing}) echo "RuntimeError: NCCL timeout on rank {failing}" >&2; exit 3;;
esac
while [ ! -e {go} ]; do sleep 0.2; done
echo "epoch 1 loss 0.25"
"""


def _notebook(path: Path, go: Path) -> None:
    sources = [
        "%load_ext trainjob_magics",
        f"%trainjob_connect torch-distributed --nodes {PODS} --timeout 300",
        "%trainjob_status",
        CELL.format(failing=FAILING, go=go),
        "%trainjob_close",
    ]
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in sources],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(path))


@pytest.fixture
def big_cluster(tmp_path: Path) -> Any:
    """A cluster whose node holds 32 pods whatever the machine (pods are idle processes)."""
    with LocalCluster(root_dir=tmp_path / "cluster") as cluster:
        yield cluster


# Whether an element's content is wider than the element (a horizontal scroll bar) or
# reaches past the window's right edge.
_OVERFLOW = """el => {
  const r = el.getBoundingClientRect();
  return {scroll: el.scrollWidth - el.clientWidth, right: r.right, width: window.innerWidth};
}"""


_SELECTED_FAILED = """() => {
  const s = document.querySelector('.trainjob-multipod-output select');
  return !!s && s.value.startsWith('✗ node-7');  // the option text has &nbsp; for spaces
}"""


class Notebook7Page(NotebookPage):
    """The same notebook in Notebook 7 (its /notebooks page; the cells are JupyterLab's)."""

    def open(self) -> NotebookPage:
        self.page.goto(f"{self.lab.url}/notebooks/{self.notebook}?token={self.lab.token}")
        self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for()
        self.lab.wait_kernel_ready(self.notebook)
        return self


def _fits(locator: Any) -> None:
    box = locator.evaluate(_OVERFLOW)
    assert box["scroll"] <= 1 and box["right"] <= box["width"], box


@pytest.mark.parametrize("front_end", ["jupyterlab", "notebook7"])
def test_32_pods_one_failing_in_a_900px_window(
    front_end: str,
    tmp_path: Path,
    big_cluster: LocalCluster,
    jupyterlab_factory: Any,
    open_notebook: Any,
    browser_page: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    def shot(label: str) -> Path:
        return screenshot_path(f"many_pods-{front_end}", label)

    root = tmp_path / "root"
    root.mkdir()
    go = tmp_path / "go"
    _notebook(root / "many.ipynb", go)
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(big_cluster.kubeconfig_path)})
    page = None
    shots: list[Path] = []
    try:
        if front_end == "notebook7":
            nbp = Notebook7Page(lab, browser_page, "many.ipynb").open()
        else:
            nbp = open_notebook(lab, "many.ipynb")
        page = nbp.page
        page.set_viewport_size({"width": 900, "height": 1000})
        cells = nbp.cells()
        nbp.run_all()

        # live: while 31 pods still run, the failed one is selected and shown, no click
        pods_cell = cells.nth(3)
        live = pods_cell.locator(".trainjob-multipod-output")
        live.locator(".tjm-pod-failed").first.wait_for(timeout=300_000)
        page.wait_for_function(_SELECTED_FAILED, timeout=30_000)
        live.get_by_text("RuntimeError: NCCL timeout on rank 7").first.wait_for()
        rows = live.locator(".tjm-pod-row")
        assert "node-7" in rows.first.inner_text() and "exit 3" in rows.first.inner_text()
        assert f"{PODS} pods · 1 ✗ · {PODS - 1} running" in live.inner_text()
        # the 31 running pods printed the same so far: one row
        page.wait_for_function(
            "() => document.querySelectorAll('.trainjob-multipod-output .tjm-pod-row').length == 2"
        )
        assert f"{PODS - 1} pods: identical output" in rows.nth(1).inner_text()
        shots.append(nbp.screenshot_cell(3, shot("live-failed-pod")))

        # the status panels fold 32 pods under one line, compact; static HTML while live
        status = cells.nth(2).locator(".trainjob-status")
        for index in (1, 2):
            assert cells.nth(index).locator(".jupyter-widgets").count() == 0, index
        fold = status.locator("summary.tjm-pods-summary")
        assert fold.inner_text().startswith(f"{PODS} pods: {PODS} Running")
        assert status.locator("table.tjm-pods").is_visible() is False
        folded_height = status.bounding_box()["height"]
        assert folded_height < 200
        shots.append(nbp.screenshot_cell(2, shot("status-folded")))
        fold.click()  # the table on demand
        status.locator("table.tjm-pods tbody tr").nth(PODS - 1).wait_for()
        open_height = status.bounding_box()["height"]
        # a narrow output area (the file browser open beside it) wraps the long columns
        # instead of scrolling sideways (issue 29): at most three lines a row, no sideways scroll
        assert open_height < PODS * 3 * 18 + 200, open_height
        wide = status.locator("table.tjm-pods").evaluate(
            "t => [t.parentElement.scrollWidth, t.parentElement.clientWidth]"
        )
        assert wide[0] <= wide[1] + 1, wide
        with capsys.disabled():
            print(
                f"\nstatus panel, {PODS} pods: {folded_height:.0f} px folded, "
                f"{open_height:.0f} px open"
            )
        shots.append(nbp.screenshot_cell(2, shot("status-table-open")))

        go.touch()
        nbp.wait_all_ran(timeout=300)
    finally:
        if page is not None:
            page.screenshot(path=str(shot("page")), full_page=True)
            shots.append(shot("page"))
        with capsys.disabled():
            print("\nscreenshots:\n  " + "\n  ".join(str(s) for s in shots))

    # frozen: static HTML, the failed pod first, marked and open; the other 31 grouped
    out = pods_cell.locator(".jp-Cell-outputArea")
    assert out.locator(".jupyter-widgets").count() == 0  # no widget left to lose
    summary = out.locator(".tjm-pod-summary")
    rows = summary.locator(".tjm-pod-row")
    assert rows.count() == 2
    assert "tjm-pod-failed" in (rows.nth(0).get_attribute("class") or "")
    failed_text = rows.nth(0).inner_text()
    assert "node-7" in failed_text and "exit 3" in failed_text and "NCCL timeout" in failed_text
    assert f"{PODS - 1} pods: identical output" in rows.nth(1).inner_text()
    opened = out.locator("details[open]")
    assert opened.count() >= 1
    assert opened.first.get_by_text("RuntimeError: NCCL timeout on rank 7").is_visible()
    assert f"1 of {PODS} pods failed" in out.inner_text()
    assert out.inner_text().count("pods failed") == 1  # said once
    _fits(summary)
    _fits(out)
    shots.append(nbp.screenshot_cell(3, shot("frozen-summary")))

    # %trainjob_close froze the connect and status panels: Deleted, nothing says Running
    for index in (1, 2):
        area = cells.nth(index).locator(".jp-Cell-outputArea")
        assert area.locator(".jupyter-widgets").count() == 0
        head = area.locator(".tjm-status-head").inner_text()
        assert "Deleted" in head and "Running" not in head, head
        assert area.locator("details.tjm-pods-fold[open]").count() == 0
    shots.append(nbp.screenshot_cell(1, shot("connect-deleted")))
    assert "Error displaying widget" not in page.locator(".jp-NotebookPanel").inner_text()
    with capsys.disabled():
        print("  " + "\n  ".join(str(s) for s in shots[-2:]))


def test_kernel_restart_leaves_the_panel_saying_closed_at_kernel_exit(
    tmp_path: Path,
    big_cluster: LocalCluster,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
) -> None:
    """Kernel > Restart: the hooks close the session, and the connect panel in the page turns
    into static HTML saying so; nothing says Running any more."""
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("%load_ext trainjob_magics"),
            nbformat.v4.new_code_cell("%trainjob_connect torch-distributed --nodes 2"),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(root / "restart.ipynb"))
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(big_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "restart.ipynb")
    nbp.run_all()
    nbp.wait_all_ran(timeout=180)
    area = nbp.cells().nth(1).locator(".jp-Cell-outputArea")
    assert "Running" in area.locator(".tjm-status-head").inner_text()
    assert area.locator(".jupyter-widgets").count() == 0  # static while live, too
    kernel = nbp.lab.wait_kernel_ready("restart.ipynb")
    nbp.lab.api(f"/api/kernels/{kernel['id']}/restart", method="POST")
    area.locator(".tjm-status-head", has_text="Closed at kernel exit").wait_for(timeout=60_000)
    assert area.locator(".jupyter-widgets").count() == 0
    head = area.locator(".tjm-status-head").inner_text()
    assert "Running" not in head and "deleted" in area.inner_text(), head
    nbp.screenshot_cell(1, screenshot_path("many_pods", "closed-at-kernel-exit"))


def test_a_restart_from_the_menu_leaves_no_panel_saying_running(
    tmp_path: Path,
    big_cluster: LocalCluster,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    """Kernel > Restart Kernel… from JupyterLab's menu: the page drops what the old kernel
    sends once the restart begins, so its closing updates never reach the panels. When the
    extension loads in the new kernel, the connect and status panels of the old one say
    "Closed at kernel exit" (and still do in the saved notebook, reopened)."""
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("%load_ext trainjob_magics"),
            nbformat.v4.new_code_cell("%trainjob_connect torch-distributed --nodes 2"),
            nbformat.v4.new_code_cell("%trainjob_status"),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(root / "menu_restart.ipynb"))
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(big_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "menu_restart.ipynb")
    nbp.run_all()
    nbp.wait_all_ran(timeout=180)
    cells = nbp.cells()
    heads = [cells.nth(i).locator(".tjm-status-head") for i in (1, 2)]
    for head in heads:
        assert "Running" in head.inner_text(), head.inner_text()
    assert trainjob_names(big_cluster.kubeconfig_path, include_deleting=False)

    page = nbp.page
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Kernel$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Restart Kernel…$")).click()
    page.locator(".jp-Dialog-button.jp-mod-accept", has_text="Restart").click()
    # the old kernel's shutdown hook deleted the TrainJob; the new kernel is up
    wait_until(
        lambda: not trainjob_names(big_cluster.kubeconfig_path, include_deleting=False),
        timeout=60,
    )
    lab.wait_kernel_ready("menu_restart.ipynb")
    page.wait_for_timeout(1500)
    before = [head.inner_text() for head in heads]
    shots = [nbp.screenshot_cell(1, screenshot_path("menu_restart", "connect-after-restart"))]

    # the user loads the extension again: the old kernel's panels say how it ended
    cells.nth(0).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    cells.nth(0).locator(".trainjob-kernel-note").wait_for(timeout=60_000)
    for index, head in zip((1, 2), heads, strict=True):
        text = head.inner_text()
        assert "Closed at kernel exit" in text and "Running" not in text, (index, text)
        assert (
            "its sessions were closed" in cells.nth(index).locator(".trainjob-status").inner_text()
        )
    shots.append(nbp.screenshot_cell(1, screenshot_path("menu_restart", "connect-marked")))
    shots.append(nbp.screenshot_cell(2, screenshot_path("menu_restart", "status-marked")))
    shots.append(nbp.screenshot_cell(0, screenshot_path("menu_restart", "load-note")))

    # saved and reopened (trusted): still said
    nbp.save()
    nbp = open_notebook(lab, "menu_restart.ipynb")
    head = nbp.cells().nth(1).locator(".tjm-status-head")
    assert "Closed at kernel exit" in head.inner_text() and "Running" not in head.inner_text()
    with capsys.disabled():
        print(f"\nheadlines right after the menu restart (before the extension loaded): {before}")
        print("screenshots:\n  " + "\n  ".join(str(s) for s in shots))
