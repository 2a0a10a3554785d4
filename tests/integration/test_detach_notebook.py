"""notebooks/detach.ipynb under nbclient against a local cluster: iterate, detach, restart the
kernel (the run and its TrainJob stay), attach from the new kernel and follow to the end."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.notebook_run import cell_texts, run_notebook

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "detach.ipynb"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from trainjob_magics.localcluster import LocalCluster

    out = tmp_path_factory.mktemp("detach-nb") / "detach.executed.ipynb"
    with LocalCluster() as cluster:
        result = run_notebook(NOTEBOOK, out, kubeconfig=cluster.kubeconfig_path, timeout=180)
        assert result.error is None, (
            f"cell {result.failed_cell} failed: {result.error}\n" + "\n".join(cell_texts(result.nb))
        )
        yield result.nb


def text_of(nb: Any, source: str) -> str:
    texts = cell_texts(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and source in cell.source:
            return texts[index]
    raise AssertionError(f"no code cell with {source!r}")


def test_iterate_then_detach(executed: Any) -> None:
    tried = text_of(executed, "STEPS=2 mpirun")
    assert "rank 0 on detach-demo-launcher-0-0" in tried and "rank 1 on detach-demo-node" in tried
    # the ranks' panel: each rank's row ends with its last line, and each rank's output has it
    assert "2 ranks · 2 ✓ · mpirun ok" in tried, tried
    assert tried.index("rank 0 · detach-demo-launcher") < tried.index("rank 1 · detach-demo-node")
    assert tried.count("training done") == 4, tried
    detached = text_of(executed, "%%trainjob --detach")
    assert detached.strip().startswith("Detached run 1 in TrainJob detach-demo (pod "), detached
    assert "DetachedRun(trainjob='detach-demo'" in text_of(executed, "_trainjob")
    assert "interactive cells still work" in text_of(executed, "tail -n 2")


def test_the_restart_leaves_the_run_and_a_new_kernel_follows_it_to_its_end(executed: Any) -> None:
    attached = text_of(executed, "%trainjob_connect --attach detach-demo")
    # the kernel before did not close the session: it left it running
    assert "stopped without closing its sessions" in attached, attached
    assert re.search(r"Detached run 1 in TrainJob detach-demo: running · started ", attached)
    assert "command: STEPS=12 sh train.sh" in attached and "  step 1/12 loss" in attached
    followed = text_of(executed, "%trainjob_logs --follow")
    steps = [int(n) for n in re.findall(r"^step (\d+)/12 ", followed, re.M)]
    assert steps == list(range(1, 13)), followed  # from the log's start to the run's end
    assert "detached run 1 ended with exit code 0: ending the trainer with it" in followed
    assert "Detached run 1 in TrainJob detach-demo: ended with exit code 0" in followed
    assert "Complete when shown" in text_of(executed, "%trainjob_status")
    assert "Closed session 'detach-demo'" in text_of(executed, "%trainjob_close")
