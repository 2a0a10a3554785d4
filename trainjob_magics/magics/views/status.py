"""Status panel of a session: TrainJob headline, pod table; static HTML kept current.

The panel is HTML + text/plain in a display with a ``display_id``: connect's status callbacks,
``%trainjob_status`` and what cells learn update it through its handle; when the session ends
(closed, interrupted, timed out, preempted, kernel exit) :meth:`StatusWidget.final` shows that
final state with the wall-clock elapsed time. No widget model is involved, so it survives a
notebook saved without widget state.
"""

from __future__ import annotations

import contextlib
import html
import math
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .live import PANEL_MIME, panel_ref
from .status_text import (
    POD_COLUMNS,
    POD_TABLE_LIMIT,
    ended_pods_line,
    format_seconds,
    format_status,
    pod_rows,
    pods_summary,
    protocols_line,
    queue_line,
    runtime_limit,
    shape_lines,
    status_change_line,
    status_message,
)
from .styles import (
    CELL_STYLE,
    COMPACT_STYLE,
    ERROR_WRAP_CSS,
    FAIL_STYLE,
    MUTED_STYLE,
    NOTE_STYLE,
    TABLE_STYLE,
    WARN_STYLE,
    state_badge,
)

# This process's mark on the panels it keeps live (``tjm-k-<mark>``): the kernel after a restart
# or a crash marks the panels of the one before as ended (magics/restarts.py), in the page.
KERNEL_MARK = uuid.uuid4().hex[:12]

# What a live panel turns into, in the page, when the next kernel marks it (``tjm-when-*``
# elements, hidden until then): its sessions were closed at kernel exit, or its kernel is gone
# without closing them.
ENDED_ALTERNATIVES = {
    "closed": (
        "Closed at kernel exit",
        "The kernel restarted: its sessions were closed at kernel exit.",
    ),
    "gone": (
        "Kernel gone",
        "The kernel stopped without closing its sessions: list them with "
        "%trainjob_sessions --all and close them with %trainjob_close NAME.",
    ),
}
# What the next kernel's line quotes of them (restarts.ended_bundle): words each such panel
# shows, in its ended form and, for a closed job, in the lab extension's live line above it
# ("Gone: closed at kernel exit at ...", the sessions API's reason: inventory/records.py).
ENDED_QUOTES = {"closed": "closed at kernel exit", "gone": "Kernel gone"}


def _ended_alternatives() -> tuple[str, str]:
    """The hidden badges (for the headline) and notes (below it) of a live panel."""
    badges = notes = ""
    for kind, (state, note) in ENDED_ALTERNATIVES.items():
        badges += f'<span class="tjm-when-{kind}" style="display:none">{state_badge(state)}</span>'
        notes += (
            f'<div class="tjm-when-{kind} tjm-note" style="display:none;{MUTED_STYLE}">'
            f"{html.escape(note)}</div>"
        )
    return badges, notes


def format_duration(seconds: float) -> str:
    """``2.1 s`` under a minute, else as the headline's elapsed time (``3m 05s``)."""
    return f"{seconds:.1f} s" if seconds < 60 else format_seconds(seconds)


PUSH_INTERVAL = 0.25  # seconds between two updates of the connect panel's display, at least
COMPACT_CELL = CELL_STYLE + ";padding-top:0;padding-bottom:0;line-height:1.35"


# The long columns wrap, inside a name where needed, so the table fits a narrow window (800 px)
# instead of scrolling sideways; the short ones stay on one line. ``word-break:break-all`` is
# what JupyterLab's sanitizer keeps in an untrusted notebook; ``overflow-wrap:anywhere`` breaks
# only where needed where it applies. Both let the table shrink below its names' length.
WRAP_COLUMNS = ("NAME", "NODE", "WAITING")
# (no ``word-break:break-all``: it cut every name and node mid-word once a column wrapped;
# the names' hyphens are where they break)
WRAP_CELL = COMPACT_CELL + ";white-space:normal;overflow-wrap:anywhere"


