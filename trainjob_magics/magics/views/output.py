"""Per-cell output widget: stdout/stderr apart, terminal ``\\r`` handling, capped, throttled."""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any

from .styles import BOX_STYLE, FAIL_STYLE, NOTE_STYLE, OK_STYLE, PRE_STYLE, STDERR_STYLE
from .text import ScreenBuffer, Throttle, hidden_note, strip_ansi


def render_lines_html(
    lines: list[tuple[str, str]], hidden: int, where: str, path: str | None = None
) -> str:
    """HTML of the kept lines, stderr styled apart, with the hidden-lines note on top."""
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
        f'<div class="tjm-output" style="{BOX_STYLE}"><pre style="{PRE_STYLE}">{body}</pre></div>'
    )


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
        self.widget = w.VBox([self.body, self.footer])
        self.widget.add_class("trainjob-output")
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

    def finish(self, footer: str | None = None, ok: bool = True, interrupted: bool = False) -> None:
        """Final render, footer, and the text fallback for front ends without widget state."""
        self._render()
        if footer:
            style = OK_STYLE if ok else FAIL_STYLE
            self.footer.value = (
                f'<div class="tjm-footer" style="{style};font-size:12px">'
                f"{html.escape(footer)}</div>"
            )
        if self.display is not None:
            text = self.text()
            if footer:
                text = f"{text}\n{footer}" if text else footer
            self.display.update_text(text)
