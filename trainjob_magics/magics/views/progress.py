"""Progress of a file transfer: a bar widget or text lines, shown once the transfer is large.

A copy to several pods sends the same bytes to each: the line says the size per pod x pods
and the rate, and the finished bar turns into static HTML (it survives the kernel).
"""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from .styles import BAR_FILL_FAILED, BAR_FILL_OK, BAR_TRACK_STYLE, COMPACT_STYLE
from .text import Throttle


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def human_rate(nbytes: float, seconds: float) -> str:
    """``85.3 MiB/s`` (empty when no time has passed)."""
    return f"{human_size(nbytes / seconds)}/s" if seconds > 0 else ""


def transfer_line(result: Any, copies: int | None = None) -> str:
    """One line for a finished copy: what, the size x pods, the time, the rate, the check.

    ``copied data -> data (2 files, 200.0 MiB) on 4 pods (200.0 MiB x 4 = 800.0 MiB sent) in
    2.35 s, 340.4 MiB/s; verified by sha256``
    """
    if result.errors:
        return result.summary()
    pods = list(result.pods)
    n = copies or len(pods) or 1
    where = ", ".join(pods) if len(pods) <= 3 else f"{len(pods)} pods"
    size = human_size(result.bytes)
    what = f"{result.files} file{'s' if result.files != 1 else ''}, {size}"
    sent = f" ({size} x {n} = {human_size(result.bytes * n)} sent)" if n > 1 else ""
    if len(pods) > 1 and len(pods) <= 3:
        where = f"{len(pods)} pods ({where})"
    rate = human_rate(result.bytes * n, result.duration)
    return (
        f"copied {result.source} -> {result.destination} ({what}) on {where}{sent} in "
        f"{result.duration:.2f} s{', ' + rate if rate else ''}; verified by {result.verified}"
    )


class ProgressView:
    """Progress of a transfer, shown once it is at least ``threshold`` bytes.

    ``copies``: how many pods receive the bytes (``total`` counts every copy).
    """

    def __init__(
        self,
        label: str,
        widgets: bool,
        threshold: int = 4 << 20,
        interval: float = 0.25,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        copies: int = 1,
    ) -> None:
        self.label = label
        self.widgets = widgets
        self.threshold = threshold
        self.throttle = Throttle(interval, clock)
        self.clock = clock
        self.stream = stream
        self.copies = max(1, copies)
        self.bar: Any = None
        self.text_widget: Any = None
        self.display: Any = None
        self.shown = False
        self.done = 0
        self.total = 0
        self._started: float | None = None
        self._printed = ""

    def update(self, done: int, total: int) -> None:
        """Record progress; redraw when the throttle allows (always at 100%)."""
        if self._started is None:
            self._started = self.clock()
        self.done, self.total = done, total
        if total < self.threshold:
            return
        if done >= total or self.throttle.ready():
            self._draw()

    def line(self) -> str:
        """``Uploading: 45.0% (90.0 MiB of 200.0 MiB x 4 pods) · 85.3 MiB/s``."""
        pct = 100.0 * self.done / self.total if self.total else 100.0
        if self.copies > 1:
            each = self.total / self.copies
            amount = f"{human_size(self.done / self.copies)} of {human_size(each)} x "
            amount += f"{self.copies} pods"
        else:
            amount = f"{human_size(self.done)} of {human_size(self.total)}"
        elapsed = self.clock() - self._started if self._started is not None else 0.0
        rate = human_rate(self.done, elapsed)
        return f"{self.label}: {pct:5.1f}% ({amount})" + (f" · {rate}" if rate else "")

    def _draw(self) -> None:
        if self.widgets:
            if self.bar is None:
                import ipywidgets as w

                from .frontend import WidgetDisplay

                self.bar = w.IntProgress(value=0, min=0, max=1000, description="")
                self.text_widget = w.HTML(value="")
                box = w.HBox([self.bar, self.text_widget])
                box.add_class("trainjob-progress")
                self.display = WidgetDisplay(box, self.line())
            self.bar.value = int(1000 * self.done / self.total) if self.total else 1000
            self.text_widget.value = html.escape(self.line())
        else:
            s = self.stream or sys.stdout
            line = self.line()
            s.write("\r" + line.ljust(len(self._printed)))
            s.flush()
            self._printed = line
        self.shown = True

    def static_html(self, ok: bool) -> str:
        """The finished bar as HTML that needs no kernel."""
        pct = 100.0 * self.done / self.total if self.total else 100.0
        fill = BAR_FILL_OK if ok else BAR_FILL_FAILED
        return (
            f'<div class="trainjob-progress" style="{COMPACT_STYLE}">'
            f'<span style="{BAR_TRACK_STYLE}"><span style="display:block;height:100%;'
            f'width:{pct:.1f}%;{fill}"></span></span>{html.escape(self.line())}</div>'
        )

    def note(self, line: str) -> None:
        """A line of its own (a retry of the transfer), below the bar, which goes on."""
        s = self.stream or sys.stdout
        if not self.widgets and self._printed:  # the text bar's line is open: end it first
            s.write("\r" + line.ljust(len(self._printed)) + "\n")
            self._printed = ""
        else:
            s.write(line + "\n")
        s.flush()

    def finish(self, ok: bool = True) -> None:
        """Last state: the bar frozen (in the failure colour when ``ok`` is false), or a
        newline after the text line."""
        if not self.shown:
            return
        if self.widgets and self.bar is not None:
            self.bar.bar_style = "success" if ok else "danger"
            if self.display is not None:
                suffix = "" if ok else " (failed)"
                self.display.freeze(self.static_html(ok), self.line() + suffix)
        elif not self.widgets:
            s = self.stream or sys.stdout
            s.write("\n")
            s.flush()
