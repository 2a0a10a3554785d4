"""notebooks/multinode.ipynb under nbclient (widget state stored) against a local cluster."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.notebook_run import WIDGET_VIEW_MIME, cell_texts, run_notebook

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "multinode.ipynb"
LABELS = ["launcher-0", "node-0", "node-1", "node-2"]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from trainjob_magics.localcluster import LocalCluster

    out = tmp_path_factory.mktemp("multinode") / "multinode.executed.ipynb"
    with LocalCluster() as cluster:
        result = run_notebook(NOTEBOOK, out, kubeconfig=cluster.kubeconfig_path, timeout=180)
        assert result.error is None, (
            f"cell {result.failed_cell} failed: {result.error}\n" + "\n".join(cell_texts(result.nb))
        )
        yield result.nb


def cell_index(nb: Any, first_line: str) -> int:
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source.startswith(first_line):
            return index
    raise AssertionError(f"no code cell starting with {first_line!r}")


def widget_models(nb: Any, index: int) -> list[str]:
    """Model ids of the widget views a cell displayed."""
    ids = []
    for output in nb.cells[index].get("outputs", []):
        view = (output.get("data") or {}).get(WIDGET_VIEW_MIME)
        if view:
            ids.append(view["model_id"])
    return ids


def test_pod_all_cell_is_a_static_per_pod_summary_with_every_pods_output(executed: Any) -> None:
    """The finished --pod all cell is frozen into HTML + text (no widget view left): the
    per-pod summary first (4 identical pods grouped), then the output, then the summary."""
    nb = executed
    index = cell_index(nb, "%%trainjob --pod all")
    assert widget_models(nb, index) == [], "the finished cell still shows a widget view"
    (output,) = [o for o in nb.cells[index]["outputs"] if "text/html" in o.get("data", {})]
    page, text = output["data"]["text/html"], output["data"]["text/plain"]
    # the cell's summary heads the rows, once, in the footers' number format
    assert re.fullmatch(r"4 pods ok · \d+\.\d\d s", text.splitlines()[0]), text
    assert page.count("4 pods ok") == 1 and text.count("4 pods ok") == 1
    assert text.count(f"4 pods: identical output ({', '.join(LABELS)}) · exit 0 · ") == 1
    # identical output is kept once, under a fold that does not repeat the row
    assert text.count("\nPackage") == 1 and "] Package" not in text  # pip list header
    assert re.search(r"<summary[^>]*>output</summary>", page)
    assert "tjm-pod-summary" in page and "Package" in page and "exit code 0" not in page
    assert page.index("tjm-pod-summary") < page.index("<details")


def test_mpirun_cell_prints_one_line_per_rank(executed: Any) -> None:
    nb = executed
    index = cell_index(nb, "%%trainjob\nmpirun python3 train.py")
    text = cell_texts(nb)[index]
    ranks = sorted(re.findall(r"^rank (\d)/4 on \S+: 25 numbers", text, re.M))
    assert ranks == ["0", "1", "2", "3"], text


def test_upload_download_and_logs(executed: Any) -> None:
    nb = executed
    texts = cell_texts(nb)
    assert "Wrote" in texts[cell_index(nb, "%%trainjob_writefile train.py --pod all")]
    upload = texts[cell_index(nb, "%trainjob_upload")]
    assert "copied" in upload and "2 files" in upload and "on 4 pods" in upload
    assert "verified by sha256" in upload
    summary = nb.cells[cell_index(nb, "import json")]["outputs"][0]["data"]["text/plain"]
    assert json.loads(summary.replace("'", '"')) == {"ranks": 4, "rank0_sum": 1225, "total": 5050}
    logs = texts[cell_index(nb, "%trainjob_logs")]
    # the three node pods logged the same lines: shown once, as a group
    assert "3 pods: identical output (node-0, node-1, node-2)" in logs
    assert logs.count("Server listening on 0.0.0.0 port 2222.") == 1
    assert "Closed session" in texts[cell_index(nb, "%trainjob_close")]
