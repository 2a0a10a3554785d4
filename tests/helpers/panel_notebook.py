"""A notebook holding every kind of panel that carries the panel MIME type (connect, cell,
status, forward), of two TrainJobs of one name, executed under nbclient as a user saves it:
what the nbconvert and no-extension tests read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.notebook_run import run_notebook
from tests.helpers.live_panels import serve_cell, write_notebook
from trainjob_magics.magics.views.live import PANEL_MIME

CELL_OUTPUT = "cell output from the pod"


def cells(name: str, port: int) -> list[str]:
    """connect NAME, its uid, a cell, status, a forward (--show, then stopped), close; connect
    NAME again, its uid, a cell, close."""
    uid = (
        "from trainjob_magics.magics.extension import loaded_magics\n"
        f"print('uid', loaded_magics(get_ipython()).registry.find({name!r}).session.job_uid)"
    )
    return [
        "%load_ext trainjob_magics",
        f"%trainjob_connect torch-distributed --name {name}",
        uid,
        f"%%trainjob\necho {CELL_OUTPUT}",
        "%trainjob_status",
        serve_cell(port, "served"),
        f"%trainjob_forward {port} --show",
        f"%trainjob_forward --stop {port}",
        f"%trainjob_close {name}",
        f"%trainjob_connect torch-distributed --name {name}",
        uid,
        "%%trainjob\necho second job",
        f"%trainjob_close {name}",
    ]


# the cells above whose panel carries the MIME type: index -> (kind, which job: 0 or 1)
PANELS = {1: ("status", 0), 3: ("cell", 0), 4: ("status", 0), 5: ("cell", 0), 6: ("forward", 0)}
PANELS |= {9: ("status", 1), 11: ("cell", 1)}
UID_CELLS = (2, 10)


@dataclass
class PanelNotebook:
    """The executed notebook, saved at ``path``, and the uids of its two jobs."""

    nb: Any
    path: Path
    name: str
    uids: tuple[str, str]


def run_panel_notebook(path: Path, kubeconfig: Path, name: str, port: int) -> PanelNotebook:
    """Write the notebook at ``path``, execute it against ``kubeconfig`` and save it there."""
    write_notebook(path, *cells(name, port))
    run = run_notebook(path, path, kubeconfig=kubeconfig, timeout=240)
    assert run.error is None, f"cell {run.failed_cell}: {run.error}"
    uids = []
    for index in UID_CELLS:
        (stream,) = [o for o in run.nb.cells[index].outputs if o.output_type == "stream"]
        uids.append(stream.text.split()[1])
    return PanelNotebook(run.nb, path, name, (uids[0], uids[1]))


def panel_outputs(nb: Any) -> list[tuple[int, dict[str, Any]]]:
    """(cell index, data) of every output carrying the panel MIME type."""
    return [
        (index, dict(output["data"]))
        for index, cell in enumerate(nb.cells)
        for output in cell.get("outputs", [])
        if PANEL_MIME in (output.get("data") or {})
    ]
