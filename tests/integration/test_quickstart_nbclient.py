"""notebooks/quickstart.ipynb under nbclient (widget state stored) against the local cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.notebook_run import (
    WIDGET_VIEW_MIME,
    cell_texts,
    extract_widget_texts,
    run_notebook,
)
from tests.helpers.kube import trainjob_names
from tests.helpers.notebooks import html_of_cell, widget_texts_of_cell

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
RUNNER = [sys.executable, str(Path(__file__).resolve().parents[2] / "devtools" / "notebook_run.py")]

pytestmark = pytest.mark.timeout(300)


def _cell_index(nb: Any, first_line: str, after: int = -1) -> int:
    """Index of the first code cell after ``after`` whose source starts with ``first_line``."""
    for index, cell in enumerate(nb.cells):
        if index > after and cell.cell_type == "code" and cell.source.startswith(first_line):
            return index
    raise AssertionError(f"no code cell starting with {first_line!r}")


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory, local_cluster: Any) -> tuple[Any, Path, Any]:
    """Run the quickstart once against the local cluster; (notebook, saved path, cluster)."""
    local_cluster.faults.clear()
    out = tmp_path_factory.mktemp("quickstart") / "quickstart.executed.ipynb"
    result = run_notebook(QUICKSTART, out, kubeconfig=local_cluster.kubeconfig_path, timeout=180)
    assert result.error is None, f"cell {result.failed_cell} failed: {result.error}\n" + "\n".join(
        cell_texts(result.nb)
    )
    return result.nb, out, local_cluster


@pytest.fixture(scope="module")
def job_name(executed: tuple[Any, Path, Any]) -> str:
    """The TrainJob name, as the connect cell's status panel shows it (frozen at the close)."""
    nb, _, _ = executed
    connect = _cell_index(nb, "%trainjob_connect")
    text = cell_texts(nb)[connect]
    match = re.search(r"TrainJob ([a-z][a-z0-9-]*)", text)
    assert match, f"no TrainJob name in the connect panel: {text!r}"
    return match.group(1)


def test_connect_panel_ends_frozen_saying_the_trainjob_was_deleted(
    executed: tuple[Any, Path, Any], job_name: str
) -> None:
    """The connect cell's panel is static output kept current (no widget view at any time);
    after %trainjob_close it shows "Deleted", the pods only as last seen."""
    nb, _, _ = executed
    index = _cell_index(nb, "%trainjob_connect")
    outputs = nb.cells[index]["outputs"]
    assert not [o for o in outputs if WIDGET_VIEW_MIME in o.get("data", {})]
    text = cell_texts(nb)[index]
    assert "mpi-interactive" in text and "namespace default" in text
    head = text.split("as last seen")[0]
    assert "Deleted" in head and "Running" not in head, text
    assert f"TrainJob {job_name} ·" in head
    # the pods ran: the panel keeps its history beside the final state
    assert re.search(r"Ready after [\d.]+ s · deleted by %trainjob_close [\d.]+ s later", head)
    streams = [o for o in outputs if o.get("output_type") == "stream"]
    assert not streams, streams  # the panel says it all: no long print under it


def test_every_saved_output_needs_no_widget_model(executed: tuple[Any, Path, Any]) -> None:
    """Each cell's result is static once it ran (the status panels from the start): the
    notebook reads the same with its widget state dropped."""
    nb, _, _ = executed
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            assert WIDGET_VIEW_MIME not in output.get("data", {}), (index, cell.source)


def test_mpirun_hostname_shows_four_hostnames(
    executed: tuple[Any, Path, Any], job_name: str
) -> None:
    nb, _, _ = executed
    index = _cell_index(nb, "%%trainjob\nmpirun hostname")
    widgets = widget_texts_of_cell(nb, index)
    assert widgets, "the mpirun cell shows no widget"
    text = "\n".join(widgets)
    expected = {
        f"{job_name}-launcher-0-0",
        f"{job_name}-node-0-0",
        f"{job_name}-node-0-1",
        f"{job_name}-node-0-2",
    }
    # the ranks' panel: each rank's line under its rank and pod, and a row per rank
    lines = [m.groups() for m in re.finditer(r"^\[rank (\d) · (\S+)\] (\S+)$", text, re.M)]
    assert {host for _rank, _pod, host in lines} == expected, text
    assert sorted(rank for rank, _pod, _host in lines) == ["0", "1", "2", "3"], text
    assert all(pod.startswith(host) for _rank, pod, host in lines), text
    assert "4 ranks · 4 ✓ · mpirun ok" in text, text
    assert re.search(r"exit code 0\b", text), text


def test_multiline_cell_streams_stdout_and_stderr(executed: tuple[Any, Path, Any]) -> None:
    nb, _, _ = executed
    index = _cell_index(nb, '%%trainjob\necho "Running on')
    text = "\n".join(widget_texts_of_cell(nb, index))
    steps = [text.find(f"step {n} of 3") for n in (1, 2, 3)]
    assert all(pos >= 0 for pos in steps) and steps == sorted(steps), text
    assert "a warning on stderr" in text
    assert re.search(r"exit code 0\b", text), text
    # stderr is styled apart: the frozen HTML wraps it in its own span
    assert re.search(r'class="tjm-stderr"[^>]*>a warning on stderr', html_of_cell(nb, index))


