"""Real-browser acceptance of ``%%trainjob --python``: JupyterLab in Chromium renders a python
cell's streamed output (``\\r`` progress included) and its rich value; screenshot saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.helpers.kube import trainjob_names

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CELLS = [
    "%load_ext trainjob_magics",
    "%trainjob_connect mpi-interactive",
    "%%trainjob --python\n"
    "import sys, time\n"
    "for step in range(1, 4):\n"
    "    print(f'\\rprogress {step}/3', end='', flush=True)\n"
    "    time.sleep(0.2)\n"
    "print()\n"
    "print('loaded the model once', flush=True)\n"
    "print('a warning on stderr', file=sys.stderr)\n"
    "class Table:\n"
    "    def _repr_html_(self):\n"
    "        return '<table class=\"py-rich\"><tr><th>layer</th><th>size</th></tr>'\\\n"
    "               '<tr><td>dense</td><td>128</td></tr></table>'\n"
    "Table()",
    "%trainjob_close",
]


def test_python_cell_streams_and_shows_rich_value(
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in CELLS],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(root / "python_cells.ipynb"))
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "python_cells.ipynb")
    nbp.run_all()
    try:
        nbp.wait_all_ran(timeout=240)
    finally:
        nbp.page.screenshot(path=str(screenshot_path("python_cells", "page")), full_page=True)
    cell = nbp.cells().nth(2)
    cell.locator(".tjm-footer").wait_for(timeout=30_000)
    cell.locator("table.py-rich").wait_for(timeout=30_000)
    shot = nbp.screenshot_cell(2, screenshot_path("python_cells", "python-cell"))
    with capsys.disabled():
        print(f"\nscreenshot: {shot}")

    text = nbp.output_text(2)
    assert "progress 3/3" in text and "progress 1/3progress" not in text, text  # \r renders
    assert "loaded the model once" in text and "a warning on stderr" in text, text
    assert "python" in cell.locator(".tjm-footer").inner_text()
    stderr = cell.locator(".tjm-stderr")
    assert stderr.count() >= 1 and "a warning on stderr" in stderr.first.inner_text()
    rich = cell.locator("table.py-rich td")
    assert rich.all_inner_texts() == ["dense", "128"]
    assert "Error displaying widget" not in nbp.page.locator(".jp-NotebookPanel").inner_text()
    assert own_cluster.token not in nbp.page.content()
    assert trainjob_names(own_cluster.kubeconfig_path, include_deleting=False) == []
