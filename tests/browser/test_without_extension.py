"""A notebook with live panels opened where the lab extension does not run (issue 29): in
JupyterLab with ``jupyter labextension disable trainjob-magics-labextension`` (an isolated
config dir), the connect, cell, status and forward panels read as before the panel MIME type
existed: the static HTML the kernel last drew, no live line, no "No renderer" output, none of
our MIME type's JSON. Screenshots under artifacts/screenshots/."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.live_panels import LIVE
from tests.helpers.panel_notebook import CELL_OUTPUT, PANELS, run_panel_notebook
from tests.helpers.ports import free_port
from trainjob_magics.magics.views.live import PANEL_MIME

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

EXTENSION = "trainjob-magics-labextension"


def _disable_extension(config_dir: Path) -> dict[str, str]:
    """``jupyter labextension disable`` at the user level of ``config_dir`` (not the venv's);
    the environment a server then starts with."""
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config_dir)}
    jupyter = [sys.executable, "-m", "jupyter", "labextension"]
    subprocess.run([*jupyter, "disable", "--level=user", EXTENSION], env=env, check=True)
    listed = subprocess.run([*jupyter, "list"], env=env, capture_output=True, text=True)
    line = next(x for x in (listed.stdout + listed.stderr).splitlines() if EXTENSION in x)
    assert "disabled" in line, line
    return {"JUPYTER_CONFIG_DIR": str(config_dir)}


def test_panels_read_as_static_html_with_the_lab_extension_disabled(
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    name = f"tjmnoext{secrets.token_hex(3)}"
    executed = run_panel_notebook(
        root / "panels.ipynb", own_cluster.kubeconfig_path, name, free_port()
    )
    env = _disable_extension(tmp_path / "config")
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path), **env})
    nbp = open_notebook(lab, "panels.ipynb")
    page = nbp.page
    page.locator(".jp-OutputArea-output").first.wait_for()
    # the extension is off: no sidebar, no status-bar item, no live line anywhere
    assert page.locator("#trainjob-magics-sessions").count() == 0
    assert page.locator(".tjm-statusbar-item").count() == 0
    assert page.locator(LIVE).count() == 0

    shown = page.locator(".jp-NotebookPanel").inner_text()
    assert "No renderer could be found" not in shown
    assert PANEL_MIME not in shown and '"kind"' not in shown
    for index, (kind, _job) in PANELS.items():
        out = nbp.cells().nth(index).locator('.jp-OutputArea-output[data-mime-type="text/html"]')
        assert out.count() == 1, (index, nbp.output_text(index))
        text = out.inner_text()
        if kind == "status":
            assert f"TrainJob {name}" in text and "Deleted" in text, (index, text)
        elif kind == "cell":
            assert "exit code 0" in text, (index, text)
        else:
            assert "Stopped" in text and "port" in text, (index, text)
    assert CELL_OUTPUT in nbp.output_text(3)
    shots = [
        nbp.screenshot_cell(index, screenshot_path("without_extension", f"cell{index}"))
        for index in (1, 3, 6)
    ]
    saved = json.loads((root / "panels.ipynb").read_text())
    assert saved["cells"][1]["outputs"][0]["data"][PANEL_MIME]["uid"] == executed.uids[0]
    with capsys.disabled():
        print("\n  " + "\n  ".join(str(s) for s in shots))
