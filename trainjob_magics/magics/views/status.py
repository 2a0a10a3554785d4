"""Live status widget of a session: TrainJob headline, pod table, refresh button."""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .status_text import (
    POD_COLUMNS,
    format_seconds,
    format_status,
    pod_rows,
    queue_line,
    status_change_line,
)
from .styles import CELL_STYLE, TABLE_STYLE, state_badge


def render_status_html(
    status: Any, elapsed: float | None = None, now: datetime | None = None
) -> str:
    """Headline (TrainJob, namespace, runtime, state, elapsed), message and pod table as HTML."""
    el = status.elapsed if elapsed is None else elapsed
    e = html.escape
    head = (
        f'<div class="tjm-status-head"><b>TrainJob {e(status.name)}</b> · namespace '
        f"{e(status.namespace)} · runtime {e(status.runtime or '-')} · {state_badge(status.state)}"
        f' · <span class="tjm-elapsed">elapsed {format_seconds(el)}</span></div>'
    )
    msg = (
        f'<div class="tjm-message" style="color:#555">{e(status.message)}</div>'
        if status.message
        else ""
    )
    kueue = queue_line(status)
    if kueue:
        msg += f'<div class="tjm-queue" style="color:#555">{e(kueue)}</div>'
    if getattr(status, "problem", ""):
        msg += f'<div class="tjm-problem" style="color:#a66300">Waiting: {e(status.problem)}</div>'
    if getattr(status, "disruption", ""):
        msg += (
            '<div class="tjm-disruption" style="color:#a66300">'
            f"Last disruption: {e(status.disruption)}</div>"
        )
    pods = list(status.pods or [])
    if not pods:
        return (
            f'<div class="tjm-status">{head}{msg}<div style="color:#777">(no pods yet)</div></div>'
        )
    th = "".join(f'<th style="{CELL_STYLE}">{c.title()}</th>' for c in POD_COLUMNS)
    rows = []
    for row in pod_rows(pods, now):
        cells = "".join(f'<td style="{CELL_STYLE}">{e(c)}</td>' for c in row)
        rows.append(f"<tr>{cells}</tr>")
    tbl = (
        f'<table class="tjm-pods" style="{TABLE_STYLE}"><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return f'<div class="tjm-status">{head}{msg}{tbl}</div>'


class StatusWidget:
    """Shows a ``JobStatus`` live; the refresh button (when given ``refresh``) fetches a new one."""

    def __init__(
        self,
        status: Any = None,
        refresh: Callable[[], Any] | None = None,
        show: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import ipywidgets as w

        self.clock = clock
        self.status = status
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
        self.button.layout.display = "" if refresh else "none"

    def update(self, status: Any) -> None:
        """Show a new status snapshot."""
        self.status = status
        self._base = (float(status.elapsed), self.clock())
        self.html.value = render_status_html(status)

    def elapsed(self) -> float:
        """Elapsed seconds, ticking between snapshots."""
        if self._base is None:
            return 0.0
        return self._base[0] + (self.clock() - self._base[1])

    def tick(self) -> None:
        """Advance the elapsed time shown (called while waiting)."""
        if self.status is not None:
            self.html.value = render_status_html(self.status, elapsed=self.elapsed())

    def freeze(self) -> None:
        """Stop the elapsed clock at the last snapshot and update the text fallback."""
        if self.status is not None:
            self.html.value = render_status_html(self.status)
        if self.display is not None:
            self.display.update_text(self.text())

    def text(self) -> str:
        """The status as plain text."""
        return format_status(self.status) if self.status is not None else "(no status yet)"

    def refresh(self) -> None:
        """Fetch and show the current status; errors are shown in one line below."""
        if self._refresh is None:
            return
        try:
            self.update(self._refresh())
            self.error.value = ""
        except Exception as exc:  # shown in the widget, never raised into the comm handler
            self.error.value = (
                f'<span style="color:#b3261e">{html.escape(type(exc).__name__)}: '
                f"{html.escape(str(exc))}</span>"
            )


class ConnectStatusView:
    """Status while connecting: a live widget, or one text line per change."""

    def __init__(self, widgets: bool) -> None:
        self.widget_view: Any = None
        self._widgets = widgets
        self._last_line = ""
        self._last_tick = 0.0

    def _widget(self, status: Any) -> Any:
        if self.widget_view is None:
            self.widget_view = StatusWidget(status)
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

    def finish(self, status: Any, refresh: Callable[[], Any] | None = None) -> None:
        """Final state: the widget frozen with a Refresh button, or the text table."""
        if self._widgets:
            if status is not None:
                self._widget(status).update(status)
            if self.widget_view is not None:
                if refresh is not None:
                    self.widget_view.set_refresh(refresh)
                self.widget_view.freeze()
        elif status is not None:
            print(format_status(status), flush=True)
