"""Per-pod output views (tab per pod / prefixed lines) and the transfer progress view."""

from __future__ import annotations

import io

from trainjob_magics.engine.errors import ConnectionLostError
from trainjob_magics.engine.result import ExecResult
from trainjob_magics.magics.views.pods import PrefixedTextView, TabbedWidgetView
from trainjob_magics.magics.views.progress import ProgressView

PODS = [("job-node-0-0-a", "node-0"), ("job-node-0-1-b", "node-1")]


def res(code: int | None) -> ExecResult:
    return ExecResult("", "", code, 0.5)


def test_prefixed_text_lines_per_pod_and_stream() -> None:
    out, err = io.StringIO(), io.StringIO()
    view = PrefixedTextView(PODS, stdout=out, stderr=err)
    view.write("job-node-0-0-a", "stdout", "hel")
    view.write("job-node-0-1-b", "stdout", "other\npart")
    view.write("job-node-0-0-a", "stdout", "lo\nwor")
    view.write("job-node-0-0-a", "stderr", "oops\n")
    assert out.getvalue() == "[node-1] other\n[node-0] hello\n"
    view.pod_done("job-node-0-0-a", res(0), None)
    view.pod_done("job-node-0-1-b", None, ConnectionLostError("dropped\nmid-way"))
    view.finish("1 of 2 pods failed", ok=False)
    assert out.getvalue().splitlines()[2:] == [
        "[node-0] wor",
        "[node-0] exit code 0 · 0.50 s",
        "[node-1] part",
        "[node-1] ConnectionLostError: dropped mid-way",
        "1 of 2 pods failed",
    ]
    assert err.getvalue() == "[node-0] oops\n"


def test_tabbed_widget_titles_outputs_and_text_fallback() -> None:
    view = TabbedWidgetView(PODS, interval=0.0, show=False)
    assert view.tabs.titles == ("node-0 · running", "node-1 · running")
    view.write("job-node-0-0-a", "stdout", "alpha\n")
    view.write("job-node-0-1-b", "stderr", "beta\n")
    view.tick()
    view.pod_done("job-node-0-0-a", res(0), None)
    view.pod_done("job-node-0-1-b", res(3), None)
    view.finish("1 of 2 pods failed: job-node-0-1-b [node-1] (exit 3)", ok=False)
    assert view.tabs.titles == ("node-0 ✓", "node-1 ✗")
    first, second = view.views.values()
    assert "alpha" in first.body.value and "exit code 0" in first.footer.value
    assert "beta" in second.body.value and "exit code 3" in second.footer.value
    assert "node-1" in view.summary.value
    text = view.text("done")
    assert "[node-0] alpha" in text and "[node-1] beta" in text and text.endswith("done")


def test_progress_text_only_for_large_transfers() -> None:
    out = io.StringIO()
    small = ProgressView("Uploading", widgets=False, threshold=100, stream=out)
    small.update(10, 50)
    small.finish()
    assert out.getvalue() == ""
    ticks = iter(range(100))
    big = ProgressView(
        "Uploading", widgets=False, threshold=100, stream=out, clock=lambda: next(ticks)
    )
    for done in (0, 512, 1024):
        big.update(done, 1024)
    big.finish()
    lines = out.getvalue().split("\r")
    assert lines[-1].startswith("Uploading: 100.0% (1.0 KiB of 1.0 KiB)")
    assert out.getvalue().endswith("\n")