def _cell_styles() -> list[str]:
    return [WRAP_CELL if c in WRAP_COLUMNS else COMPACT_CELL for c in POD_COLUMNS]


def _pod_table(pods: list[Any], now: datetime | None, fold: str = "") -> str:
    """The pod table; folded under one line beyond ``POD_TABLE_LIMIT`` pods or under
    ``fold`` (the session ended: the phases are the last ones seen)."""
    e = html.escape
    styles = _cell_styles()
    th = "".join(f'<th style="{COMPACT_CELL}">{c.title()}</th>' for c in POD_COLUMNS)
    rows = []
    for row in pod_rows(pods, now):
        cells = "".join(  # data-label: a narrow page shows each row as a card (base.css)
            f'<td style="{st}" data-label="{e(col.title())}">{e(c)}</td>'
            for st, col, c in zip(styles, POD_COLUMNS, row, strict=True)
        )
        rows.append(f"<tr>{cells}</tr>")
    table = (  # fits the width (WRAP_COLUMNS); scrolls only where even that cannot
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
    live: bool = False,
) -> str:
    """Headline (TrainJob, namespace, runtime, state, elapsed, max runtime), message, Kueue
    line and pod table as compact HTML. ``state`` replaces the job's state (a final state);
    ``note`` is one more line (what was deleted, how the session ended); ``live``: the panel
    is kept current, so it carries the ended forms the next kernel may show (hidden)."""
    el = status.elapsed if elapsed is None else elapsed
    e = html.escape
    shown = state or status.state
    limit = runtime_limit(shown, el, max_runtime)
    limit_html = f' · <span class="tjm-limit">{e(limit)}</span>' if limit else ""
    badge = state_badge(shown)
    ended_badges, ended_notes = _ended_alternatives() if live else ("", "")
    if live:
        badge = f'<span class="tjm-when-live">{badge}</span>{ended_badges}'
    head = (
        f'<div class="tjm-status-head"><b>TrainJob {e(status.name)}</b> · namespace '
        f"{e(status.namespace)} · runtime {e(status.runtime or '-')} · {badge}"
        f' · <span class="tjm-elapsed">elapsed {format_seconds(el)}</span>{limit_html}</div>'
    )
    msg = ended_notes
    message = "" if state else status_message(status)  # e.g. "... is running": no longer true
    when_live = " tjm-when-live" if live else ""  # no longer true once the next kernel marks it
    if message:
        msg += f'<div class="tjm-message{when_live}" style="{MUTED_STYLE}">{e(message)}</div>'
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
    for line in shape_lines(getattr(status, "shape", None)):
        msg += f'<div class="tjm-shape" style="{MUTED_STYLE}">{e(line)}</div>'
    protocols = protocols_line(status)
    if protocols:
        msg += f'<div class="tjm-protocols" style="{MUTED_STYLE}">{e(protocols)}</div>'
    if note:
        msg += f'<div class="tjm-note{when_live}" style="{MUTED_STYLE}">{e(note)}</div>'
    pods = list(status.pods or [])
    if state and pods:  # the session ended: the pods as last seen, folded and said so
        body = _pod_table(pods, now, fold=ended_pods_line(pods))
    elif pods:
        body = _pod_table(pods, now)
    else:
        body = f'<div style="{NOTE_STYLE}">(no pods yet)</div>'
    return f'<div class="tjm-status" style="{COMPACT_STYLE}">{head}{msg}{body}</div>'


