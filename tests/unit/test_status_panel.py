"""The status panel is static output kept current through its display handle, and the states
a session reaches are pushed to its panels (cells that learn the job ended, preemption, idle
release, a --pod all timeout)."""

from __future__ import annotations

import html
from typing import Any

from tests.helpers.polling import wait_until
from trainjob_magics.engine.errors import (
    ExecTimeoutError,
    IdleReleasedError,
    NotFoundError,
    PodGoneError,
    PodNotRunningError,
    SessionPreemptedError,
)
from trainjob_magics.engine.result import ExecResult, JobStatus, MultiExecResult, PodInfo
from trainjob_magics.magics.outcomes import learn_from_cell
from trainjob_magics.magics.registry import SessionRegistry
from trainjob_magics.magics.views.live import PANEL_MIME
from trainjob_magics.magics.views.pods import MultiPodWidgetView
from trainjob_magics.magics.views.status import ConnectStatusView, StatusWidget

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _status(state: str = "Running", phase: str = "Running", disruption: str = "") -> JobStatus:
    pod = PodInfo("j-node-0-0", "node-0", phase, True, "local", 0, None, "", True)
    return JobStatus(
        "j", "ns", "mpi", state, f"job is {state}", [pod], "j-node-0-0", 5.0, disruption=disruption
    )


def test_the_panel_is_static_output_with_one_display_id(published: list[dict[str, Any]]) -> None:
    view = ConnectStatusView(widgets=True)
    view.update(_status("Pending", "Pending"))
    view.finish(_status(), note="Session 'default' ready: TrainJob j")
    assert published, "nothing displayed"
    ids = {out["transient"]["display_id"] for out in published}
    assert len(ids) == 1  # one display, updated in place
    assert not published[0].get("update") and all(out.get("update") for out in published[1:])
    for out in published:  # never a widget model: a saved notebook shows it as it is
        # HTML and text, and the key the lab extension renders live (views/live.py)
        assert set(out["data"]) == {"text/html", "text/plain", PANEL_MIME}, out["data"].keys()
        assert out["data"][PANEL_MIME] == {"kind": "status", "name": "j", "namespace": "ns"}
        assert WIDGET_MIME not in out["data"]
    last = published[-1]["data"]
    assert "Running" in last["text/html"] and "ready: TrainJob j" in last["text/html"]
    assert 'class="trainjob-status"' in last["text/html"]
    assert "Session 'default' ready" in last["text/plain"]
    assert "Refresh" not in last["text/html"]


def test_updates_are_throttled_and_the_last_one_arrives(published: list[dict[str, Any]]) -> None:
    panel = StatusWidget(_status("Pending", "Pending"), interval=0.3)
    shown = len(published)
    for n in range(20):  # e.g. from connect(on_status=...) in a background thread
        panel.update(_status("Pending", "Pending", disruption=f"event {n}"))
    assert len(published) - shown < 20
    wait_until(lambda: "event 19" in published[-1]["data"]["text/html"], timeout=10)
    assert "event 19" in published[-1]["data"]["text/plain"]


def test_status_magic_data_reaches_the_session_s_earlier_panels(
    published: list[dict[str, Any]],
) -> None:
    entry = SessionRegistry().add("a", object())
    connect_panel = StatusWidget(_status("Pending", "Pending"), interval=0.0)
    entry.watch(connect_panel)
    entry.push_status(_status(disruption="12:00:01: pod j-node-0-0 was evicted"))
    assert "Last disruption: 12:00:01: pod j-node-0-0 was evicted" in connect_panel.html
    page = published[-1]["data"]["text/html"]
    assert "Running" in page and "was evicted" in page


class _Session:
    """The one call the outcomes make: ``status()`` (a given status, or an error)."""

    name = "j"

    def __init__(self, status: JobStatus | None = None, error: Exception | None = None):
        self._status, self._error = status, error

    def status(self) -> JobStatus:
        if self._error is not None:
            raise self._error
        assert self._status is not None
        return self._status


def _panel_after(session: _Session, result: Any, error: BaseException | None) -> StatusWidget:
    entry = SessionRegistry().add("a", session)
    panel = StatusWidget(_status(), show=False)
    entry.watch(panel)
    learn_from_cell(entry, result, error)
    return panel


def test_a_preempted_session_reads_preempted() -> None:
    error = SessionPreemptedError("session preempted: Kueue preempted TrainJob j")
    panel = _panel_after(_Session(_status("Suspended", "Pending")), None, error)
    assert panel.final_state == "Preempted" and "Kueue preempted TrainJob j" in panel.text()


