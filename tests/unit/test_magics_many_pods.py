"""Many pods and states that stay true: the per-pod summary (failed first, identical output
grouped), the tab / selector, the frozen static results, and the final states a session's
widgets show when it ends. Real ipywidgets objects and a real IPython display publisher."""

from __future__ import annotations

import html
import io
import re
from typing import Any

from trainjob_magics.engine.errors import ConnectionLostError
from trainjob_magics.engine.files.transfer import TransferResult
from trainjob_magics.engine.result import ExecResult, JobStatus, PodInfo, QueueStatus
from trainjob_magics.magics.registry import SessionRegistry
from trainjob_magics.magics.views.live import PANEL_MIME
from trainjob_magics.magics.views.pods import MultiPodWidgetView, PrefixedTextView
from trainjob_magics.magics.views.progress import ProgressView, transfer_line
from trainjob_magics.magics.views.status import ConnectStatusView, StatusWidget
from trainjob_magics.magics.views.status_text import format_status, queue_line


def pods(n: int) -> list[tuple[str, str]]:
    return [(f"job-node-0-{i}-x", f"node-{i}") for i in range(n)]


def res(code: int | None, duration: float = 0.5) -> ExecResult:
    return ExecResult("", "", code, duration)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def last_bundle(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    return outputs[-1]["data"]


def run_pods(view: Any, n: int, failing: int | None) -> None:
    """Every pod prints the same two lines; ``failing`` adds a traceback line and exits 3."""
    for i, (pod, _label) in enumerate(pods(n)):
        view.write(pod, "stdout", "loading data\nepoch 1 loss 0.25\n")
        if i == failing:
            view.write(pod, "stderr", "RuntimeError: NCCL timeout\n")
    view.tick()
    for i, (pod, _label) in enumerate(pods(n)):
        view.pod_done(pod, res(3 if i == failing else 0, 0.5 + i / 100), None)


# ------------------------------------------------------------ many pods


def test_32_pods_one_failing_summary_first_failed_marked_rest_grouped(
    published: list[dict[str, Any]],
) -> None:
    view = MultiPodWidgetView(pods(32), interval=0.0)
    assert view.tabs is None and view.selector is not None  # beyond 8 pods: a selector
    run_pods(view, 32, failing=7)
    # the failed pod is shown without a click
    assert view.selector.value == "job-node-0-7-x"
    assert view.shown.children[view.shown.selected_index] is view.views["job-node-0-7-x"].widget
    assert view.selector.options[0] == ("✗ node-7 · exit 3", "job-node-0-7-x")
    overview = view.overview.value
    rows = re.findall(r'<div class="(tjm-pod-row[^"]*)"', overview)
    assert rows == ["tjm-pod-row tjm-pod-failed", "tjm-pod-row"]  # failed first, then 1 group
    assert "31 pods: identical output" in overview and "32 pods · 31 ✓ · 1 ✗" in overview
    assert "RuntimeError: NCCL timeout" in overview  # the failed pod's last line
    view.finish("", ok=False)
    bundle = last_bundle(published)
    assert set(bundle) == {"text/html", "text/plain"}  # frozen: no widget view left
    html_out = bundle["text/html"]
    assert html_out.index("tjm-pod-failed") < html_out.index("31 pods: identical output")
    details = re.findall(r"<details[^>]*>", html_out)
    assert len(details) == 2 and " open" in details[0]  # the failed pod's output is open
    assert "NCCL timeout" in html_out and "exit 3" in html_out and "exit code 3" not in html_out
    text = bundle["text/plain"]
    assert text.splitlines()[0] == "32 pods · 31 ✓ · 1 ✗"
    assert text.splitlines()[1].startswith("  ✗ node-7 · exit 3")
    assert "31 pods: identical output (node-0, node-1, node-2, … node-31)" in text


def test_frozen_text_keeps_each_group_once_so_its_size_does_not_grow_with_pods(
    published: list[dict[str, Any]],
) -> None:
    sizes = {}
    for n in (32, 256):
        view = MultiPodWidgetView(pods(n), interval=0.0)
        run_pods(view, n, failing=7)
        view.finish("", ok=False)
        text = last_bundle(published)["text/plain"]
        assert text.count("[node-7] RuntimeError: NCCL timeout") == 1  # the failed pod's own
        # once for the failed pod, once for the rest: under the group's head, unprefixed
        assert text.count("[node-7] epoch 1 loss 0.25") == text.count("\nepoch 1 loss 0.25") == 1
        assert f"\n[✓ output of {n - 1} pods]\nloading data\nepoch 1 loss 0.25" in text
        sizes[n] = len(text)
    assert sizes[256] - sizes[32] < 50  # only the counts in the lines grow


def test_beyond_the_kept_groups_a_note_says_where_the_rest_is(
    published: list[dict[str, Any]],
) -> None:
    n = MultiPodWidgetView.STATIC_GROUPS + 3
    view = MultiPodWidgetView(pods(n), interval=0.0)
    for pod, label in pods(n):
        view.write(pod, "stdout", f"only {label} says this\n")
    view.tick()
    for pod, _label in pods(n):
        view.pod_done(pod, res(0), None)
    view.finish("", ok=True)
    text = last_bundle(published)["text/plain"]
    kept = [i for i in range(n) if f"[node-{i}] only node-{i} says this" in text]
    assert len(kept) == view.STATIC_GROUPS
    assert "[… the output of 3 more pods is not kept here;" in text


def test_selector_shows_the_chosen_pod() -> None:
    view = MultiPodWidgetView(pods(12), interval=0.0, show=False)
    view.write("job-node-0-4-x", "stdout", "four\n")
    view.tick()
    view.selector.value = "job-node-0-4-x"
    shown = view.shown.children[view.shown.selected_index]
    assert shown is view.views["job-node-0-4-x"].widget
    assert "four" in view.views["job-node-0-4-x"].body.value


def test_up_to_8_pods_tabs_and_the_failed_tab_is_selected() -> None:
    view = MultiPodWidgetView(pods(8), interval=0.0, show=False)
    assert view.selector is None and len(view.tabs.children) == 8
    run_pods(view, 8, failing=5)
    assert view.tabs.selected_index == 5
    assert view.tabs.titles[5] == "node-5 ✗" and view.tabs.titles[0] == "node-0 ✓"


def test_distinct_outputs_are_rows_of_their_own_and_pod_errors_count_as_failed() -> None:
    view = MultiPodWidgetView(pods(3), interval=0.0, show=False)
    for i, (pod, _) in enumerate(pods(3)):
        view.write(pod, "stdout", f"host {i}\n")
    view.pod_done("job-node-0-0-x", res(0), None)
    view.pod_done("job-node-0-1-x", res(0), None)
    view.pod_done("job-node-0-2-x", None, ConnectionLostError("dropped"))
    text = view.text()
    lines = text.splitlines()
    assert lines[0] == "3 pods · 2 ✓ · 1 ✗"
    assert lines[1].startswith("  ✗ node-2 · ConnectionLostError")
    assert "identical" not in text and "host 0" in lines[2] and "host 1" in lines[3]


def test_running_pods_are_counted_and_unfinished_ones_end_interrupted(
    published: list[dict[str, Any]],
) -> None:
    view = MultiPodWidgetView(pods(2), interval=0.0)
    view.write("job-node-0-0-x", "stdout", "started\n")
    view.pod_done("job-node-0-1-x", res(0), None)
    assert "2 pods · 1 ✓ · 1 running" in view.overview.value
    view.finish("interrupted", ok=False, interrupted=True)
    text = last_bundle(published)["text/plain"]
    assert "· node-0 · interrupted" in text.replace("  ·", "·") and text.endswith("interrupted")


def test_failure_summary_is_left_to_the_error_in_text_mode() -> None:
    out = io.StringIO()
    view = PrefixedTextView(pods(2), stdout=out, stderr=out)
    view.pod_done("job-node-0-0-x", res(1), None)
    view.finish("", ok=False)
    assert out.getvalue() == "[node-0] exit code 1 · 0.50 s\n"


# ------------------------------------------------------------ status panel


def _pod(i: int, phase: str = "Running") -> PodInfo:
    return PodInfo(f"j-node-0-{i}", "node", phase, phase == "Running", "local", 0, None, "", False)


def _status(n: int, state: str = "Running", queue: QueueStatus | None = None) -> JobStatus:
    message = queue.summary() if queue is not None else ""
    return JobStatus(
        "j", "ns", "mpi", state, message, [_pod(i) for i in range(n)], None, 5.0, queue
    )


def test_status_table_folds_beyond_8_pods_and_is_compact() -> None:
    w = StatusWidget(_status(32), show=False)
    value = w.html
    assert "line-height:1.35" in value and "<details" in value
    assert "32 pods: 32 Running · 32 ready" in value
    small = StatusWidget(_status(4), show=False).html
    assert "<details" not in small and small.count("<tr>") == 5


def test_max_runtime_and_time_left_while_running() -> None:
    clock = Clock()
    w = StatusWidget(_status(1), show=False, clock=clock, max_runtime=3600)
    clock.t = 55
    w.tick()
    assert "max runtime 1h00m (59m00s left)" in w.html
    queued = format_status(_status(0, state="Queued"), max_runtime=90)
    assert "max runtime 1m30s" in queued and "left" not in queued


def test_kueue_line_says_what_is_missing_first_and_names_the_queue_once() -> None:
    queue = QueueStatus(
        "Queued",
        message="couldn't assign flavors to pod set node: insufficient unused quota for cpu in "
        "flavor default-flavor, 4 more needed",
        local_queue="user-queue",
        cluster_queue="cluster-queue",
        position_in_local_queue=0,
        position_in_cluster_queue=0,
    )
    st = _status(0, state="Queued", queue=queue)
    line = queue_line(st)
    assert line == (
        "Kueue: queued, 4 more cpu needed (flavor default-flavor) · position 1 in LocalQueue "
        "user-queue (1 in ClusterQueue cluster-queue)"
    )
    text = format_status(st)
    assert text.count("user-queue") == 1 and line in text


def test_final_state_freezes_with_the_wall_clock_elapsed(published: list[dict[str, Any]]) -> None:
    clock = Clock()
    w = StatusWidget(_status(2), refresh=lambda: _status(2), clock=clock)
    clock.t = 120.0
    w.final("Deleted", "TrainJob j deleted; session 'default' closed.")
    bundle = last_bundle(published)
    # the status panel's own MIME type rides along (the lab extension renders it live)
    assert set(bundle) == {"text/html", "text/plain", PANEL_MIME}
    page, text = bundle["text/html"], bundle["text/plain"]
    # the headline says Deleted; the pods' last phases only under "as last seen", folded
    head, folded = page.split("<details", 1)
    assert "Deleted" in head and "Running" not in head
    assert "2 pods as last seen, before the session ended" in folded
    assert "elapsed 2m05s" in head  # 5 s at the snapshot + 120 s since
    head_text, _table = text.split("2 pods as last seen", 1)
    assert "Deleted" in head_text and "Running" not in head_text
    assert "TrainJob j deleted" in head_text
    w.update(_status(2))  # a late snapshot does not bring "Running" back
    assert "Running" not in w.html.split("<details", 1)[0]
    assert "Running" not in last_bundle(published)["text/html"].split("<details", 1)[0]


def test_a_closed_panel_keeps_its_history(published: list[dict[str, Any]]) -> None:
    """The true final state, and what came before: ``Ready after 2.1 s · deleted by
    %trainjob_close 8.0 s later``, in the panel's HTML and its text form."""

    class Session:
        name = "j"

        def close(self, timeout: float | None = None) -> None:
            pass

    clock = Clock()
    connect_panel = StatusWidget(_status(2), clock=clock)
    connect_panel._base = (2.1, clock())  # the job was 2.1 s old when it was ready
    connect_panel.mark_seen("Ready after 2.1 s")
    clock.t = 3.0
    status_panel = StatusWidget(_status(2), clock=clock)
    status_panel.mark_seen("Ready when shown")
    reg = SessionRegistry()
    entry = reg.add("default", Session())
    entry.watch(connect_panel)
    entry.watch(status_panel)
    clock.t = 8.0
    reg.close(by="%trainjob_close")
    for panel, history in (
        (connect_panel, "Ready after 2.1 s · deleted by %trainjob_close 8.0 s later"),
        (status_panel, "Ready when shown · deleted by %trainjob_close 5.0 s later"),
    ):
        bundle = panel.bundle()
        head = bundle["text/plain"].split("as last seen")[0]
        assert " · Deleted · " in head and "Running" not in head, head
        assert f"{history} · session 'default' closed" in head, head
        assert html.escape(history) in bundle["text/html"].split("<details")[0]


def test_interrupted_queued_connect_does_not_stay_queued(
    published: list[dict[str, Any]],
) -> None:
    view = ConnectStatusView(widgets=True)
    view.update(_status(0, state="Queued"))
    view.widget_view._base = (0.0, view.widget_view.clock() - 7.0)  # waited 7 s
    view.final("Interrupted", "stopped waiting; TrainJob j is deleted")
    html_out = last_bundle(published)["text/html"]
    assert "Interrupted" in html_out and "Queued" not in html_out
    assert "elapsed 7s" in html_out and "elapsed 0s" not in html_out


def test_registry_close_pushes_deleted_and_kernel_exit_to_every_widget() -> None:
    class Session:
        name = "j"

        def close(self, timeout: float | None = None) -> None:
            pass

    seen: list[tuple[str, str]] = []

    class View:
        def final(self, state: str, note: str = "", cause: str = "") -> None:
            seen.append((state, " · ".join(p for p in (cause, note) if p)))

    reg = SessionRegistry()
    entry = reg.add("a", Session())
    entry.watch(View())
    entry.watch(View())
    assert reg.close("a").line() == "Closed session 'a' (TrainJob j deleted)."
    assert [s for s, _ in seen] == ["Deleted", "Deleted"] and "TrainJob j deleted" in seen[0][1]
    seen.clear()
    reg.add("c", Session()).watch(View())
    reg.close("c", by="%trainjob_close")
    assert seen == [("Deleted", "deleted by %trainjob_close · session 'c' closed")]
    seen.clear()
    reg.add("b", Session()).watch(View())
    reg.close_all(final_state="Closed at kernel exit")
    assert seen == [("Closed at kernel exit", "deleted at kernel exit · session 'b' closed")]


# ------------------------------------------------------------ transfers


def test_upload_line_says_size_per_pod_times_pods_and_a_rate() -> None:
    result = TransferResult("model.bin", "/w/", [f"p{i}" for i in range(4)], 1, 200 << 20)
    result.duration, result.verified = 2.0, "sha256"
    line = transfer_line(result, 4)
    assert "(1 file, 200.0 MiB) on 4 pods (200.0 MiB x 4 = 800.0 MiB sent)" in line
    assert "400.0 MiB/s" in line and line.endswith("verified by sha256")


def test_progress_counts_per_pod_and_freezes(published: list[dict[str, Any]]) -> None:
    clock = Clock()
    bar = ProgressView("Uploading", widgets=True, threshold=1, clock=clock, copies=4)
    bar.update(0, 800 << 20)
    clock.t = 2.0
    bar.update(400 << 20, 800 << 20)
    assert "50.0% (100.0 MiB of 200.0 MiB x 4 pods) · 200.0 MiB/s" in bar.line()
    bar.update(800 << 20, 800 << 20)
    bar.finish(ok=True)
    bundle = last_bundle(published)
    assert set(bundle) == {"text/html", "text/plain"}
    assert "100.0%" in bundle["text/plain"] and "trainjob-progress" in bundle["text/html"]


def test_sessions_table_is_static_output(published: list[dict[str, Any]]) -> None:
    from trainjob_magics.magics.views.sessions import show_sessions
    from trainjob_magics.magics.views.status_text import SessionRow

    show_sessions([SessionRow("a", "j", "ns", "mpi", "Running", True)])
    bundle = last_bundle(published)
    assert set(bundle) == {"text/html", "text/plain"}  # no widget model to lose
    assert "a (default)" in bundle["text/html"] and bundle["text/plain"].startswith("ALIAS")


def test_frozen_html_keeps_failed_outputs_and_says_where_the_rest_is() -> None:
    view = MultiPodWidgetView(pods(20), interval=0.0, show=False, where="_trainjob[pod].stdout")
    for i, (pod, _) in enumerate(pods(20)):
        view.write(pod, "stdout", f"only on pod {i}\n")
        view.pod_done(pod, res(3 if i == 19 else 0), None)
    page = view.static_html()
    assert page.count("<details") == MultiPodWidgetView.STATIC_GROUPS
    assert "only on pod 19" in page.split("<details", 2)[1]  # the failed one first, kept
    assert "the output of 12 more pods is not kept here; it is in _trainjob[pod].stdout" in page


def test_frozen_html_of_a_long_multi_pod_cell_says_lines_were_hidden(
    published: list[dict[str, Any]],
) -> None:
    """Each kept group of the frozen output says how many of its lines are not shown, as the
    live tabs and the text fallback do (the buffer's hidden count reaches the static HTML)."""
    view = MultiPodWidgetView(pods(2), max_lines=5, interval=0.0, where="_trainjob[pod].stdout")
    for i, (pod, _) in enumerate(pods(2)):
        view.write(pod, "stdout", "".join(f"pod {i} line {n}\n" for n in range(1, 13 + i)))
        view.pod_done(pod, res(0), None)
    view.finish("2 pods ok")
    page, text = last_bundle(published)["text/html"], last_bundle(published)["text/plain"]
    for hidden in (7, 8):  # 12 and 13 lines, 5 kept
        note = f"[… {hidden} lines hidden; the full output is in _trainjob[pod].stdout]"
        assert note in text
        assert note in page, page
    assert "pod 0 line 7<" not in page and "pod 0 line 8<" in page
    # in each kept group the note heads the box (where the lines start, above the first kept
    # line) and closes the fold (where a reader of a finished cell looks)
    folds = [f.split("</details>", 1)[0] for f in page.split("<details")[1:]]
    assert len(folds) == 2, page
    for fold in folds:
        hidden = 7 if "pod 0 line" in fold else 8
        note = f"[… {hidden} lines hidden; the full output is in _trainjob[pod].stdout]"
        pre = fold.split("<pre", 1)[1].split(">", 1)[1]
        assert pre.startswith('<span class="tjm-note"'), pre[:200]
        assert pre.index(note) < pre.index(f"line {hidden + 1}<"), pre[:300]
        assert fold.endswith(f"{note}</div>"), fold[-300:]


FOUR = [("j-launcher-0-0-a", "launcher-0")] + [(f"j-node-0-{i}-b", f"node-{i}") for i in range(3)]


def test_four_identical_pods_say_each_thing_once(published: list[dict[str, Any]]) -> None:
    """One row names the pods, code and duration; the fold holds the lines only (no footer
    naming one pod of four); the cell's summary heads the rows, in the footers' number format."""
    view = MultiPodWidgetView(FOUR, interval=0.0)
    for pod, _ in FOUR:
        view.write(pod, "stdout", "hello\nworld\n")
    for pod, _ in FOUR:
        view.pod_done(pod, res(0), None)
    view.finish("4 pods ok · 2.00 s")
    page, text = last_bundle(published)["text/html"], last_bundle(published)["text/plain"]
    for shown in (page, text):
        assert shown.count("launcher-0") == 1 and shown.count("identical output") == 1
        assert shown.count("4 pods ok · 2.00 s") == 1 and "(2.00s)" not in shown
        assert shown.count("0.50 s") == 1 and "exit code" not in shown and "j-launcher" not in shown
    assert re.search(r"<summary[^>]*>output</summary>", page)
    assert text.splitlines() == [
        "4 pods ok · 2.00 s",
        "  ✓ 4 pods: identical output (launcher-0, node-0, node-1, node-2) · exit 0 · 0.50 s"
        "  | world",
        "hello",
        "world",
    ]


def test_a_running_multi_pod_cell_shows_its_summary_and_tabs_say_running() -> None:
    view = MultiPodWidgetView(FOUR, interval=0.0, show=False)
    assert view.tabs.titles == tuple(f"{label} · running" for _, label in FOUR)
    for pod, _ in FOUR:
        view.write(pod, "stdout", "step 1\n")
    view.tick()
    overview = view.overview.value
    assert "4 pods · 4 running" in overview and "4 pods: identical output" in overview
    assert "step 1" in overview
    view.pod_done(FOUR[0][0], res(0), None)
    assert view.tabs.titles[0] == "launcher-0 ✓"
    assert "4 pods · 1 ✓ · 3 running" in view.overview.value


def test_pods_without_output_have_a_row_and_no_empty_fold(
    published: list[dict[str, Any]],
) -> None:
    """``--python`` with no output: the row says so; no fold holding only a footer."""
    view = MultiPodWidgetView(FOUR, interval=0.0)
    for pod, _ in FOUR:
        view.pod_done(pod, res(0), None)
    view.finish("4 pods ok · 0.10 s")
    page, text = last_bundle(published)["text/html"], last_bundle(published)["text/plain"]
    assert "<details" not in page and "tjm-footer" not in page
    assert "4 pods: no output (launcher-0, node-0, node-1, node-2)" in page
    assert "identical output" not in page + text
    assert text.splitlines()[0] == "4 pods ok · 0.10 s" and len(text.splitlines()) == 2


def test_logs_folds_start_with_the_pods_not_a_stray_mark(published: list[dict[str, Any]]) -> None:
    view = MultiPodWidgetView(FOUR, interval=0.0, live_summary=False)
    for pod, _ in FOUR[1:]:
        view.write(pod, "stdout", "Server listening\n")
    view.write(FOUR[0][0], "stdout", "launcher log\n")
    view.tick()
    assert view.overview.value == "" and view.tabs.titles[0] == "launcher-0"
    view.finish("logs of 4 pods")
    page = last_bundle(published)["text/html"]
    heads = re.findall(r"<summary[^>]*>([^<]*)</summary>", page)
    assert heads == ["3 pods: identical output (node-0, node-1, node-2)", "launcher-0"], heads


def _opened_folds(page: str) -> list[str]:
    """The titles of the ``<details>`` that start open."""
    folds = re.findall(r"<details([^>]*)><summary[^>]*>([^<]*)</summary>", page)
    return [title for attrs, title in folds if " open" in attrs]


def test_pod_all_opens_only_the_failed_pods_folds(published: list[dict[str, Any]]) -> None:
    """docs/magics.md: each group's output in a fold, failed ones open; short output of pods
    that succeeded stays folded (its row has the last line)."""
    view = MultiPodWidgetView(FOUR, interval=0.0)
    for i, (pod, label) in enumerate(FOUR):
        view.write(pod, "stdout", f"hello from {label}\n")
        view.pod_done(pod, res(3 if i == 2 else 0), None)
    view.finish("", ok=False)
    page = last_bundle(published)["text/html"]
    assert len(re.findall(r"<details", page)) == 4
    assert _opened_folds(page) == ["✗ output of node-1"] and "tjm-pod-failed" in page
    failed = re.search(r"<details[^>]* open[^>]*>.*?</details>", page, re.S)
    assert failed is not None and "hello from node-1" in failed.group(0)

    view = MultiPodWidgetView(FOUR, interval=0.0)  # all succeed: every fold closed
    for pod, label in FOUR:
        view.write(pod, "stdout", f"hello from {label}\n")
        view.pod_done(pod, res(0), None)
    view.finish("4 pods ok · 0.50 s")
    page = last_bundle(published)["text/html"]
    assert len(re.findall(r"<details", page)) == 4 and _opened_folds(page) == []


def test_logs_folds_stay_open_when_short(published: list[dict[str, Any]]) -> None:
    """Logs have no failed pod to open: their short folds open, as asked for."""
    view = MultiPodWidgetView(FOUR, interval=0.0, live_summary=False)
    for pod, label in FOUR:
        view.write(pod, "stdout", f"log of {label}\n")
    view.finish("logs of 4 pods")
    page = last_bundle(published)["text/html"]
    assert len(_opened_folds(page)) == 4


def test_a_frozen_panel_leaves_no_live_widget_pointing_at_a_closed_one(
    published: list[dict[str, Any]],
) -> None:
    """The dropdown's jslink to its Stack is closed with the panel: left alive, it pointed at
    closed models, and reading the state of every live widget (what a saved notebook's widget
    state is) raised AttributeError: 'NoneType' object has no attribute 'comm_id'."""
    from ipywidgets.widgets import widget

    view = MultiPodWidgetView(pods(12), interval=0.0)
    run_pods(view, 12, failing=4)
    view.finish("", ok=False)
    assert view.selector.comm is None and view._link.comm is None
    for live in list(widget._instances.values()):
        live.get_state()  # raises for a widget that points at a closed one
