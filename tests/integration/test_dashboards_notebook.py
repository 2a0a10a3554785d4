"""notebooks/dashboards.ipynb under nbclient against ``trainjob-magics local-cluster``, started
as the README starts it: the pod serves a page, ``%trainjob_forward PORT --show`` shows its
link, which serves that page to this process while the kernel runs, ``--list`` has its row, and
``%trainjob_close`` leaves the panel "Stopped (session closed)" with the local port free."""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools.notebook_run import WIDGET_VIEW_MIME, cell_texts, run_notebook
from tests.helpers.cli_cluster import start_cli_cluster, stop_cli_cluster
from tests.helpers.notebooks import html_of_cell, index_of
from tests.helpers.polling import wait_until
from trainjob_magics.magics.views.live import PANEL_MIME

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "dashboards.ipynb"
LIVE = re.compile(
    r"^Forwarding (http://127\.0\.0\.1:(\d+)/) -> port (\d+) of pod (\S+) \(session 'default'\); "
    r"stop with %trainjob_forward --stop (\d+)$"
)
FAILED = (ConnectionError, urllib.error.URLError, http.client.HTTPException, TimeoutError)

pytestmark = pytest.mark.timeout(300)


@dataclass
class Seen:
    """What the test saw while the kernel ran: the forward cell's live output and the page."""

    live_text: str = ""
    live_panel: bool = False
    page: bytes = b""
    fetch_errors: list[str] = field(default_factory=list)


@dataclass
class Executed:
    """The executed notebook, and what was seen while it ran."""

    nb: Any
    seen: Seen


def fetch(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


def _plain(cell: Any) -> str:
    """The ``text/plain`` of a cell's display outputs, joined."""
    return "\n".join(
        (o.get("data") or {}).get("text/plain", "")
        for o in cell.get("outputs", [])
        if o.get("output_type") == "display_data"
    )


def _fetch_link(cell: Any, seen: Seen) -> None:
    """The forward cell just ran: keep its live output and fetch its link (from this process,
    the kernel still running)."""
    seen.live_text = _plain(cell)
    # the forward panel is static HTML with the panel MIME type the lab extension renders live
    # (a widget view read "model not found" once its kernel was gone)
    seen.live_panel = any(
        PANEL_MIME in (o.get("data") or {}) and WIDGET_VIEW_MIME not in (o.get("data") or {})
        for o in cell.outputs
    )
    found = LIVE.match(seen.live_text)
    if not found:
        return

    def page() -> bytes:
        try:
            return fetch(found[1])
        except FAILED as exc:
            seen.fetch_errors.append(repr(exc))
            return b""

    with contextlib.suppress(AssertionError):  # the test says what was fetched
        seen.page = wait_until(page, timeout=30)


def _hook(seen: Seen) -> Any:
    """nbclient's on_cell_executed hook: fetch the link right after the forward cell."""

    def on_cell_executed(cell: Any, cell_index: int, execute_reply: Any) -> None:
        if cell.cell_type == "code" and cell.source.startswith("%trainjob_forward $port"):
            _fetch_link(cell, seen)

    return on_cell_executed


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Executed]:
    tmp = tmp_path_factory.mktemp("dashboards")
    proc = start_cli_cluster(tmp)
    seen = Seen()
    try:
        result = run_notebook(
            NOTEBOOK,
            tmp / "dashboards.executed.ipynb",
            kubeconfig=tmp / "kubeconfig",
            timeout=180,
            on_cell_executed=_hook(seen),
        )
    finally:
        stop_cli_cluster(proc)
    assert result.error is None, f"cell {result.failed_cell} failed: {result.error}\n" + "\n".join(
        cell_texts(result.nb)
    )
    yield Executed(result.nb, seen)


def pod_port(nb: Any) -> int:
    """The port the pod's server listens on, as the serving cell said."""
    text = cell_texts(nb)[index_of(nb, "%%trainjob --result served")]
    found = re.search(r"^serving on port (\d+)$", text, re.M)
    assert found, text
    return int(found[1])


def test_the_pod_serves_the_loss_table_or_tensorboard(executed: Executed) -> None:
    nb = executed.nb
    assert "Wrote" in cell_texts(nb)[index_of(nb, "%%trainjob_writefile dash/train.py")]
    text = cell_texts(nb)[index_of(nb, "%%trainjob --result served")]
    assert re.search(r"^step 10: loss 0\.\d{4}$", text, re.M), text
    assert "python3 -m http.server (index.html)" in text or "TensorBoard (runs/)" in text, text
    assert re.search(r"exit code 0\b", text), text
    port_cell = nb.cells[index_of(nb, "port = int(")]
    assert port_cell.outputs[-1]["data"]["text/plain"] == str(pod_port(nb))


def test_the_link_served_the_pods_page_while_the_kernel_ran(executed: Executed) -> None:
    seen, port = executed.seen, pod_port(executed.nb)
    found = LIVE.match(seen.live_text)
    assert found, f"the forward cell showed {seen.live_text!r}"
    assert int(found[3]) == port and int(found[5]) == port
    assert seen.live_panel, "the forward panel carries no panel MIME bundle"
    assert seen.page, f"the link served nothing: {seen.fetch_errors[-3:]}"
    if b"TensorBoard" in seen.page:
        return  # the image has tensorboard: its page
    assert b"<h1>Training loss</h1>" in seen.page, seen.page[:500]
    assert seen.page.count(b"<tr><td>") == 10, seen.page


def test_list_shows_the_forward(executed: Executed) -> None:
    nb, seen = executed.nb, executed.seen
    found = LIVE.match(seen.live_text)
    assert found
    link, pod = found[1], found[4]
    text = cell_texts(nb)[index_of(nb, "%trainjob_forward --list")]
    header, *rows = text.splitlines()
    assert header.split() == ["SESSION", "PORT", "POD", "VIA", "URL", "CONNECTIONS"], text
    assert len(rows) == 1, text
    row = re.fullmatch(
        rf"default\s+{pod_port(nb)}\s+{re.escape(pod)}\s+tunnel\s+{re.escape(link)}\s+"
        r"(\d+) open, (\d+) total",
        rows[0],
    )
    assert row, text
    opened, total = int(row[1]), int(row[2])
    assert total >= 1 and opened <= total, text  # this test's fetch went through it


def test_close_stops_the_forward_and_frees_the_port(executed: Executed) -> None:
    nb, seen = executed.nb, executed.seen
    found = LIVE.match(seen.live_text)
    assert found
    link, local_port, port, pod = found[1], int(found[2]), int(found[3]), found[4]
    index = index_of(nb, "%trainjob_forward $port")
    outputs = nb.cells[index].outputs
    assert not [o for o in outputs if WIDGET_VIEW_MIME in o.get("data", {})], outputs
    stopped = f"Stopped (session closed): {link} -> port {port} of pod {pod}"
    assert _plain(nb.cells[index]) == stopped
    page = html_of_cell(nb, index)
    assert "Stopped (session closed)" in page and "<iframe" not in page and "<a " not in page
    assert "Closed session 'default'" in cell_texts(nb)[index_of(nb, "%trainjob_close")]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", local_port), timeout=5).close()