def test_a_job_that_ended_by_itself_reads_its_end() -> None:
    done = _status("Complete", "Succeeded")
    panel = _panel_after(_Session(done), None, PodNotRunningError("the trainer pod is Succeeded"))
    assert panel.final_state == "Complete" and "job is Complete" in panel.text()
    failed = _status("Failed", "Failed")
    gone = PodGoneError("pod j-node-0-0 was deleted", cause="deleted")
    multi = MultiExecResult(results={"p": ExecResult(pod="p")}, errors={"p": gone})
    assert _panel_after(_Session(failed), multi, None).final_state == "Failed"
    deleted = _Session(error=NotFoundError("trainjob j not found"))
    assert _panel_after(deleted, None, PodNotRunningError("gone")).final_state == "Deleted"


def test_an_idle_released_job_reads_deleted_idle() -> None:
    error = IdleReleasedError("TrainJob j ended itself after 60s without a heartbeat")
    panel = _panel_after(_Session(_status()), None, error)
    assert panel.final_state == "Deleted (idle)" and "without a heartbeat" in panel.text()


def test_a_disruption_the_job_survives_updates_without_ending() -> None:
    recovered = _status(disruption="12:00:01: pod j-node-0-0 was evicted")
    error = PodGoneError("pod j-node-0-0 was evicted", cause="evicted")
    panel = _panel_after(_Session(recovered), None, error)
    assert panel.final_state == "" and "Last disruption" in panel.html


def test_a_timeout_or_an_unreadable_status_changes_nothing() -> None:
    asked = _Session(error=AssertionError("status() must not be called for a timeout"))
    panel = _panel_after(asked, None, ExecTimeoutError("did not finish within 5s"))
    assert panel.final_state == "" and "Last disruption" not in panel.html
    unreadable = _Session(error=RuntimeError("api down"))
    assert _panel_after(unreadable, None, PodNotRunningError("x")).final_state == ""


def test_pod_all_timeout_reads_timed_out_not_stopped(published: list[dict[str, Any]]) -> None:
    names = [("job-node-0-0-x", "node-0"), ("job-node-0-1-x", "node-1")]
    view = MultiPodWidgetView(names, interval=0.0)
    view.write("job-node-0-1-x", "stdout", "still going\n")
    timeout = ExecTimeoutError("the command did not finish within 5s")
    view.pod_done("job-node-0-0-x", ExecResult(pod="job-node-0-0-x"), timeout)
    view.finish("1 of 2 pods failed", ok=False)
    text = published[-1]["data"]["text/plain"]
    assert "stopped" not in text
    assert text.count("timed out") >= 2, text  # the pod that timed out and the one still running


def test_the_pod_table_wraps_its_long_columns_to_fit_a_narrow_window() -> None:
    """Pod and node names and the waiting reason may wrap (at their hyphens and spaces, not
    mid-word: ``word-break:break-all`` cut every name once a column wrapped); the short columns
    stay on one line (tests/browser/test_pod_table_width.py measures it at 800 px)."""
    import re

    page = StatusWidget(_status("Pending", "Pending"), show=False).html
    cells = re.findall(r'<td style="([^"]*)" data-label="[^"]*">', page)
    assert len(cells) == 8, cells
    wraps = [("white-space:normal" in c and "break-all" not in c) for c in cells]
    # NAME, ROLE, PHASE, READY, NODE, RESTARTS, AGE, WAITING
    assert wraps == [True, False, False, False, True, False, False, True], cells


def test_the_holding_line_is_in_the_status_panel_while_true(
    published: list[dict[str, Any]],
) -> None:
    """%trainjob_status: what the job holds is one line of the panel (the lab extension hides it
    under its live line, which says it), not printed under it (issue 36, defect 6); gone once the
    job's state moved on or the session ended."""
    line = "holds 2 CPU · held 7 s (<0.1 CPU-h) · idle 3 s"
    panel = StatusWidget(_status(), show=False)
    panel.set_holds(line)
    panel.show()
    data = published[-1]["data"]
    assert data["text/html"].count('class="tjm-holds tjm-when-live"') == 1
    assert data["text/html"].count(html.escape(line)) == 1
    assert data["text/plain"].endswith(line) and data["text/plain"].count(line) == 1
    panel.update(_status("Complete", "Succeeded"), now=True)
    assert "tjm-holds" not in published[-1]["data"]["text/html"]
    assert line not in published[-1]["data"]["text/plain"]
    again = StatusWidget(_status(), show=False)
    again.set_holds(line)
    again.show()
    again.final("Deleted", cause="deleted by %trainjob_close")
    assert "tjm-holds" not in published[-1]["data"]["text/html"]
