"""The status panel's pod table fits an 800-px-wide window: long pod and node names wrap
instead of making the table scroll sideways (issue 29). The panel's own HTML in Chromium,
without a server: the width of a notebook's output area at 800 px is set on its container."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from trainjob_magics.engine.result import JobStatus, PodInfo
from trainjob_magics.magics.views.status import render_status_html

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

# A notebook's output area at an 800 px window: the side bars and the prompt take ~160 px.
OUTPUT_WIDTH = 640

_OVERFLOW = """() => [...document.querySelectorAll('.tjm-pods-scroll')].map(el => (
  {scroll: el.scrollWidth - el.clientWidth, table: el.firstElementChild.offsetWidth,
   width: el.clientWidth}))"""


def long_named_status() -> JobStatus:
    """Four pods as a real cluster names them: long pod names, long node names, a reason."""
    now = datetime.now(timezone.utc)
    job = "tjm-3f9a2c7d1e4b"
    pods = [
        PodInfo(
            f"{job}-{role}-0-{i}-wwx7w",
            role,
            "Pending" if i else "Running",
            not i,
            f"gke-research-gpu-a100-80gb-pool-3f9a2c7d-x8k{i}",
            0,
            now,
            "ContainerCreating" if i else "",
            role == "launcher",
        )
        for i, role in enumerate(("launcher", "node", "node", "node"))
    ]
    return JobStatus(job, "research", "mpi-interactive", "Pending", "waiting", pods, None, 3.0)


def test_the_pod_table_fits_an_800px_window(browser_page: Any) -> None:
    page = browser_page
    page.set_viewport_size({"width": 800, "height": 800})
    panel = render_status_html(long_named_status(), elapsed=3.0)
    page.set_content(
        "<body style='margin:0;font-family:sans-serif'>"
        f"<div style='width:{OUTPUT_WIDTH}px;margin-left:100px'>{panel}</div></body>"
    )
    boxes = page.evaluate(_OVERFLOW)
    assert len(boxes) == 1, boxes
    box = boxes[0]
    assert box["scroll"] <= 0 and box["table"] <= box["width"] <= OUTPUT_WIDTH, box
    # the names are still all there, wrapped rather than cut
    text = page.inner_text(".tjm-pods").replace("\n", "")
    assert "gke-research-gpu-a100-80gb-pool-3f9a2c7d-x8k3" in text.replace("\t", "")
