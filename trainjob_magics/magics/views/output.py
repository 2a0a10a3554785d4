"""Per-cell output widget: stdout/stderr apart, terminal ``\\r`` handling, capped, throttled.

The lines scroll in a box that follows the tail (``follow_tail_box``); when the cell finishes,
the widget is replaced by static HTML of the same view (``static_html``), so the result
survives the kernel.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any

from .styles import (
    BOX_STYLE,
    FAIL_STYLE,
    LINES_STYLE,
    NOTE_STYLE,
    OK_STYLE,
    PRE_STYLE,
    SCROLL_MAX_HEIGHT,
    STDERR_STYLE,
)
from .text import ScreenBuffer, Throttle, hidden_note, strip_ansi


def render_lines_html(
    lines: list[tuple[str, str]], hidden: int, where: str, path: str | None = None
) -> str:
    """HTML of the kept lines, stderr styled apart, with the hidden-lines note on top.

    Not a scroll container: the live view scrolls it in ``follow_tail_box``, the static view in
    ``scroll_box_html``.
    """
    parts = []
    if hidden:
        note = html.escape(hidden_note(hidden, where, path))
        parts.append(f'<span class="tjm-note" style="{NOTE_STYLE}">{note}</span>\n')
    for stream, text in lines:
        t = html.escape(strip_ansi(text))
        if stream == "stderr":
            parts.append(f'<span class="tjm-stderr" style="{STDERR_STYLE}">{t}</span>\n')
        else:
            parts.append(f'<span class="tjm-stdout">{t}</span>\n')
    body = "".join(parts)
    return (
        f'<div class="tjm-output" style="{LINES_STYLE}"><pre style="{PRE_STYLE}">{body}</pre></div>'
    )


def scroll_box_html(inner: str) -> str:
    """Static HTML scrolling ``inner``, opened at its bottom (``column-reverse``)."""
    return f'<div class="tjm-scroll" style="{BOX_STYLE}"><div>{inner}</div></div>'


def footer_html(footer: str, ok: bool, note: str = "") -> str:
    """The footer line: the success colour, or the bold failure colour; ``note`` (the
    hidden-lines note) beside it, where the reader of a finished cell looks."""
    style = OK_STYLE if ok else FAIL_STYLE
    beside = ""
    if note:
        escaped = html.escape(note)
        beside = f' <span class="tjm-note" style="{NOTE_STYLE};font-weight:normal">{escaped}</span>'
    body = html.escape(footer) + beside
    return f'<div class="tjm-footer" style="{style};font-size:12px">{body}</div>'


def follow_tail_box(child: Any) -> Any:
    """An ipywidgets ``Box`` that scrolls ``child`` and follows its tail.

    The box (not the ``<pre>`` inside) is the scroll container, and it persists across renders,
    so replacing the child's HTML keeps the scroll position. ``column-reverse`` puts the scroll
    origin at the bottom: at the bottom, new lines stay in view; scrolled up, the view stays
    where the user left it until they return to the bottom.
    """
    import ipywidgets as w

    child.layout.flex = "0 0 auto"  # never shrunk to the box's height (and clipped)
    box = w.Box(
        [child],
        layout=w.Layout(
            display="flex",
            flex_flow="column-reverse",
            max_height=SCROLL_MAX_HEIGHT,
            overflow="auto",
        ),
    )
    box.add_class("tjm-scroll")
    return box


def render_lines_text(
    lines: list[tuple[str, str]], hidden: int, where: str, path: str | None = None
) -> str:
    """Plain text of the same view (the widget's ``text/plain`` fallback)."""
    out = [hidden_note(hidden, where, path)] if hidden else []
    out.extend(strip_ansi(t) for _, t in lines)
    return "\n".join(out)


class WidgetOutputView:
    """Streams a cell's output into an ipywidgets ``VBox`` (body ``HTML`` + footer ``HTML``).

    ``write`` may be called often; the widget is re-rendered at most once per ``interval``
    (``tick``) and only the last ``max_lines`` lines are kept on screen.
    """

    def __init__(
        self,
        max_lines: int = 1000,
        max_line_chars: int = 10000,
        interval: float = 0.1,
        where: str = "_trainjob",
        clock: Callable[[], float] = time.monotonic,
        show: bool = True,
    ) -> None:
        import ipywidgets as w

        self.where = where
        self.output_path: str | None = None  # the result's spill file, set before finish()
        self.buffer = ScreenBuffer(max_lines=max_lines, max_line_chars=max_line_chars)
        self.throttle = Throttle(interval, clock)
        self.body = w.HTML(value="")
        self.footer = w.HTML(value="")
        self.footer_value = ""  # the footer's HTML, kept for the static view
        self.scroller = follow_tail_box(self.body)
        self.widget = w.VBox([self.scroller, self.footer])
        self.widget.add_class("trainjob-output")
        if show:  # scrolled up, the view holds (views/hold.py); a multi-pod view holds its own
            from .hold import hold_widget

            self.widget.children = (*self.widget.children, hold_widget())
        self.renders = 0
        self._dirty = False
        self.display: Any = None
        if show:
            from .frontend import WidgetDisplay

            self.display = WidgetDisplay(self.widget, "")

    def write(self, stream: str, text: str) -> None:
        """Take a chunk of ``stream`` ("stdout" or "stderr")."""
        self.buffer.feed(stream, text)
        self._dirty = True
        self.tick()

    def tick(self) -> None:
        """Re-render when something changed and the throttle allows it."""
        if self._dirty and self.throttle.ready():
            self._render()

    def _render(self) -> None:
        self._dirty = False
        self.renders += 1
        self.body.value = render_lines_html(
            self.buffer.view(), self.buffer.hidden, self.where, self.output_path
        )

    def text(self) -> str:
        """The shown output as plain text."""
        return render_lines_text(
            self.buffer.view(), self.buffer.hidden, self.where, self.output_path
        )

    def static_html(self) -> str:
        """The view as static HTML: the scrolled lines (opened at the bottom) and the footer."""
        return (
            f'<div class="trainjob-output tjm-static">{scroll_box_html(self.body.value)}'
            f"{self.footer_value}</div>"
        )

    def finish(self, footer: str | None = None, ok: bool = True, interrupted: bool = False) -> None:
        """Final render and footer; a shown view becomes static HTML + text (``freeze``)."""
        self._render()
        if footer:
            hidden = self.buffer.hidden
            note = hidden_note(hidden, self.where, self.output_path) if hidden else ""
            self.footer_value = footer_html(footer, ok, note)
            self.footer.value = self.footer_value
        if self.display is not None:
            text = self.text()
            if footer:
                text = f"{text}\n{footer}" if text else footer
            self.display.freeze(self.static_html(), text)
