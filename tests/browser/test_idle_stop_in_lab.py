"""Idle stop with its warning (issue 29), in JupyterLab and Notebook 7, and the sessions sidebar
in Notebook 7 (View > Left Sidebar > Show TrainJob sessions).

``--idle-stop 30s`` is inside the fixed 5-minute warning window from the start, so the panel and
the sidebar warn at once and count down; when no command ran for 30 s the kernel closes the
session: the panel says it was stopped for being idle, the sidebar's row goes, and the next
``%%trainjob`` fails in one line that says why, when and how to reconnect. Screenshots under
artifacts/screenshots/."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.kube import trainjob_names
from tests.helpers.live_panels import STATIC, live_state, run_cell, wait_state, write_notebook
from tests.helpers.polling import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

LOAD, CONNECT, AFTER = range(3)
NOTEBOOK = "idle.ipynb"
IDLE_STOP = 30
WARNING = re.compile(r"Idle stop in (\d+) s: run a command to keep it")


def _open_sidebar(nbp: Any) -> Any:
    """The TrainJob sessions sidebar, opened as a user does in each front end."""
    page = nbp.page
    if nbp.frontend == "notebook7":  # no status bar: the View menu's left sidebar
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^View$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Left Sidebar$")).hover()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Show TrainJob sessions$")).click()
    else:
        page.locator(".tjm-statusbar-item").click()
    sidebar = page.locator("#trainjob-magics-sessions")
    sidebar.wait_for()
    return sidebar


def _seconds(locator: Any) -> int:
    """The seconds a warning says are left (fails when it says none)."""
    found = WARNING.search(locator.inner_text())
    assert found, locator.inner_text()
    return int(found.group(1))


@pytest.mark.parametrize("frontend", ["lab", "notebook7"])
def test_idle_stop_warns_in_the_panel_and_the_sidebar_then_stops(
    frontend: str,
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    write_notebook(
        root / NOTEBOOK,
        "%load_ext trainjob_magics",
        f"%trainjob_connect torch-distributed --idle-stop {IDLE_STOP}s",
        "%%trainjob\nhostname",
    )
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, NOTEBOOK, frontend)
    run_cell(nbp, LOAD)
    run_cell(nbp, CONNECT)
    connected = time.monotonic()
    (name,) = trainjob_names(own_cluster.kubeconfig_path)

    # the warning at once (30 s is inside the 5-minute window), in the panel and the sidebar
    wait_state(live_state(nbp, CONNECT), "Running", 5)
    panel_warning = live_state(nbp, CONNECT).locator(".tjm-idle-warning")
    panel_warning.wait_for(timeout=5000)
    first = _seconds(panel_warning)
    assert first <= IDLE_STOP
    sidebar = _open_sidebar(nbp)
    row = sidebar.locator(f'.tjm-sidebar-session[data-name="{name}"]')
    row.wait_for(timeout=5000)
    assert sidebar.locator("h3").first.inner_text() == NOTEBOOK
    assert "1/1 pods ready" in row.locator(".tjm-sidebar-state").inner_text()
    row_warning = row.locator(".tjm-idle-warning")
    assert _seconds(row_warning) <= IDLE_STOP
    # it counts down between two reads of the server
    wait_until(lambda: _seconds(panel_warning) < first, timeout=10)
    shots = [
        nbp.screenshot_cell(CONNECT, screenshot_path(f"idle_stop-{frontend}", "panel-warning")),
        screenshot_path(f"idle_stop-{frontend}", "sidebar-warning"),
    ]
    sidebar.screenshot(path=str(shots[-1]))
    nbp.page.screenshot(path=str(screenshot_path(f"idle_stop-{frontend}", "page")))

    # no command for 30 s: the kernel closes the session, though it lives
    wait_state(live_state(nbp, CONNECT), "Gone", IDLE_STOP + 20)
    stopped_after = time.monotonic() - connected
    text = live_state(nbp, CONNECT).inner_text()
    assert f"Gone: stopped for being idle (no command for {IDLE_STOP} s)" in text, text
    assert live_state(nbp, CONNECT).locator(".tjm-idle-warning").count() == 0
    # the kernel, alive, draws its panel's end itself, once the pods are gone
    static = nbp.cells().nth(CONNECT).locator(STATIC)
    wait_until(lambda: "deleted at idle stop" in static.inner_text(), timeout=30)
    assert "Deleted" in static.inner_text()
    row.wait_for(state="detached", timeout=5000)
    assert "0 TrainJobs" in sidebar.locator(".tjm-sidebar-totals").inner_text()
    shots.append(nbp.screenshot_cell(CONNECT, screenshot_path(f"idle_stop-{frontend}", "stopped")))

    # the next command says why, when, and how to reconnect, in one line
    cell = run_cell(nbp, AFTER, errors_ok=True)
    error = cell.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    said = error.inner_text()
    assert re.search(
        rf"session 'default' was stopped for being idle \(no command for {IDLE_STOP} s\) at "
        r"\d\d:\d\d:\d\d; reconnect with %trainjob_connect",
        said,
    ), said
    shots.append(nbp.screenshot_cell(AFTER, screenshot_path(f"idle_stop-{frontend}", "next-cell")))
    with capsys.disabled():
        print(
            f"\n{frontend}: warned {first} s before; stopped {stopped_after:.1f} s after the "
            "connect cell ended\n  " + "\n  ".join(str(s) for s in shots)
        )
