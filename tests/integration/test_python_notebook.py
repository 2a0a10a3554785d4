"""notebooks/python.ipynb under nbclient against a local cluster: the model is loaded once per
pod and trained across cells; push and pull move values in and out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.notebook_run import cell_texts, run_notebook

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "python.ipynb"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from trainjob_magics.localcluster import LocalCluster

    out = tmp_path_factory.mktemp("python-nb") / "python.executed.ipynb"
    with LocalCluster() as cluster:
        result = run_notebook(NOTEBOOK, out, kubeconfig=cluster.kubeconfig_path, timeout=180)
        assert result.error is None, (
            f"cell {result.failed_cell} failed: {result.error}\n" + "\n".join(cell_texts(result.nb))
        )
        yield result.nb


def index_of(nb: Any, text: str) -> int:
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and text in cell.source:
            return index
    raise AssertionError(f"no code cell with {text!r}")


def test_every_pod_loads_its_shard_once(executed: Any) -> None:
    text = cell_texts(executed)[index_of(executed, "samples loaded")]
    assert re.search(r"rank 0/2: 100 samples loaded", text), text
    assert re.search(r"rank 1/2: 100 samples loaded", text), text


def test_training_goes_on_across_cells(executed: Any) -> None:
    texts = cell_texts(executed)
    first = texts[index_of(executed, "for epoch in range(3)")]
    # 3 epochs on each of 2 pods; pods with identical output are shown once, as a group
    lines = re.findall(r"^(?:\[node-\d\] )?epoch (\d): loss ([\d.]+)$", first, re.M)
    losses = {int(epoch): float(loss) for epoch, loss in lines}
    assert sorted(losses) == [0, 1, 2] and losses[2] < losses[0], first
    assert len(lines) == 6 or "2 pods: identical output" in first, first
    second = texts[index_of(executed, "loss = train(200)")]
    assert second.count("'steps': 350") == 2, second  # 150 steps before, on each pod


def test_rich_value_and_push_pull(executed: Any) -> None:
    rich = executed.cells[index_of(executed, "class Report")]
    html = [o["data"]["text/html"] for o in rich.outputs if "text/html" in o.get("data", {})]
    assert html and "<th>steps</th>" in html[-1] and "<td>350</td>" in html[-1]
    pushed = cell_texts(executed)[index_of(executed, "%trainjob_push schedule")]
    assert "pushed schedule to 2 pods" in pushed
    pulled = executed.cells[index_of(executed, "%trainjob_pull model")]
    value = pulled.outputs[-1]["data"]["text/plain"]
    assert value.count("(3.0, 1.0, 650)") == 2, value