class StatusWidget:
    """A session's status panel: static HTML (+ ``text/plain``) in one display with a
    ``display_id``, kept current through that display handle.

    It needs no widget model, so a notebook saved without widget state shows the panel as it
    was last updated, in JupyterLab, Notebook 7, VS Code, nbviewer and GitHub. ``update`` may be
    called from any thread (e.g. ``connect(on_status=...)``). With ``interval`` (the
    connect's wait) pushes to the display are throttled to one per ``interval`` seconds, the
    last one sent later, by a timer, or by :meth:`settle`. ``refresh`` (or
    ``%trainjob_status``) fetches a new status. ``max_runtime``: the session's
    ``--max-runtime`` in seconds (shown with the time left).
    """

    def __init__(
        self,
        status: Any = None,
        refresh: Callable[[], Any] | None = None,
        show: bool = True,
        clock: Callable[[], float] = time.monotonic,
        max_runtime: float | None = None,
        interval: float = 0.0,
    ) -> None:
        self.clock = clock
        self.status = status
        self.max_runtime = max_runtime
        self.interval = interval
        self.note = ""
        self.error = ""  # why the last refresh failed, one line
        self.final_state = ""
        self.seen: tuple[str, float] | None = None  # ("Ready after 2.1 s", clock then)
        self.html = ""  # the panel's HTML as last rendered
        self.pushes = 0  # updates sent to the display
        self._refresh = refresh
        self._base: tuple[float, float] | None = None  # (status.elapsed, clock at update)
        self._lock = threading.RLock()
        self._last_push = -math.inf
        self._timer: threading.Timer | None = None
        self.handle: Any = None
        self.uid = ""  # the TrainJob's uid, when known (the live panel's key with its name)
        self.holds = ""  # what the job holds (%trainjob_status), while the job is as then
        self._holds_state = ""
        if status is not None:
            self._set(status)
        if show:
            self.show()

    def set_holds(self, holds: str) -> None:
        """``holds 2 CPU · held 7 s (<0.1 CPU-h) · idle 3 s`` under the pod table, as read now:
        shown while the job's state stays the one it was read in, never once it ended. The lab
        extension hides it under its live line, which says it, live (``tjm-holds``)."""
        with self._lock:
            self.holds = holds
            self._holds_state = self.status.state if self.status is not None else ""
            self._render(elapsed=self.elapsed() if self._base is not None else None)

    def _holds_now(self) -> str:
        """The holding line, while still true."""
        if self.final_state or self.status is None or self.status.state != self._holds_state:
            return ""
        return self.holds

    def show(self) -> None:
        """Display the panel (once), with a display id its updates go through."""
        from IPython.display import display

        self.handle = display(self.bundle(), raw=True, display_id=True)

    # ------------------------------------------------------------ rendering

    def _render(self, elapsed: float | None = None) -> None:
        with self._lock:
            if self.status is None:
                self.html = ""
                return
            self.html = render_status_html(
                self.status,
                elapsed=elapsed,
                max_runtime=self.max_runtime,
                state=self.final_state,
                note=self.note,
                live=not self.final_state,
            )
            holds = self._holds_now()
            if holds:
                self.html += (  # no longer true once the next kernel marks the panel ended
                    f'<div class="tjm-holds tjm-when-live" style="{MUTED_STYLE}">'
                    f"{html.escape(holds)}</div>"
                )
            if self.error:
                self.html += (
                    f'<div class="tjm-refresh-error" style="{FAIL_STYLE}">'
                    f"{html.escape(self.error)}</div>"
                )

    def bundle(self) -> dict[str, Any]:
        """What the display shows: the panel's HTML and its plain-text twin."""
        with self._lock:
            inner = self.html or f'<div style="{NOTE_STYLE}">{html.escape(self.text())}</div>'
            if not self.final_state:  # live: marked with this kernel (magics/restarts.py)
                inner = f'<div class="tjm-live tjm-k-{KERNEL_MARK}">{inner}</div>'
            bundle: dict[str, Any] = {
                "text/html": f'<div class="trainjob-status">{inner}</div>{ERROR_WRAP_CSS}',
                "text/plain": self.text(),
            }
            if self.status is not None:  # the lab extension renders it live (views/live.py)
                bundle[PANEL_MIME] = panel_ref(
                    "status", self.status.name, self.status.namespace, self.uid
                )
            return bundle

    def _push(self, now: bool = False) -> None:
        """Send the panel to its display: at once when ``now``, else at most once per
        ``interval`` (a later push is scheduled, so the last state is never lost)."""
        if self.handle is None:
            return
        with self._lock:
            wait = self.interval - (time.monotonic() - self._last_push)
            if not now and wait > 0:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._scheduled)
                    self._timer.daemon = True
                    self._timer.start()
                return
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._last_push = time.monotonic()
            bundle = self.bundle()
            self.pushes += 1
            with contextlib.suppress(Exception):  # a display that is gone loses the update only
                self.handle.update(bundle, raw=True)

    def _scheduled(self) -> None:
        with self._lock:
            self._timer = None
        self._push(now=True)

    # ------------------------------------------------------------ changes

    def _set(self, status: Any) -> None:
        with self._lock:
            self.status = status
            # kept once known: the status of a deleted job has none
            self.uid = self.uid or str(getattr(status, "uid", "") or "")
            self._base = (float(status.elapsed), self.clock())
            self._render()

    def set_refresh(self, refresh: Callable[[], Any] | None) -> None:
        """What :meth:`refresh` calls to fetch a new status."""
        self._refresh = refresh

    def update(self, status: Any, now: bool = False) -> None:
        """Show a new status snapshot (ignored once the panel shows a final state); ``now``:
        sent at once, not throttled."""
        if self.final_state:
            return
        self._set(status)
        self._push(now)

    def elapsed(self) -> float:
        """Elapsed seconds, ticking between snapshots."""
        if self._base is None:
            return 0.0
        return self._base[0] + (self.clock() - self._base[1])

    def tick(self) -> None:
        """Advance the elapsed time shown (called while waiting)."""
        if self.status is not None and not self.final_state:
            self._render(elapsed=self.elapsed())
            self._push()

    def set_note(self, note: str) -> None:
        """One more line under the headline (e.g. that the session is ready)."""
        self.note = note
        self.settle()

    def freeze(self) -> None:
        """Kept for callers of the earlier API: :meth:`settle`."""
        self.settle()

    def settle(self) -> None:
        """The wait is over: show the elapsed time now, at once."""
        if self.status is not None:
            self._render(elapsed=self.elapsed())
        self._push(now=True)

    def mark_seen(self, what: str) -> None:
        """What the panel saw before the session ended ("Ready after 2.1 s", "Running when
        shown"), kept in its final note with the time since: its history."""
        if self.seen is None:
            self.seen = (what, self.clock())

    def history(self, cause: str = "") -> str:
        """``Ready after 2.1 s · deleted by %trainjob_close 8 s later`` (or its first part)."""
        if self.seen is None:
            return cause
        what, since = self.seen
        if not cause:
            return what
        return f"{what} · {cause} {format_duration(self.clock() - since)} later"

    def final(self, state: str, note: str = "", cause: str = "") -> None:
        """The session ended: show ``state`` ("Deleted", "Interrupted", "Timed out", "Closed at
        kernel exit", "Preempted", ...) with the wall-clock elapsed time, and the history (what
        the panel saw, then ``cause`` and when); later updates are ignored."""
        with self._lock:
            if self.final_state:
                return
            elapsed = self.elapsed()
            self.final_state = state
            told = [part for part in (self.history(cause), note) if part]
            if told:
                self.note = " · ".join(told)
            self._refresh = None
            self.error = ""
            if self.status is not None:
                self._base = (elapsed, self.clock())
                self._render(elapsed=elapsed)
            else:
                line = f"{state}" + (f": {self.note}" if self.note else "")
                self.html = (
                    f'<div class="tjm-status" style="{COMPACT_STYLE}">'
                    f"{state_badge(state)} {html.escape(line)}</div>"
                )
        self._push(now=True)

    def text(self) -> str:
        """The status as plain text."""
        if self.status is None:
            if self.final_state:
                return self.final_state + (f": {self.note}" if self.note else "")
            return "(no status yet)"
        text = format_status(
            self.status,
            elapsed=self.elapsed() if self._base is not None else None,
            max_runtime=self.max_runtime,
            state=self.final_state,
            note=self.note,
        )
        holds = self._holds_now()
        return f"{text}\n{holds}" if holds else text

    def refresh(self) -> None:
        """Fetch and show the current status; an error is shown in one line below."""
        if self._refresh is None or self.final_state:
            return
        try:
            status = self._refresh()
            self.error = ""
            self._set(status)
        except Exception as exc:  # shown in the panel, never raised
            self.error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            self._render(elapsed=self.elapsed())
        self._push(now=True)


