"""What the panels carry for the lab extension (issue 29): the TrainJob's name and uid in the
panel MIME type, beside the static HTML and text, for the connect/status, cell and forward
panels; and why a job is gone, as the live line says it."""

from __future__ import annotations

from typing import Any

from trainjob_magics.engine.inventory.records import gone_reason
from trainjob_magics.engine.result import ExecResult, JobStatus, PodInfo
from trainjob_magics.magics.cell import SinglePodView, key_cell_panel
from trainjob_magics.magics.views.forward import ForwardPanel
from trainjob_magics.magics.views.live import PANEL_MIME
from trainjob_magics.magics.views.output import WidgetOutputView
from trainjob_magics.magics.views.pods import MultiPodWidgetView
from trainjob_magics.magics.views.status import StatusWidget


def _status(state: str = "Running", uid: str = "uid-1") -> JobStatus:
    pod = PodInfo("j-node-0-0", "node-0", "Running", True, "local", 0, None, "", True)
    return JobStatus("j", "ns", "mpi", state, "", [pod], "j-node-0-0", 1.0, uid=uid)


class _Session:
    name, namespace, job_uid = "j", "ns", "uid-1"


def test_the_connect_panel_keeps_its_jobs_uid_after_the_job_is_deleted(
    published: list[dict[str, Any]],
) -> None:
    panel = StatusWidget(_status("Pending", uid=""), interval=0.0)
    assert published[-1]["data"][PANEL_MIME] == {"kind": "status", "name": "j", "namespace": "ns"}
    panel.update(_status("Running"), now=True)
    panel.update(_status("Deleted", uid=""), now=True)  # a deleted job's status has no uid
    assert published[-1]["data"][PANEL_MIME]["uid"] == "uid-1"
    assert "Deleted" in published[-1]["data"]["text/plain"]


def test_a_finished_cell_panel_carries_its_job_beside_the_static_html(
    published: list[dict[str, Any]],
) -> None:
    view = SinglePodView(WidgetOutputView(interval=0))
    key_cell_panel(view, _Session())
    view.write("p", "stdout", "hello\n")
    view.finish_result(ExecResult("hello\n", "", 0, 0.5, pod="j-node-0-0"))
    data = published[-1]["data"]
    assert data[PANEL_MIME] == {"kind": "cell", "name": "j", "namespace": "ns", "uid": "uid-1"}
    assert "hello" in data["text/html"] and "exit code 0" in data["text/html"]
    assert "exit code 0" in data["text/plain"]
    # while the cell runs it is a widget: the live key comes with the static form only
    assert all(PANEL_MIME not in out["data"] for out in published[:-1])


def test_a_multi_pod_cell_panel_carries_its_job(published: list[dict[str, Any]]) -> None:
    view = MultiPodWidgetView([("p0", ""), ("p1", "node-1")], interval=0)
    key_cell_panel(view, _Session())
    view.finish("2 pods ok · 0.10 s")
    data = published[-1]["data"]
    assert data[PANEL_MIME]["kind"] == "cell" and data[PANEL_MIME]["uid"] == "uid-1"
    assert "2 pods ok" in data["text/html"]


def test_the_forward_panel_says_whether_its_drawing_is_the_live_one(
    published: list[dict[str, Any]],
) -> None:
    panel = ForwardPanel(
        link="http://127.0.0.1:4000/",
        port=6006,
        pod="j-node-0-0",
        alias="default",
        widgets=True,
        show=True,
        job=("j", "ns", "uid-1"),
    )
    live = published[-1]["data"][PANEL_MIME]
    assert live == {
        "kind": "forward",
        "name": "j",
        "namespace": "ns",
        "uid": "uid-1",
        "port": 6006,
        "link": "http://127.0.0.1:4000/",
        "pod": "j-node-0-0",
        "alias": "default",
        "forwarding": True,
    }
    panel.ended()
    assert published[-1]["data"][PANEL_MIME]["forwarding"] is False
    assert "Stopped" in published[-1]["data"]["text/plain"]


def test_a_job_the_idle_stop_closed_is_gone_for_that_reason() -> None:
    notes = {"trainjob-magics/closed-by": "idle stop", "trainjob-magics/idle-stop": "40"}
    assert gone_reason({"metadata": {"annotations": notes}}) == (
        "stopped for being idle (no command for 40 s)"
    )
    closed = {"metadata": {"annotations": {"trainjob-magics/closed-by": "%trainjob_close"}}}
    assert gone_reason(closed) == "closed by %trainjob_close"


def test_a_job_closed_here_without_its_note_is_not_called_a_kubectl_delete() -> None:
    """A Role without `patch` on trainjobs: the sidebar's close could not write its note, the
    server remembers who closed it (seen on the real stack as its restricted user)."""
    plain = {"metadata": {"annotations": {}}}
    assert gone_reason(plain).startswith("deleted outside trainjob-magics")
    assert gone_reason(plain, "the sidebar") == "closed by the sidebar"
    noted = {"metadata": {"annotations": {"trainjob-magics/closed-by": "%trainjob_close"}}}
    assert gone_reason(noted, "the sidebar") == "closed by %trainjob_close"  # the note wins
