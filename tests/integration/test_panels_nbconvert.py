"""Panels with the panel MIME type, where the lab extension does not run (issue 29): a notebook
with connect, cell, status and forward panels of two TrainJobs of one name, executed under
nbclient and saved, reads as before the MIME type existed.

- Each panel carries its TrainJob's name and uid (the second job of the same name another
  uid) beside non-empty static HTML and text.
- nbconvert to HTML and to Markdown shows each panel's static HTML as the kernel last drew it;
  to LaTeX (PDF's route, which takes no HTML) its text; never our MIME type's JSON.
"""

from __future__ import annotations

import html
import json
import re
import secrets
from collections.abc import Iterator

import pytest
from nbconvert.exporters import HTMLExporter, LatexExporter, MarkdownExporter

from tests.helpers.panel_notebook import (
    CELL_OUTPUT,
    PANELS,
    PanelNotebook,
    panel_outputs,
    run_panel_notebook,
)
from tests.helpers.ports import free_port
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics.views.live import PANEL_MIME

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def executed(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PanelNotebook]:
    path = tmp_path_factory.mktemp("panels") / "panels.ipynb"
    name = f"tjmnbc{secrets.token_hex(4)}"
    yield run_panel_notebook(path, local_cluster.kubeconfig_path, name, free_port())


def _visible(markup: str) -> str:
    """The text of HTML as a reader sees it (tags out, entities resolved, spaces collapsed):
    exporters may write the same HTML with other quoting."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def _json_leaks(text: str) -> list[str]:
    """Traces of our MIME type's JSON in an export (raw or HTML-escaped)."""
    found = [PANEL_MIME] if PANEL_MIME in text else []
    found += re.findall(r"(?:\"|&quot;)kind(?:\"|&quot;)\s*:", text)
    return found


def test_each_panel_carries_its_job_by_name_and_uid(executed: PanelNotebook) -> None:
    uid1, uid2 = executed.uids
    assert uid1 and uid2 and uid1 != uid2
    found = panel_outputs(executed.nb)
    assert sorted({index for index, _ in found}) == sorted(PANELS), found
    for index, data in found:
        kind, job = PANELS[index]
        ref = data[PANEL_MIME]
        assert (ref["kind"], ref["name"], ref["uid"]) == (kind, executed.name, executed.uids[job])
        assert data["text/html"].strip() and data["text/plain"].strip(), (index, data)
    forward = next(data[PANEL_MIME] for index, data in found if PANELS[index][0] == "forward")
    assert forward["forwarding"] is False  # stopped: the kernel drew its ended form itself


def test_html_and_markdown_exports_show_the_static_panels(executed: PanelNotebook) -> None:
    panels = panel_outputs(executed.nb)
    for exporter in (HTMLExporter(template_name="lab"), MarkdownExporter()):
        body, _ = exporter.from_notebook_node(executed.nb)
        kind = type(exporter).__name__
        assert _json_leaks(body) == [], kind
        text = _visible(body)
        for index, data in panels:  # each panel as the kernel last drew it, none empty
            assert _visible(data["text/html"]) in text, (kind, index)
        assert CELL_OUTPUT in text and "exit code 0" in text, kind
        assert "Deleted" in text and "Stopped" in text, kind  # closed jobs, stopped forward


def test_latex_export_takes_the_panels_text(executed: PanelNotebook) -> None:
    body, _ = LatexExporter().from_notebook_node(executed.nb)
    assert _json_leaks(body) == []
    for index, data in panel_outputs(executed.nb):
        first = data["text/plain"].splitlines()[0]
        assert re.sub(r"[\\{}]", "", first)[:40] in re.sub(r"[\\{}]", "", body), (index, first)
    assert CELL_OUTPUT in body and "exit code 0" in body


def test_the_saved_notebook_is_valid_and_holds_no_widget_for_the_panels(
    executed: PanelNotebook,
) -> None:
    saved = json.loads(executed.path.read_text())
    for index in PANELS:
        for output in saved["cells"][index]["outputs"]:
            assert "application/vnd.jupyter.widget-view+json" not in output.get("data", {})
