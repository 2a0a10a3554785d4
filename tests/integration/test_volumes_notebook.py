"""notebooks/volumes.ipynb under nbclient against ``trainjob-magics local-cluster``: a file
written to a PersistentVolumeClaim in one session is read in the next, ``/dev/shm`` has the
size asked for, ``%trainjob_status`` names the volumes, and ``--dry-run`` prints the TrainJob
with the claim and creates nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.notebook_run import cell_texts, run_notebook
from tests.helpers.cli_cluster import start_cli_cluster, stop_cli_cluster
from tests.helpers.kube import trainjob_names
from tests.helpers.notebooks import index_of

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "volumes.ipynb"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[str]]]:
    tmp = tmp_path_factory.mktemp("volumes")
    proc = start_cli_cluster(tmp)
    try:
        result = run_notebook(
            NOTEBOOK, tmp / "volumes.executed.ipynb", kubeconfig=tmp / "kubeconfig", timeout=180
        )
        names = trainjob_names(tmp / "kubeconfig", include_deleting=False)
    finally:
        stop_cli_cluster(proc)
    texts = cell_texts(result.nb)
    assert result.error is None, f"cell {result.failed_cell} failed: {result.error}\n" + "\n".join(
        texts
    )
    yield result.nb, names


def test_a_file_written_in_one_session_is_read_in_the_next(executed: Any) -> None:
    nb, _names = executed
    texts = cell_texts(nb)
    written = texts[index_of(nb, '%%trainjob\necho "written by')]
    found = re.search(r"^written by \S+ at \d\d:\d\d:\d\d$", written, re.M)
    assert found, written
    read = texts[index_of(nb, "%%trainjob\ncat /data/hello.txt")]
    assert found[0] in read, read  # the same line, from another TrainJob's pod
    shm = next(line for line in written.splitlines() if line.rstrip().endswith("/dev/shm"))
    assert shm.split()[1] == "256M", shm


def test_status_names_the_volumes(executed: Any) -> None:
    nb, _names = executed
    status = cell_texts(nb)[index_of(nb, "%trainjob_status writer")]
    assert "pvc notebook-scratch -> /data" in status and "shm 256Mi -> /dev/shm" in status


def test_dry_run_prints_the_trainjob_and_leaves_nothing(executed: Any) -> None:
    nb, names = executed
    text = cell_texts(nb)[len(nb.cells) - 1]  # the last cell: the --dry-run
    manifest = yaml.safe_load(text)
    assert manifest["kind"] == "TrainJob"
    assert "notebook-scratch" in yaml.safe_dump(manifest["spec"])
    assert manifest["metadata"]["name"] not in names  # the dry run created nothing
    assert names == []  # both sessions closed: their TrainJobs are gone