class ConnectStatusView:
    """Status while connecting: the status panel (kept current), or one text line per change."""

    LINE_EVERY = 1.0  # text: seconds between two lines of the same state, at least

    def __init__(
        self,
        widgets: bool,
        max_runtime: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.widget_view: Any = None
        self._widgets = widgets
        self.max_runtime = max_runtime
        self.clock = clock
        self._last_line = ""  # the last line printed, and its state and time
        self._last_state = ""
        self._last_print = -math.inf
        self._pending: tuple[str, str] | None = None  # a change held back: (line, state)
        self._last_tick = 0.0

    @property
    def widgets(self) -> bool:
        """True when the status is a panel (then the connect cell prints nothing more)."""
        return self._widgets

    def _widget(self, status: Any) -> Any:
        if self.widget_view is None:
            self.widget_view = StatusWidget(
                status, max_runtime=self.max_runtime, interval=PUSH_INTERVAL
            )
        return self.widget_view

    def update(self, status: Any) -> None:
        """Show a status observed while waiting."""
        if self._widgets:
            self._widget(status).update(status)
            return
        line = status_change_line(status)
        if line.split("] ", 1)[-1] == self._last_line.split("] ", 1)[-1]:
            self._pending = None  # says what was printed last
        elif status.state != self._last_state or self._since_print() >= self.LINE_EVERY:
            self._print(line, status.state)
        else:  # the same state within a second: printed at the next tick if still news
            self._pending = (line, status.state)

    def _since_print(self) -> float:
        return self.clock() - self._last_print

    def _print(self, line: str, state: str) -> None:
        print(line, flush=True)
        self._last_line, self._last_state = line, state
        self._last_print = self.clock()
        self._pending = None

    def tick(self) -> None:
        """Advance the panel's elapsed time once a second; text: print a change held back."""
        if self._pending is not None and self._since_print() >= self.LINE_EVERY:
            self._print(*self._pending)
        now = time.monotonic()
        if self.widget_view is not None and now - self._last_tick >= 1.0:
            self._last_tick = now
            self.widget_view.tick()

    def finish(self, status: Any, refresh: Callable[[], Any] | None = None, note: str = "") -> None:
        """Connected: the panel shows the status now (and ``note``), sent at once, and stays
        current through its display handle (``%trainjob_status``, cells, close); or the text
        table is printed."""
        if self._widgets:
            if status is not None:
                self._widget(status).update(status)
            if self.widget_view is not None:
                if refresh is not None:
                    self.widget_view.set_refresh(refresh)
                self.widget_view.mark_seen(
                    f"Ready after {format_duration(self.widget_view.elapsed())}"
                )
                if note:
                    self.widget_view.set_note(note)
                else:
                    self.widget_view.settle()
        elif status is not None:
            print(format_status(status, max_runtime=self.max_runtime), flush=True)

    def final(self, state: str, note: str = "", cause: str = "") -> None:
        """The connect did not give a session (interrupted, timed out, failed): the panel
        shows ``state``; in text mode a change held back is printed first (why it waited),
        and the error line says the rest."""
        if self._pending is not None:
            self._print(*self._pending)
        if self._widgets and self.widget_view is not None:
            self.widget_view.final(state, note, cause)
