"""Live status widget of a session: TrainJob headline, pod table, refresh button.

The panel stays live (Refresh) while its session lives; when the session ends (closed,
interrupted, timed out, kernel exit) :meth:`StatusWidget.final` shows that final state with
the wall-clock elapsed time and turns the display into static HTML.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .status_text import (
    POD_COLUMNS,
    POD_TABLE_LIMIT,
    ended_pods_line,
    format_seconds,
    format_status,
    pod_rows,
    pods_summary,
    queue_line,
    runtime_limit,
    status_change_line,
    status_message,
)
from .styles import (
    CELL_STYLE,
    COMPACT_STYLE,
    FAIL_STYLE,
    MUTED_STYLE,
    NOTE_STYLE,
    TABLE_STYLE,
    WARN_STYLE,
    state_badge,
)

COMPACT_CELL = CELL_STYLE + ";padding-top:0;padding-bottom:0;line-height:1.35"


def _pod_table(pods: list[Any], now: datetime | None, fold: str = "") -> str:
    """The pod table; folded under one line beyond ``POD_TABLE_LIMIT`` pods or under
    ``fold`` (the session ended: the phases are the last ones seen)."""
    e = html.escape
    th = "".join(f'<th style="{COMPACT_CELL}">{c.title()}</th>' for c in POD_COLUMNS)
    rows = []
    for row in pod_rows(pods, now):
        cells = "".join(f'<td style="{COMPACT_CELL}">{e(c)}</td>' for c in row)
        rows.append(f"<tr>{cells}</tr>")
    table = (  # scrolls sideways in a narrow window instead of being cut off
        f'<div class="tjm-pods-scroll" style="overflow-x:auto;max-width:100%">'
        f'<table class="tjm-pods" style="{TABLE_STYLE}"><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
    if not fold and len(pods) <= POD_TABLE_LIMIT:
        return table
    line = fold or pods_summary(pods)  # one line, the table on demand
    style = NOTE_STYLE if fold else ""
    return (
        f'<details class="tjm-pods-fold"><summary class="tjm-pods-summary" '
        f'style="cursor:pointer;{style}">{e(line)}</summary>{table}</details>'
    )


def render_status_html(
    status: Any,
    elapsed: float | None = None,
    now: datetime | None = None,
    max_runtime: float | None = None,
    state: str = "",
    note: str = "",
) -> str:
    """Headline (TrainJob, namespace, runtime, state, elapsed, max runtime), message, Kueue
    line and pod table as compact HTML. ``state`` replaces the job's state (a final state);
    ``note`` is one more line (what was deleted, how the session ended)."""
    el = status.elapsed if elapsed is None else elapsed
    e = html.escape
    shown = state or status.state
    limit = runtime_limit(shown, el, max_runtime)
    limit_html = f' · <span class="tjm-limit">{e(limit)}</span>' if limit else ""
    head = (
        f'<div class="tjm-status-head"><b>TrainJob {e(status.name)}</b> · namespace '
        f"{e(status.namespace)} · runtime {e(status.runtime or '-')} · {state_badge(shown)}"
        f' · <span class="tjm-elapsed">elapsed {format_seconds(el)}</span>{limit_html}</div>'
    )
    msg = ""
    message = "" if state else status_message(status)  # e.g. "... is running": no longer true
    if message:
        msg += f'<div class="tjm-message" style="{MUTED_STYLE}">{e(message)}</div>'
    kueue = queue_line(status)
    if kueue:
        msg += f'<div class="tjm-queue" style="{MUTED_STYLE}">{e(kueue)}</div>'
    if getattr(status, "problem", "") and not state:
        msg += f'<div class="tjm-problem" style="{WARN_STYLE}">Waiting: {e(status.problem)}</div>'
    if getattr(status, "disruption", ""):
        msg += (
            f'<div class="tjm-disruption" style="{WARN_STYLE}">'
            f"Last disruption: {e(status.disruption)}</div>"
        )
    if note:
        msg += f'<div class="tjm-note" style="{MUTED_STYLE}">{e(note)}</div>'
    pods = list(status.pods or [])
    if state and pods:  # the session ended: the pods as last seen, folded and said so
        body = _pod_table(pods, now, fold=ended_pods_line(pods))
    elif pods:
        body = _pod_table(pods, now)
    else:
        body = f'<div style="{NOTE_STYLE}">(no pods yet)</div>'
    return f'<div class="tjm-status" style="{COMPACT_STYLE}">{head}{msg}{body}</div>'


class StatusWidget:
    """Shows a ``JobStatus`` live; the refresh button (when given ``refresh``) fetches a new one.

    ``max_runtime``: the session's ``--max-runtime`` in seconds (shown with the time left).
    """

    def __init__(
        self,
        status: Any = None,
        refresh: Callable[[], Any] | None = None,
        show: bool = True,
        clock: Callable[[], float] = time.monotonic,
        max_runtime: float | None = None,
    ) -> None:
        import ipywidgets as w

        self.clock = clock
        self.status = status
        self.max_runtime = max_runtime
        self.note = ""
        self.final_state = ""
        self._refresh = refresh
        self._base: tuple[float, float] | None = None  # (status.elapsed, clock at update)
        self.html = w.HTML(value="")
        self.error = w.HTML(value="")
        self.button = w.Button(description="Refresh", icon="refresh", tooltip="Fetch the status")
        self.button.layout.display = "" if refresh else "none"
        self.button.on_click(lambda _b: self.refresh())
        self.widget = w.VBox([self.html, self.button, self.error])
        self.widget.add_class("trainjob-status")
        self.display: Any = None
        if status is not None:
            self.update(status)
        if show:
            from .frontend import WidgetDisplay

            self.display = WidgetDisplay(self.widget, self.text())

    def set_refresh(self, refresh: Callable[[], Any] | None) -> None:
        """Enable (or hide) the refresh button."""
        self._refresh = refresh
        self.button.layout.display = "" if refresh and not self.final_state else "none"

    def _render(self, elapsed: float | None = None) -> str:
        return render_status_html(
            self.status,
            elapsed=elapsed,
            max_runtime=self.max_runtime,
            state=self.final_state,
            note=self.note,
        )

    def update(self, status: Any) -> None:
        """Show a new status snapshot (ignored once the panel shows a final state)."""
        if self.final_state:
            return
        self.status = status
        self._base = (float(status.elapsed), self.clock())
        self.html.value = self._render()

    def elapsed(self) -> float:
        """Elapsed seconds, ticking between snapshots."""
        if self._base is None:
            return 0.0
        return self._base[0] + (self.clock() - self._base[1])

    def tick(self) -> None:
        """Advance the elapsed time shown (called while waiting)."""
        if self.status is not None and not self.final_state:
            self.html.value = self._render(elapsed=self.elapsed())

    def set_note(self, note: str) -> None:
        """One more line under the headline (e.g. that the session is ready)."""
        self.note = note
        if self.status is not None:
            self.html.value = self._render(elapsed=self.elapsed())
        self.settle()

    def freeze(self) -> None:
        """Kept for callers of the earlier API: :meth:`settle`."""
        self.settle()

    def settle(self) -> None:
        """The wait is over: show the elapsed time now and update the text fallback; the panel
        stays live (Refresh) while its session lives."""
        if self.status is not None:
            self.html.value = self._render(elapsed=self.elapsed())
        if self.display is not None:
            self.display.update_text(self.text())

    def final(self, state: str, note: str = "") -> None:
        """The session ended: show ``state`` ("Deleted", "Interrupted", "Timed out", "Closed at
        kernel exit") with the wall-clock elapsed time, and turn the display static."""
        if self.final_state:
            return
        elapsed = self.elapsed()
        self.final_state = state
        if note:
            self.note = note
        self._refresh = None
        self.button.layout.display = "none"
        if self.status is not None:
            self._base = (elapsed, self.clock())
            self.html.value = self._render(elapsed=elapsed)
        else:
            line = f"{state}" + (f": {self.note}" if self.note else "")
            self.html.value = (
                f'<div class="tjm-status" style="{COMPACT_STYLE}">'
                f"{state_badge(state)} {html.escape(line)}</div>"
            )
        if self.display is not None:
            self.display.freeze(
                f'<div class="trainjob-status">{self.html.value}</div>', self.text()
            )

    def text(self) -> str:
        """The status as plain text."""
        if self.status is None:
            if self.final_state:
                return self.final_state + (f": {self.note}" if self.note else "")
            return "(no status yet)"
        return format_status(
            self.status,
            elapsed=self.elapsed() if self._base is not None else None,
            max_runtime=self.max_runtime,
            state=self.final_state,
            note=self.note,
        )

    def refresh(self) -> None:
        """Fetch and show the current status; errors are shown in one line below."""
        if self._refresh is None or self.final_state:
            return
        try:
            self.update(self._refresh())
            self.error.value = ""
        except Exception as exc:  # shown in the widget, never raised into the comm handler
            self.error.value = (
                f'<span style="{FAIL_STYLE}">{html.escape(type(exc).__name__)}: '
                f"{html.escape(str(exc))}</span>"
            )


class ConnectStatusView:
    """Status while connecting: a live widget, or one text line per change."""

    def __init__(self, widgets: bool, max_runtime: float | None = None) -> None:
        self.widget_view: Any = None
        self._widgets = widgets
        self.max_runtime = max_runtime
        self._last_line = ""
        self._last_tick = 0.0

    @property
    def widgets(self) -> bool:
        """True when the status is a widget (then the connect cell prints nothing more)."""
        return self._widgets

    def _widget(self, status: Any) -> Any:
        if self.widget_view is None:
            self.widget_view = StatusWidget(status, max_runtime=self.max_runtime)
        return self.widget_view

    def update(self, status: Any) -> None:
        """Show a status observed while waiting."""
        if self._widgets:
            self._widget(status).update(status)
            return
        line = status_change_line(status)
        if line.split("] ", 1)[-1] != self._last_line.split("] ", 1)[-1]:
            print(line, flush=True)
        self._last_line = line

    def tick(self) -> None:
        """Advance the widget's elapsed time once a second."""
        now = time.monotonic()
        if self.widget_view is not None and now - self._last_tick >= 1.0:
            self._last_tick = now
            self.widget_view.tick()

    def finish(self, status: Any, refresh: Callable[[], Any] | None = None, note: str = "") -> None:
        """Connected: the widget stays live with a Refresh button (and ``note``), or the text
        table is printed."""
        if self._widgets:
            if status is not None:
                self._widget(status).update(status)
            if self.widget_view is not None:
                if refresh is not None:
                    self.widget_view.set_refresh(refresh)
                if note:
                    self.widget_view.set_note(note)
                else:
                    self.widget_view.settle()
        elif status is not None:
            print(format_status(status, max_runtime=self.max_runtime), flush=True)

    def final(self, state: str, note: str = "") -> None:
        """The connect did not give a session (interrupted, timed out, failed): the widget
        shows ``state`` and turns static; in text mode the error line says it."""
        if self._widgets and self.widget_view is not None:
            self.widget_view.final(state, note)
