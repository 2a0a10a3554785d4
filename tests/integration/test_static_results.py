"""A finished ``%%trainjob`` cell is static output: nbconvert shows it without widget state."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from trainjob_magics.magics.views.live import PANEL_MIME

pytestmark = pytest.mark.timeout(300)

WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
BODIES = [
    "%%trainjob\nseq 1 5000",
    "%%trainjob --no-raise-error\necho on stdout\necho 'a warning on stderr' >&2\nexit 3",
    "%%trainjob\nprintf 'step 1\\rstep 2\\rfinished\\n'",
]


def test_nbconvert_html_without_widget_state_shows_every_tail_and_footer(
    tmp_path: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig_path))
    cells = [
        nbformat.v4.new_code_cell("%load_ext trainjob_magics"),
        nbformat.v4.new_code_cell("%trainjob_connect mpi-interactive --nodes 2"),
        *(nbformat.v4.new_code_cell(body) for body in BODIES),
        nbformat.v4.new_code_cell("%trainjob_close"),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        store_widget_state=False,
        timeout=180,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    assert "widgets" not in nb.metadata
    seq, mixed, progress = (nb.cells[i] for i in range(2, 2 + len(BODIES)))
    for cell in (seq, mixed, progress):
        mimes = [set(o.get("data", {})) for o in cell.outputs]
        # frozen: no widget view left; the lab extension's key to the job beside the HTML
        assert mimes == [{"text/html", "text/plain", PANEL_MIME}], mimes

    body, _ = HTMLExporter().from_notebook_node(nb)
    text = html.unescape(re.sub(r"<[^>]+>", "", body))
    # seq: the hidden-lines note, the kept tail up to the last line, the footer
    assert "[… 4,000 lines hidden; the full output is in _trainjob.stdout / .stderr]" in text
    assert re.search(r"\n4001\n4002\n(?:\d+\n)*4999\n5000\n", text), "the tail is not whole"
    assert "\n4000\n" not in text
    assert re.search(r"exit code 0 · [\d.]+ s · pod [a-z0-9-]+", text)
    # stdout and stderr apart, and the failure footer
    assert re.search(r'class="tjm-stderr"[^>]*>a warning on stderr</span>', body)
    assert re.search(r'class="tjm-stdout"[^>]*>on stdout</span>', body)
    assert re.search(r"exit code 3 · [\d.]+ s · pod ", text)
    # a \r progress line as a terminal leaves it
    assert '<span class="tjm-stdout">finished</span>' in body
    assert progress.outputs[0]["data"]["text/plain"].splitlines()[0] == "finished"
    # the text/plain fallback carries the same (what terminals and text exports show)
    plain = seq.outputs[0]["data"]["text/plain"].splitlines()
    assert plain[0].startswith("[… 4,000 lines hidden")
    assert plain[1] == "4001" and plain[-2] == "5000" and plain[-1].startswith("exit code 0")
