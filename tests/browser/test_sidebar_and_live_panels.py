"""The lab extension in a real browser (issue 29): live panels that say the job's real state
after Kernel > Restart from the menu, a reload and a kubectl delete (within 2 s); the
"TrainJob sessions" sidebar and its close button; the status-bar item. JupyterLab (Light and
Dark) and Notebook 7. Screenshots under artifacts/screenshots/."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.helpers.kube import trainjob_names

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

LIVE = ".tjm-live-state"


def _notebook(path: Path, *cells: str) -> None:
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in cells],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(path))


def _live_state(nbp: Any, index: int) -> Any:
    return nbp.cells().nth(index).locator(LIVE).first


def _wait_state(locator: Any, state: str, timeout: float) -> float:
    """Seconds until the live line's data-state is ``state`` (fails after ``timeout``)."""
    started = time.monotonic()
    while locator.get_attribute("data-state") != state:
        assert time.monotonic() - started < timeout, (state, locator.inner_text())
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.parametrize(
    ("frontend", "theme"),
    [("lab", "JupyterLab Light"), ("lab", "JupyterLab Dark"), ("notebook7", "")],
)
def test_live_panels_after_kubectl_delete_and_reload(
    frontend: str,
    theme: str,
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    _notebook(
        root / "live.ipynb",
        "%load_ext trainjob_magics",
        "%trainjob_connect torch-distributed --nodes 2 --gpu 1",
        "%trainjob_status",
    )
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    if theme:
        lab.set_theme(theme)
    nbp = open_notebook(lab, "live.ipynb", frontend)
    nbp.run_all()
    nbp.wait_all_ran(timeout=180)
    for index in (1, 2):
        _wait_state(_live_state(nbp, index), "Running", 5)
        text = _live_state(nbp, index).inner_text()
        assert "2/2 pods ready" in text and "2 GPU" in text and "held" in text, text
    tag = f"{frontend}-{theme.split()[-1].lower() if theme else 'default'}"
    nbp.screenshot_cell(1, screenshot_path("live_panels", f"{tag}-running"))

    # saved, then a reload: the reopened panels read the job's state (nothing from the kernel)
    nbp.save()
    nbp.page.reload()
    nbp.cells().first.wait_for()
    _wait_state(_live_state(nbp, 1), "Running", 5)

    # kubectl delete: within 2 s every panel says it is gone, and why
    (name,) = trainjob_names(own_cluster.kubeconfig_path, include_deleting=False)
    subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(own_cluster.kubeconfig_path),
            "delete",
            "trainjob",
            name,
            "--wait=false",
        ],
        check=True,
        capture_output=True,
    )
    took = max(_wait_state(_live_state(nbp, i), "Gone", 2.0) for i in (1, 2))
    for index in (1, 2):
        text = _live_state(nbp, index).inner_text()
        assert "deleted outside trainjob-magics" in text, text
        assert nbp.cells().nth(index).locator(".tjm-kernel-drawing.tjm-stale").count() == 1
    nbp.screenshot_cell(1, screenshot_path("live_panels", f"{tag}-deleted"))
    print(f"\n{tag}: panels said Gone {took:.2f} s after kubectl delete returned")


def test_menu_restart_sidebar_and_close_button(
    tmp_path: Path,
    own_cluster: Any,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    _notebook(
        root / "side.ipynb",
        "%load_ext trainjob_magics",
        "%trainjob_connect torch-distributed --nodes 2 --gpu 2 --cpu 4",
        "%trainjob_connect mpi-interactive --nodes 2 --name tjmsecond",
    )
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "side.ipynb")
    page = nbp.page
    nbp.run_all()
    nbp.wait_all_ran(timeout=180)
    _wait_state(_live_state(nbp, 1), "Running", 5)
    _wait_state(_live_state(nbp, 2), "Running", 5)

    # the status bar and the sidebar, grouped under the notebook
    status = page.locator(".tjm-statusbar-item")
    status.wait_for()
    assert status.inner_text().startswith("2 TrainJobs · 4 GPU · 8 CPU"), status.inner_text()
    status.click()
    sidebar = page.locator("#trainjob-magics-sessions")
    sidebar.wait_for()
    rows = sidebar.locator(".tjm-sidebar-session")
    rows.nth(1).wait_for()
    assert rows.count() == 2
    assert sidebar.locator("h3").first.inner_text() == "side.ipynb"
    # rows go by creation time, to the second: two jobs made in one second go by name
    first = sidebar.locator('.tjm-sidebar-session:not([data-name="tjmsecond"])').inner_text()
    assert "torch-distributed" in first and "2/2 pods ready" in first and "4 GPU" in first, first
    sidebar.screenshot(path=str(screenshot_path("sidebar", "two-sessions")))
    page.screenshot(path=str(screenshot_path("sidebar", "page")))

    # close with its confirm: the row goes, the panel says who closed it
    second_name = "tjmsecond"
    sidebar.locator(f'.tjm-sidebar-session[data-name="{second_name}"] .tjm-close').click()
    page.locator(".jp-Dialog-button.jp-mod-accept", has_text="Close TrainJob").click()
    took = _wait_state(_live_state(nbp, 2), "Gone", 30)
    assert "closed by the sidebar" in _live_state(nbp, 2).inner_text()
    assert sidebar.locator(f'.tjm-sidebar-session[data-name="{second_name}"]').count() == 0
    print(f"\nsidebar close: the panel said Gone after {took:.2f} s")

    # Kernel > Restart Kernel… from the menu: the panel says closed at kernel exit
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Kernel$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Restart Kernel…$")).click()
    page.locator(".jp-Dialog-button.jp-mod-accept", has_text="Restart").click()
    _wait_state(_live_state(nbp, 1), "Gone", 10)
    text = _live_state(nbp, 1).inner_text()
    assert "closed at kernel exit" in text, text
    assert "0 TrainJobs" in status.inner_text()
    nbp.screenshot_cell(1, screenshot_path("live_panels", "after-menu-restart"))
