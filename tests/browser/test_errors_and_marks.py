"""Errors and failure marks as a user reads them in JupyterLab (Chromium, a narrow window): a
queued ``--timeout`` says its explanation once and the queue position once, its error text wraps
between words, and a failed pod's summary row (its ✗, duration and last line) reaches 4.5:1 in
JupyterLab Light and Dark, measured from the rendered colours."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.browser.test_live_output import CONTRAST
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.kueue import KueueConfig

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

PER_POD_FAILING = """%%trainjob --pod all --no-raise-error
echo "loading data"
case "$HOSTNAME" in
  *-node-0-0) echo "RuntimeError: NCCL timeout on rank 1" >&2; exit 3;;
esac
echo "epoch 1 loss 0.25"
"""
QUEUED = "%trainjob_connect torch-distributed --cpu 1 --queue user-queue --timeout 3 --as q"

# Where the lines of the error text break: for each line after the first, the characters on
# either side of the break (found from the rectangles of each character).
LINE_BREAKS = """(pre) => {
  const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
  const chars = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    for (let i = 0; i < n.textContent.length; i++) chars.push([n, i]);
  }
  const breaks = [];
  let top = null, prev = '';
  for (const [node, i] of chars) {
    const r = document.createRange();
    r.setStart(node, i);
    r.setEnd(node, i + 1);
    const rect = r.getClientRects()[0];
    const ch = node.textContent[i];
    if (rect && rect.height > 0) {
      if (top !== null && rect.top > top + 2 && ch !== '\\n' && prev !== '\\n') {
        breaks.push(prev + '|' + ch);
      }
      top = rect.top;
    }
    prev = ch;
  }
  const cs = getComputedStyle(pre);
  return {breaks, wordBreak: cs.wordBreak, overflowWrap: cs.overflowWrap,
          whiteSpace: cs.whiteSpace, text: pre.textContent};
}"""

ERROR_PRE = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"] pre'


@pytest.fixture
def kueue_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """Kueue with no quota: a queued connect waits until its --timeout."""
    cfg = KueueConfig(quota={"cpu": "0", "memory": "4Gi"})
    with LocalCluster(root_dir=tmp_path / "cluster", kueue=cfg, cpus=64, memory="256Gi") as c:
        yield c


def _notebook(path: Path) -> None:
    sources = [
        "%load_ext trainjob_magics",
        "%trainjob_connect mpi-interactive --nodes 2",
        PER_POD_FAILING,
        "%trainjob_close",
        QUEUED,
    ]
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in sources],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, str(path))


def test_a_queued_timeout_says_it_once_wrapped_and_failed_rows_read_in_both_themes(
    tmp_path: Path,
    kueue_cluster: LocalCluster,
    jupyterlab_factory: Any,
    open_notebook: Any,
    screenshot_path: Any,
    capsys: Any,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    _notebook(root / "errors.ipynb")
    per_pod, queued = 2, 4
    lab = jupyterlab_factory(root, {"KUBECONFIG": str(kueue_cluster.kubeconfig_path)})
    nbp = open_notebook(lab, "errors.ipynb")
    nbp.page.set_viewport_size({"width": 760, "height": 1000})
    nbp.run_all()
    nbp.page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]"
        ".every(p => /\\[\\d+\\]/.test(p.textContent || ''))",
        timeout=240_000,
        polling=500,
    )
    cells = nbp.cells()
    cell = cells.nth(queued)
    error = cell.locator(ERROR_PRE)
    error.wait_for(timeout=60_000)
    cell.locator(".tjm-status-head", has_text="Timed out").wait_for(timeout=30_000)
    shots = [nbp.screenshot_cell(queued, screenshot_path("errors", "queued-timeout"))]

    # said once: the explanation by the error, the queue position by the panel (the lab
    # extension's live line above the panel is the server's view of the job, not the kernel's)
    area = cell.locator(".jp-Cell-outputArea").inner_text()
    live = " ".join(cell.locator(".tjm-live-state").all_inner_texts())
    assert area.count("keeps its place in the queue") == 1, area
    assert area.count("position 1") - live.count("position 1") == 1, area
    assert area.count("still queued in LocalQueue user-queue after 3s") == 1, area
    # wrapped between words, never inside one ("use|r-queue", "c|pu")
    wrap = error.evaluate(LINE_BREAKS)
    assert wrap["wordBreak"] == "normal" and wrap["whiteSpace"] == "pre-wrap", wrap
    assert len(wrap["breaks"]) >= 1, wrap  # the window is narrow enough to wrap it
    inside = [b for b in wrap["breaks"] if b[0].isalnum() and b[-1].isalnum()]
    assert not inside, wrap

    cells.nth(per_pod).locator(".tjm-pod-failed").wait_for(timeout=30_000)
    nbp.save()
    with capsys.disabled():
        print(f"\nerror line breaks: {wrap['breaks']}")
    for theme, label in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        lab.set_theme(theme)
        nbp = open_notebook(lab, "errors.ipynb")
        failed_row = nbp.cells().nth(per_pod).locator(".tjm-pod-failed")
        failed_row.wait_for(timeout=30_000)
        measured = nbp.page.evaluate(CONTRAST, ".tjm-pod-failed, .tjm-pod-failed *")
        assert measured["light"] == ("true" if label == "light" else "false"), measured
        found = {item["cls"]: item for item in measured["found"]}
        for needed in ("tjm-pod-mark", "tjm-pod-name", "tjm-pod-duration", "tjm-pod-last"):
            assert needed in found, (needed, found)
        assert found["tjm-pod-mark"]["text"] == "✗"
        with capsys.disabled():
            print(f"{label}: " + ", ".join(f"{c} {i['ratio']:.2f}" for c, i in found.items()))
        low = [i for i in measured["found"] if i["ratio"] < 4.5]
        assert not low, f"{label}: texts of the failed row under 4.5:1: {low}"
        # the mark stays red: redder than the row's text
        mark, name = found["tjm-pod-mark"]["fg"], found["tjm-pod-name"]["fg"]
        assert mark[0] - max(mark[1], mark[2]) > 60 and mark != name, found
        everything = nbp.page.evaluate(CONTRAST, None)["found"]
        low = [i for i in everything if i["ratio"] < 4.5]
        assert not low, f"{label}: texts under 4.5:1: {low}"
        shots.append(
            nbp.screenshot_cell(per_pod, screenshot_path(f"errors-{label}", "failed-pod-row"))
        )
    with capsys.disabled():
        print("screenshots:\n  " + "\n  ".join(str(s) for s in shots))
