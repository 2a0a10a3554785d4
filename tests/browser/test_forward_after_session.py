"""A ``%trainjob_forward --show`` panel after its session closed (issue 29), in JupyterLab and
Notebook 7: Kernel > Restart from the menu closes the session and the forward with it, but the
front end drops what the dying kernel sends, so the panel the kernel drew stayed "Forwarding",
its IFrame on a closed port. The lab extension draws the forward's static form instead
("Stopped (session ended)", the link as text, no IFrame) within seconds; saved and reloaded,
the notebook shows that form again and no "Error displaying widget: model not found".
Screenshots under artifacts/screenshots/."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.kube import trainjob_names
from tests.helpers.live_panels import (
    live_state,
    menu,
    run_cell,
    serve_cell,
    wait_state,
    write_notebook,
)
from tests.helpers.ports import free_port, port_is_free

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

LOAD, CONNECT, SERVE, FORWARD = range(4)
NOTEBOOK = "forward_after.ipynb"


def _assert_static_form(cell: Any, link: str) -> None:
    """The forward's ended form: Stopped, the link as text, no IFrame, no anchor, and nowhere
    "Forwarding" (the kernel's last drawing is replaced, not kept below)."""
    panel = cell.locator(".trainjob-forward-panel")
    assert panel.count() == 1, cell.inner_text()
    assert panel.locator(".tjm-state").inner_text() == "Stopped (session ended)"
    assert cell.locator("iframe").count() == 0
    assert panel.locator("a").count() == 0
    output = cell.locator(".jp-OutputArea").inner_text()
    assert "Forwarding" not in output, output
    assert link in output and "closed at kernel exit" in output, output


@pytest.mark.parametrize("frontend", ["lab", "notebook7"])
def test_forward_panel_after_a_menu_restart_and_a_reload(
    frontend: str,
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    from playwright.sync_api import expect

    root = tmp_path / "root"
    root.mkdir()
    port, text = free_port(), f"served by the pod {secrets.token_hex(4)}"
    write_notebook(
        root / NOTEBOOK,
        "%load_ext trainjob_magics",
        "%trainjob_connect torch-distributed",
        serve_cell(port, text),
        f"%trainjob_forward {port} --show",
    )
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, NOTEBOOK, frontend)
    for index in (LOAD, CONNECT, SERVE):
        run_cell(nbp, index)
    cell = run_cell(nbp, FORWARD)
    expect(cell.frame_locator(".tjm-forward-frame").locator("h1")).to_have_text(text)
    expect(cell.locator(".trainjob-forward-panel .tjm-state")).to_have_text("Forwarding")
    link = cell.locator(".trainjob-forward-panel a").get_attribute("href") or ""
    local_port = int(link.rsplit(":", 1)[1].rstrip("/"))
    wait_state(live_state(nbp, FORWARD), "Running", 5)
    shots = [nbp.screenshot_cell(FORWARD, screenshot_path(f"forward_after-{frontend}", "live"))]

    # Kernel > Restart Kernel… from the menu: the session, and its forward, close
    menu(nbp.page, "Kernel", "Restart Kernel…")
    restarted = time.monotonic()
    nbp.page.locator(".jp-Dialog-button.jp-mod-accept", has_text="Restart").click()
    wait_state(live_state(nbp, FORWARD), "Gone", 30)
    expect(cell.locator(".trainjob-forward-panel .tjm-state")).to_have_text(
        "Stopped (session ended)", timeout=5000
    )
    took = time.monotonic() - restarted
    _assert_static_form(cell, link)
    assert "the forward is closed" in live_state(nbp, FORWARD).inner_text()
    assert port_is_free(local_port), "the forward's local port still listens"
    assert trainjob_names(own_cluster.kubeconfig_path, include_deleting=False) == []
    shots.append(
        nbp.screenshot_cell(FORWARD, screenshot_path(f"forward_after-{frontend}", "restarted"))
    )

    # saved and reloaded: the same static form, and no widget that cannot be found
    nbp.lab.wait_kernel_ready(NOTEBOOK)
    nbp.save()
    nbp.page.reload()
    cell = nbp.cells().nth(FORWARD)
    wait_state(live_state(nbp, FORWARD), "Gone", 10)
    _assert_static_form(cell, link)
    page_text = nbp.page.locator(".jp-NotebookPanel").inner_text()
    assert "Error displaying widget" not in page_text
    assert "model not found" not in page_text
    shots.append(
        nbp.screenshot_cell(FORWARD, screenshot_path(f"forward_after-{frontend}", "reloaded"))
    )
    with capsys.disabled():
        print(
            f"\n{frontend}: the forward panel said Stopped {took:.2f} s after the click that "
            "confirmed the restart\n  " + "\n  ".join(str(s) for s in shots)
        )
