"""Real-browser acceptance: JupyterLab + Chromium (Playwright) run the quickstart notebook."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.helpers.kube import trainjob_names

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _trivial_notebook(path: Path) -> None:
    cells = [
        nbformat.v4.new_markdown_cell("# harness check"),
        nbformat.v4.new_code_cell("print('hello from the kernel')"),
        nbformat.v4.new_code_cell(
            "import ipywidgets as w\n"
            "out = w.Output()\n"
            "display(w.VBox([w.HTML('<b>status</b> widget-ok'), out]))\n"
            "out.append_stdout('appended-line\\n')"
        ),
    ]
    nb = nbformat.v4.new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(path))


def test_harness_runs_a_trivial_notebook(
    tmp_path: Path,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    """JupyterLab opens, Run All runs, ipywidgets render: the harness itself works."""
    root = tmp_path / "root"
    root.mkdir()
    _trivial_notebook(root / "trivial.ipynb")
    lab = jupyterlab_factory(root, {})
    nbp = open_notebook(lab, "trivial.ipynb")
    nbp.run_all()
    nbp.wait_all_ran(timeout=120)
    assert "hello from the kernel" in nbp.output_text(1)
    widget_text = nbp.output_text(2)
    assert "widget-ok" in widget_text
    assert "appended-line" in widget_text
    shot = nbp.screenshot_cell(2, screenshot_path("trivial", "widget"))
    with capsys.disabled():
        print(f"\nscreenshot: {shot}")


def label_index(nb: Any, first_line: str) -> int:
    """Index of the first code cell whose source starts with ``first_line``."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source.startswith(first_line):
            return index
    raise AssertionError(f"no code cell starting with {first_line!r}")


def test_quickstart_runs_in_jupyterlab(
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    """Run All on notebooks/quickstart.ipynb: the status and output widgets render the results."""
    root = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", root)
    nb = nbformat.read(str(root / "quickstart.ipynb"), as_version=4)
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "quickstart.ipynb")
    nbp.run_all()
    shots: list[Path] = []
    try:
        nbp.wait_all_ran(timeout=240)
    finally:
        nbp.page.screenshot(path=str(screenshot_path("quickstart", "page")), full_page=True)
        shots.append(screenshot_path("quickstart", "page"))

    cells = nbp.cells()
    connect = label_index(nb, "%trainjob_connect")
    mpirun = label_index(nb, "%%trainjob\nmpirun hostname")
    multiline = label_index(nb, '%%trainjob\necho "Running on')
    failing = label_index(nb, "%%trainjob --no-raise-error")
    status = label_index(nb, "%trainjob_status")
    # the last comm messages may still be rendering: wait for the footers and the pod table
    for index in (mpirun, multiline, failing):
        cells.nth(index).locator(".tjm-footer").wait_for(timeout=30_000)
    # %trainjob_close froze the status panels: Deleted, the pods as last seen under a fold
    cells.nth(status).locator(".tjm-status-head", has_text="Deleted").wait_for(timeout=30_000)
    cells.nth(status).locator("summary.tjm-pods-summary").click()
    cells.nth(status).locator("table.tjm-pods tbody tr").nth(3).wait_for(timeout=30_000)
    for label, index in [
        ("connect", connect),
        ("mpirun", mpirun),
        ("multiline", multiline),
        ("failing", failing),
        ("status", status),
    ]:
        shots.append(nbp.screenshot_cell(index, screenshot_path("quickstart", label)))
    with capsys.disabled():
        print("\nscreenshots:\n  " + "\n  ".join(str(s) for s in shots))

    page_text = nbp.page.locator(".jp-NotebookPanel").inner_text()
    assert "Error displaying widget" not in page_text
    assert own_cluster.token not in nbp.page.content()

    # the status panel of the connect cell rendered, frozen by %trainjob_close
    assert cells.nth(connect).locator(".trainjob-status").count() == 1
    text = nbp.output_text(connect)
    match = re.search(r"TrainJob ([a-z][a-z0-9-]*)", text)
    assert match, text
    job = match.group(1)
    assert "Deleted" in text and "mpi-interactive" in text, text

    # mpirun hostname: the four pods' hostnames and the exit code footer
    assert cells.nth(mpirun).locator(".trainjob-output").count() == 1
    text = nbp.output_text(mpirun)
    hostnames = {line.strip() for line in text.splitlines() if line.strip().startswith(job)}
    assert hostnames == {
        f"{job}-launcher-0-0",
        f"{job}-node-0-0",
        f"{job}-node-0-1",
        f"{job}-node-0-2",
    }, text
    assert re.search(r"exit code 0\b", text), text

    text = nbp.output_text(multiline)
    assert "step 3 of 3" in text and "a warning on stderr" in text, text
    stderr_span = cells.nth(multiline).locator(".tjm-stderr")
    assert stderr_span.count() >= 1 and "a warning on stderr" in stderr_span.first.inner_text()

    text = nbp.output_text(failing)
    assert re.search(r"exit code 3\b", text), text
    assert "/no/such/file" in text, text
    assert "3" in nbp.output_text(label_index(nb, "failed.returncode"))

    # %trainjob_status: a pod table with every pod Running when it was shown
    assert cells.nth(status).locator(".trainjob-status").count() == 1
    rows = cells.nth(status).locator("table.tjm-pods tbody tr")
    assert rows.count() == 4
    for i in range(4):
        cols = [c.strip() for c in rows.nth(i).locator("td").all_inner_texts()]
        assert cols[0].startswith(f"{job}-"), cols
        assert cols[2] == "Running", cols

    # %trainjob_close deleted the TrainJob
    assert job not in trainjob_names(own_cluster.kubeconfig_path)
