"""Progress of a file transfer: a bar widget or text lines, shown once the transfer is large."""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from .text import Throttle


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class ProgressView:
    """Progress of a transfer, shown once it is at least ``threshold`` bytes."""

    def __init__(
        self,
        label: str,
        widgets: bool,
        threshold: int = 4 << 20,
        interval: float = 0.25,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.widgets = widgets
        self.threshold = threshold
        self.throttle = Throttle(interval, clock)
        self.stream = stream
        self.bar: Any = None
        self.text_widget: Any = None
        self.shown = False
        self.done = 0
        self.total = 0
        self._printed = ""

    def update(self, done: int, total: int) -> None:
        """Record progress; redraw when the throttle allows (always at 100%)."""
        self.done, self.total = done, total
        if total < self.threshold:
            return
        if done >= total or self.throttle.ready():
            self._draw()

    def _line(self) -> str:
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return f"{self.label}: {pct:5.1f}% ({human_size(self.done)} of {human_size(self.total)})"

    def _draw(self) -> None:
        if self.widgets:
            if self.bar is None:
                import ipywidgets as w
                from IPython.display import display

                self.bar = w.IntProgress(value=0, min=0, max=1000, description="")
                self.text_widget = w.HTML(value="")
                box = w.HBox([self.bar, self.text_widget])
                box.add_class("trainjob-progress")
                display(box)
            self.bar.value = int(1000 * self.done / self.total) if self.total else 1000
            self.text_widget.value = html.escape(self._line())
        else:
            s = self.stream or sys.stdout
            line = self._line()
            s.write("\r" + line.ljust(len(self._printed)))
            s.flush()
            self._printed = line
        self.shown = True

    def finish(self, ok: bool = True) -> None:
        """Last state: full bar (or the failure colour), newline after the text line."""
        if not self.shown:
            return
        if self.widgets and self.bar is not None:
            self.bar.bar_style = "success" if ok else "danger"
        elif not self.widgets:
            s = self.stream or sys.stdout
            s.write("\n")
            s.flush()
