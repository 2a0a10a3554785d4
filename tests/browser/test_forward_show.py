"""``%trainjob_forward PORT --show`` in JupyterLab and Notebook 7 (Chromium): the panel's IFrame
shows the page the pod serves, its link goes to the same place; ``--stop`` leaves the panel
saying "Stopped", its IFrame and link gone, the local port free. Screenshots of both states."""

from __future__ import annotations

import re
import secrets
import socket
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.helpers.kube import trainjob_names

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

WAIT_LISTENING = (
    "python3 -c 'import socket, sys, time\n"
    "for _ in range(300):\n"
    "    try:\n"
    '        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()\n'
    "        break\n"
    "    except OSError:\n"
    "        time.sleep(0.2)\n"
    "else:\n"
    '    sys.exit("the server did not start")\' {port}'
)
LOAD, CONNECT, SERVE, FORWARD, STOP, CLOSE = range(6)


def _free_port() -> int:
    """A port free on this host now (the local cluster's pods share its network)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _notebook(path: Path, port: int, text: str) -> None:
    """load, connect, serve ``text`` on ``port`` from the pod, forward --show, --stop, close."""
    page = f"<!doctype html><title>pod page</title><h1>{text}</h1>"
    serve = (
        "%%trainjob\n"
        f"printf '%s' '{page}' > index.html\n"
        f"nohup python3 -m http.server {port} --bind 127.0.0.1 > http.log 2>&1 < /dev/null &\n"
        + WAIT_LISTENING.format(port=port)
    )
    sources = [
        "%load_ext trainjob_magics",
        "%trainjob_connect torch-distributed",
        serve,
        f"%trainjob_forward {port} --show",
        f"%trainjob_forward --stop {port}",
        "%trainjob_close",
    ]
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for source in sources],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(path))


def _run_cell(nbp: Any, index: int, timeout: float = 180) -> Any:
    """Run cell ``index`` (Shift+Enter in its editor) and wait for its execution count; fail if
    it shows an error."""
    cell = nbp.cells().nth(index)
    cell.locator(".jp-InputArea-editor").click()
    nbp.page.keyboard.press("Shift+Enter")
    prompt = cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]"))
    prompt.wait_for(timeout=timeout * 1000)
    errors = cell.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    assert errors.count() == 0, f"cell {index}: {errors.all_inner_texts()}"
    return cell


def _refused(port: int) -> bool:
    """Nothing listens on ``port`` of this host."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.parametrize("frontend", ["lab", "notebook7"])
def test_the_iframe_shows_the_pods_page_until_stopped(
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
    port, text = _free_port(), f"served by the pod {secrets.token_hex(4)}"
    _notebook(root / "forward.ipynb", port, text)
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(own_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "forward.ipynb", frontend)
    for index in (LOAD, CONNECT, SERVE):
        _run_cell(nbp, index)

    cell = _run_cell(nbp, FORWARD)
    panel = cell.locator(".trainjob-forward-panel")
    frame = cell.locator("iframe.tjm-forward-frame")
    expect(frame).to_have_count(1)
    expect(cell.frame_locator(".tjm-forward-frame").locator("h1")).to_have_text(text)
    link = panel.locator("a").get_attribute("href")
    assert link and re.fullmatch(r"http://127\.0\.0\.1:\d+/", link), link
    assert frame.get_attribute("src") == link
    expect(panel).to_contain_text(f"port {port} of pod")
    expect(panel.locator(".tjm-state")).to_have_text("Forwarding")
    shots = [nbp.screenshot_cell(FORWARD, screenshot_path(f"forward-{frontend}", "showing"))]

    stopped = _run_cell(nbp, STOP)
    expect(stopped.locator(".jp-OutputArea")).to_contain_text(f"Stopped forwarding {link}")
    expect(panel.locator(".tjm-state")).to_have_text(re.compile(r"^Stopped"))
    expect(cell.locator("iframe")).to_have_count(0)
    expect(panel.locator("a")).to_have_count(0)
    expect(panel).to_contain_text(link)  # the link stays readable, as text
    assert _refused(int(link.rsplit(":", 1)[1].rstrip("/"))), "the local port still listens"
    shots.append(nbp.screenshot_cell(FORWARD, screenshot_path(f"forward-{frontend}", "stopped")))

    _run_cell(nbp, CLOSE)
    assert "Error displaying widget" not in nbp.page.locator(".jp-NotebookPanel").inner_text()
    assert trainjob_names(own_cluster.kubeconfig_path, include_deleting=False) == []
    with capsys.disabled():
        print("\nscreenshots:\n  " + "\n  ".join(str(s) for s in shots))