def test_failing_command_shows_its_exit_code(executed: tuple[Any, Path, Any]) -> None:
    nb, _, _ = executed
    index = _cell_index(nb, "%%trainjob --no-raise-error")
    cell = nb.cells[index]
    assert not [o for o in cell.outputs if o.output_type == "error"]
    text = "\n".join(widget_texts_of_cell(nb, index))
    assert "looking for a file that is not there" in text
    assert "/no/such/file" in text  # ls's message on stderr
    assert re.search(r"exit code 3\b", text), text
    after = nb.cells[_cell_index(nb, "failed.returncode")]
    assert after.outputs[0]["data"]["text/plain"] == "3"


def test_status_shows_every_pod_running(executed: tuple[Any, Path, Any], job_name: str) -> None:
    nb, _, _ = executed
    text = cell_texts(nb)[_cell_index(nb, "%trainjob_status")]  # frozen at the close
    assert f"TrainJob {job_name}" in text and "4 pods as last seen" in text
    rows = [line for line in text.splitlines() if line.startswith(f"{job_name}-")]
    roles = sorted(row.split()[0].removeprefix(f"{job_name}-").split("-")[0] for row in rows)
    assert roles == ["launcher", "node", "node", "node"], text
    for row in rows:
        assert " Running " in f" {row} ", row
    header = next(line for line in text.splitlines() if line.startswith("Name"))
    assert "Phase" in header and "Role" in header


def test_close_deletes_the_trainjob(executed: tuple[Any, Path, Any], job_name: str) -> None:
    nb, _, cluster = executed
    close = nb.cells[_cell_index(nb, "%trainjob_close")]
    assert not [o for o in close.outputs if o.output_type == "error"]
    assert job_name in "\n".join(cell_texts(nb))
    assert job_name not in trainjob_names(cluster.kubeconfig_path)


def test_token_not_in_saved_notebook(executed: tuple[Any, Path, Any]) -> None:
    _, path, cluster = executed
    saved = path.read_text()
    assert cluster.token and cluster.token not in saved
    assert "Bearer" not in saved


def test_notebook_in_git_has_no_outputs() -> None:
    import nbformat

    nb = nbformat.read(str(QUICKSTART), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert "widgets" not in nb.metadata


def test_quickstart_command_prints_each_cell(tmp_path: Path) -> None:
    """The README quick-start runner: own local cluster, exit 0, every cell's output printed."""
    out = tmp_path / "qs.ipynb"
    proc = subprocess.run(
        [*RUNNER, str(QUICKSTART), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stdout = proc.stdout
    assert out.is_file()
    assert ">>> mpirun hostname" in stdout
    assert len(re.findall(r"^\S+-(?:launcher|node)-0-\d$", stdout, re.M)) >= 4, stdout
    assert re.search(r"exit code 3\b", stdout), stdout
    assert "step 3 of 3" in stdout
    assert stdout.find(">>> %trainjob_status") < stdout.rfind("Running")


def test_runner_exits_non_zero_on_a_failing_cell(tmp_path: Path) -> None:
    """A cell that fails (no --no-raise-error) stops the run; the error line is printed."""
    import nbformat

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("print('first')"),
            nbformat.v4.new_code_cell("raise RuntimeError('cell went wrong')"),
            nbformat.v4.new_code_cell("print('never printed')"),
        ]
    )
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, str(path))
    proc = subprocess.run(
        [*RUNNER, str(path), "--no-cluster"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KUBECONFIG": str(tmp_path / "unused")},
    )
    assert proc.returncode == 1
    assert "first" in proc.stdout
    assert "never printed" not in proc.stdout.replace(">>> print('never printed')", "")
    assert "RuntimeError: cell went wrong" in proc.stderr
    assert "without encryption" not in proc.stderr  # the kernel runs on Unix sockets
    assert (tmp_path / "bad.executed.ipynb").is_file()


def test_extract_widget_texts_walks_boxes_outputs_and_html() -> None:
    """Widget text extraction: Box children, Tab titles, Output outputs, nested views, HTML."""
    import nbformat

    def model(name: str, **state: Any) -> dict[str, Any]:
        return {"model_name": name, "model_module": "@jupyter-widgets/controls", "state": state}

    state = {
        "box": model("VBoxModel", children=["IPY_MODEL_head", "IPY_MODEL_tabs"]),
        "head": model("HTMLModel", value="<b>TrainJob</b> x1 &amp; <i>Running</i>"),
        "tabs": model("TabModel", children=["IPY_MODEL_out"], titles=["pod-a"]),
        "out": model(
            "OutputModel",
            outputs=[
                {"output_type": "stream", "name": "stdout", "text": "hello\n"},
                {
                    "output_type": "display_data",
                    "data": {WIDGET_VIEW_MIME: {"model_id": "inner"}, "text/plain": "x"},
                },
            ],
        ),
        "inner": model("HTMLModel", value="<table><tr><td>p-0</td><td>Running</td></tr></table>"),
        "layout": model("LayoutModel", width="10px"),
    }
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "x",
                outputs=[
                    nbformat.v4.new_output(
                        "display_data", data={WIDGET_VIEW_MIME: {"model_id": "box"}}
                    )
                ],
            )
        ],
        metadata={"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}},
    )
    texts = extract_widget_texts(nb)
    assert texts["box"].splitlines() == ["TrainJob x1 & Running", "pod-a", "hello", "p-0 Running"]
    assert texts["layout"] == ""
    assert cell_texts(nb) == [texts["box"]]
