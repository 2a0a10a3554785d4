"""notebooks/kueue.ipynb under nbclient against a local cluster with Kueue switched on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devtools.notebook_run import (
    cell_texts,
    run_notebook,
)
from tests.helpers.notebooks import widget_texts_of_cell
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics.views.live import PANEL_MIME

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "kueue.ipynb"

pytestmark = pytest.mark.timeout(300)


def _cell(nb: Any, needle: str) -> int:
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and needle in cell.source:
            return index
    raise AssertionError(f"no code cell containing {needle!r}")


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("kueue-nb")
    # a node that holds the ClusterQueue's quota (4 CPUs, 16Gi), whatever the machine
    with LocalCluster(root_dir=root / "cluster", kueue=True) as cluster:
        result = run_notebook(
            NOTEBOOK, root / "kueue.executed.ipynb", kubeconfig=cluster.kubeconfig_path, timeout=240
        )
    assert result.error is None, f"cell {result.failed_cell}: {result.error}\n" + "\n".join(
        cell_texts(result.nb)
    )
    return result.nb


def test_first_session_is_admitted(executed: Any) -> None:
    # the connect panel, frozen by %trainjob_close first: Deleted, with its Kueue line and limit
    text = cell_texts(executed)[_cell(executed, "%trainjob_connect")]
    assert "Deleted" in text and "max runtime 2h00m" in text
    assert "Kueue: Admitted by ClusterQueue cluster-queue" in text


def test_second_session_shows_position_and_message(executed: Any) -> None:
    text = "\n".join(widget_texts_of_cell(executed, _cell(executed, "_ = StatusWidget(queued)")))
    assert "Queued" in text
    # what is missing first, then the position, each queue named once
    assert (
        "Kueue: queued, 4 more cpu needed (flavor default-flavor) · position 1 in LocalQueue "
        "user-queue (1 in ClusterQueue cluster-queue)"
    ) in text


def test_second_session_admitted_after_close(executed: Any) -> None:
    index = _cell(executed, "live = StatusWidget()")
    live = "\n".join(widget_texts_of_cell(executed, index))
    assert "Running" in live and "Admitted by ClusterQueue cluster-queue" in live
    # kept current from a background thread through its display id: no widget model (the
    # panel MIME type is the lab extension's live view of the same job)
    for output in executed.cells[index].outputs:
        assert set(output.get("data", {})) == {"text/html", "text/plain", PANEL_MIME}, output
    final = _cell(executed, "session2 = second.result")
    text = "\n".join(widget_texts_of_cell(executed, final) + cell_texts(executed))
    assert "Admitted by ClusterQueue cluster-queue" in text
    assert "second session on" in text


def test_notebook_in_git_has_no_outputs() -> None:
    import nbformat

    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
