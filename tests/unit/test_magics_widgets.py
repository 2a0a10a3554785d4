"""Widgets: output rendering, throttling of large output, status panel and refresh."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from trainjob_magics.engine.result import JobStatus, PodInfo
from trainjob_magics.magics.views.output import WidgetOutputView, render_lines_html
from trainjob_magics.magics.views.status import StatusWidget, render_status_html


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_html_escapes_and_styles_stderr() -> None:
    h = render_lines_html([("stdout", "<b>&"), ("stderr", "bad\x1b[31m!")], 0, "x")
    assert "&lt;b&gt;&amp;" in h
    assert 'class="tjm-stderr"' in h and "bad!" in h
    assert "tjm-note" not in h


def test_output_view_streams_with_footer() -> None:
    clock = Clock()
    v = WidgetOutputView(interval=0.1, clock=clock, show=False)
    v.write("stdout", "first\n")
    assert "first" in v.body.value
    v.write("stderr", "second\n")
    assert "second" not in v.body.value  # throttled
    clock.t = 0.2
    v.tick()
    assert "tjm-stderr" in v.body.value
    v.finish("exit code 2 · 0.20 s", ok=False)
    assert "exit code 2" in v.footer.value
    assert v.text() == "first\nsecond"


def test_progress_bar_shown_as_terminal_would() -> None:
    v = WidgetOutputView(interval=0, show=False)
    for i in range(0, 101, 10):
        v.write("stderr", f"\r[{'#' * (i // 10):<10}] {i}%")
    v.finish("exit code 0 · 1.00 s")
    assert v.text() == "[##########] 100%"


def test_100k_lines_bounded_updates_and_capped() -> None:
    clock = Clock()
    v = WidgetOutputView(max_lines=50, interval=0.1, where="res.stdout", clock=clock, show=False)
    for i in range(100_000):
        v.write("stdout", f"line {i}\n")
        clock.t += 0.00001  # 100k lines in one simulated second
    v.finish("exit code 0 · 1.00 s")
    assert v.renders <= 15
    text = v.text().splitlines()
    assert text[0] == "[… 99,950 lines hidden; the full output is in res.stdout]"
    assert text[1] == "line 99950" and text[-1] == "line 99999"
    assert len(text) == 51
    assert len(v.body.value) < 10_000


def _status(state: str, phase: str = "Running") -> JobStatus:
    pods = [
        PodInfo(
            "j-launcher-0",
            "launcher",
            phase,
            phase == "Running",
            "n1",
            0,
            datetime.now(timezone.utc),
            "" if phase == "Running" else "ImagePullBackOff",
            True,
        ),
    ]
    return JobStatus("j", "ns1", "mpi-interactive", state, "", pods, "j-launcher-0", 3.0)


def test_status_html_has_headline_and_pod_table() -> None:
    h = render_status_html(_status("Pending", "Pending"))
    for text in (
        "TrainJob j",
        "ns1",
        "mpi-interactive",
        "Pending",
        "elapsed 3s",
        "ImagePullBackOff",
        "<th",
        "Restarts",
        "Waiting",
    ):
        assert text in h


def test_status_panel_updates_ticks_and_refreshes() -> None:
    clock = Clock()
    calls = []

    def refresh() -> JobStatus:
        calls.append(1)
        return _status("Running")

    w = StatusWidget(_status("Pending", "Pending"), show=False, clock=clock)
    clock.t = 65
    w.tick()
    assert "elapsed 1m08s" in w.html
    w.set_refresh(refresh)
    w.refresh()
    assert calls and "Running" in w.html and w.error == ""
    assert "TrainJob j" in w.text()


def test_status_panel_refresh_error_is_one_line() -> None:
    def boom() -> JobStatus:
        raise RuntimeError("api\ndown")

    w = StatusWidget(_status("Running"), refresh=boom, show=False)
    w.refresh()
    assert w.error == "RuntimeError: api down" and "RuntimeError: api down" in w.html


@pytest.mark.parametrize(
    "mode,kernel,expected",
    [
        ("auto", False, False),
        ("auto", True, True),
        ("off", True, False),
        ("on", False, True),
    ],
)
def test_use_widgets(mode: str, kernel: bool, expected: bool) -> None:
    from trainjob_magics.magics.views.frontend import use_widgets

    class Shell:
        pass

    shell = Shell()
    if kernel:
        shell.kernel = object()  # type: ignore[attr-defined]
    assert use_widgets(shell, mode) is expected
