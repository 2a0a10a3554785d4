"""What the browser tests of the lab extension's live panels share: writing a notebook, running
one cell, reading a panel's live line and waiting for its state, kubectl delete."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import nbformat

# waits until the pod's server listens on the port (a %%trainjob cell's last line)
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
LIVE = ".tjm-live-state"
STATIC = ".tjm-panel > .tjm-kernel-drawing"  # the kernel's drawing below the live line


def write_notebook(path: Path, *cells: str) -> None:
    """A Python 3 notebook of these code cells."""
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in cells],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(path))


def serve_cell(port: int, text: str) -> str:
    """A ``%%trainjob`` cell that serves a page saying ``text`` on ``port`` of the pod."""
    page = f"<!doctype html><title>pod page</title><h1>{text}</h1>"
    return (
        "%%trainjob\n"
        f"printf '%s' '{page}' > index.html\n"
        f"nohup python3 -m http.server {port} --bind 127.0.0.1 > http.log 2>&1 < /dev/null &\n"
        + WAIT_LISTENING.format(port=port)
    )


def live_state(nbp: Any, index: int) -> Any:
    """The live line the lab extension draws in cell ``index``'s panel."""
    return nbp.cells().nth(index).locator(LIVE).first


def wait_state(locator: Any, state: str, timeout: float) -> float:
    """Seconds until the live line's data-state is ``state`` (fails after ``timeout``, saying
    what the line said)."""
    started = time.monotonic()
    locator.wait_for(timeout=timeout * 1000)
    while locator.get_attribute("data-state") != state:
        assert time.monotonic() - started < timeout, (state, locator.inner_text())
        time.sleep(0.05)
    return time.monotonic() - started


def run_cell(nbp: Any, index: int, timeout: float = 180, errors_ok: bool = False) -> Any:
    """Run cell ``index`` (Shift+Enter in its editor) and wait for its execution count; fail if
    it shows an error, unless ``errors_ok``."""
    cell = nbp.cells().nth(index)
    cell.locator(".jp-InputArea-editor").click()
    nbp.page.keyboard.press("Shift+Enter")
    prompt = cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]"))
    prompt.wait_for(timeout=timeout * 1000)
    if not errors_ok:
        errors = cell.locator(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
        )
        assert errors.count() == 0, f"cell {index}: {errors.all_inner_texts()}"
    return cell


def open_sidebar(nbp: Any) -> Any:
    """Open the TrainJob sessions sidebar from the status-bar item; its locator."""
    nbp.page.locator(".tjm-statusbar-item").click()
    sidebar = nbp.page.locator("#trainjob-magics-sessions")
    sidebar.wait_for()
    return sidebar


def menu(page: Any, top: str, item: str) -> None:
    """Click ``top`` in the menu bar, then ``item`` (JupyterLab and Notebook 7)."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(top)}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def kubectl_delete(kubeconfig: Path, name: str) -> None:
    """``kubectl delete trainjob NAME --wait=false``."""
    subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "delete", "trainjob", name, "--wait=false"],
        check=True,
        capture_output=True,
    )
