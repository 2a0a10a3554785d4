"""Output grouped per pod: a Tab per pod (widgets) or ``[node-2] line`` prefixes (text).

Also the transfer progress bar (IntProgress, or a ``\\r`` text line).
"""

from __future__ import annotations

import html
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .text import echoes_ctrl_c, strip_ansi

RUNNING, OK, FAILED = "…", "✓", "✗"


def pod_footer(result: Any, error: BaseException | None) -> str:
    """``exit code 0 · 0.52 s`` or ``ConnectionLostError: ...`` for one pod."""
    if error is not None:
        return f"{type(error).__name__}: {' '.join(str(error).split())}"
    code = "no exit code" if result.returncode is None else f"exit code {result.returncode}"
    return f"{code} · {result.duration:.2f} s"


def _ok(result: Any, error: BaseException | None) -> bool:
    return error is None and result is not None and result.returncode == 0


class PrefixedTextView:
    """Per-pod output as prefixed lines: complete lines print as they arrive.

    An unfinished line keeps at most ``max_line_chars`` characters (after its last ``\r``).
    """

    def __init__(
        self,
        pods: Sequence[tuple[str, str]],
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        max_line_chars: int = 10000,
    ) -> None:
        self.labels = {pod: label or pod for pod, label in pods}
        self.max_line_chars = max(1, max_line_chars)
        self._partial: dict[tuple[str, str], str] = {}
        self._cut: dict[tuple[str, str], int] = {}  # characters dropped from the partial line
        self._out = {"stdout": stdout, "stderr": stderr}
        self._at_line_start = True

    def _stream(self, name: str) -> TextIO:
        s = self._out.get(name)
        if s is not None:
            return s
        return sys.stderr if name == "stderr" else sys.stdout

    def _emit(self, stream: str, pod: str, lines: list[str]) -> None:
        if not lines:
            return
        prefix = f"[{self.labels.get(pod, pod)}] "
        s = self._stream(stream)
        s.write("".join(f"{prefix}{strip_ansi(line)}\n" for line in lines))
        s.flush()
        self._at_line_start = True

    def write(self, pod: str, stream: str, text: str) -> None:
        """Take a chunk of one pod's stream."""
        key = (pod, stream)
        data = self._partial.pop(key, "") + text.replace("\r\n", "\n")
        *lines, rest = data.split("\n")
        shown = [self._clip(key, self._after_cr(key, line)) for line in lines]
        rest = self._after_cr(key, rest)
        if len(rest) > self.max_line_chars:
            self._cut[key] = self._cut.get(key, 0) + len(rest) - self.max_line_chars
            rest = rest[: self.max_line_chars]
        if rest:
            self._partial[key] = rest
        self._emit(stream, pod, shown)

    def _after_cr(self, key: tuple[str, str], line: str) -> str:
        """What a terminal shows of a line with ``\r``: the text after the last one."""
        if "\r" not in line:
            return line
        self._cut.pop(key, None)  # the cut part was overwritten
        return line.rsplit("\r", 1)[-1]

    def _clip(self, key: tuple[str, str], line: str) -> str:
        """The line cut to ``max_line_chars``, saying how much more it had."""
        more = self._cut.pop(key, 0) + max(0, len(line) - self.max_line_chars)
        if not more:
            return line
        return f"{line[: self.max_line_chars]} … [{more} more characters]"

    def tick(self) -> None:
        """Nothing to refresh in text mode."""

    def _flush(self, pod: str) -> None:
        for stream in ("stdout", "stderr"):
            rest = self._partial.pop((pod, stream), None)
            if rest:
                self._emit(stream, pod, [self._clip((pod, stream), rest)])

    def pod_done(self, pod: str, result: Any, error: BaseException | None) -> None:
        """Flush the pod's unfinished lines and print its exit code."""
        self._flush(pod)
        self._emit("stdout", pod, [pod_footer(result, error)])

    def finish(self, summary: str, ok: bool = True, interrupted: bool = False) -> None:
        """Flush everything and print the summary line (on a line of its own, also after a
        ``^C`` the terminal echoed when ``interrupted``)."""
        for pod in list(self.labels):
            self._flush(pod)
        glued = interrupted and echoes_ctrl_c(self._stream("stdout"))
        self._emit_plain(("" if self._at_line_start and not glued else "\n") + summary)

    def _emit_plain(self, line: str) -> None:
        s = self._stream("stdout")
        s.write(line + "\n")
        s.flush()
        self._at_line_start = True


class TabbedWidgetView:
    """A Tab with one capped, throttled output view per pod; titles carry each pod's state."""

    def __init__(
        self,
        pods: Sequence[tuple[str, str]],
        max_lines: int = 1000,
        max_line_chars: int = 10000,
        interval: float = 0.1,
        where: str = "_trainjob[pod]",
        show: bool = True,
    ) -> None:
        import ipywidgets as w

        from .output import WidgetOutputView

        self.labels = {pod: label or pod for pod, label in pods}
        self.views = {
            pod: WidgetOutputView(
                max_lines=max_lines,
                max_line_chars=max_line_chars,
                interval=interval,
                where=where,
                show=False,
            )
            for pod, _ in pods
        }
        self.state = {pod: RUNNING for pod, _ in pods}
        self.tabs = w.Tab(children=[v.widget for v in self.views.values()])
        self._set_titles()
        self.summary = w.HTML(value="")
        self.widget = w.VBox([self.tabs, self.summary])
        self.widget.add_class("trainjob-multipod-output")
        self.display: Any = None
        if show:
            from .frontend import WidgetDisplay

            self.display = WidgetDisplay(self.widget, self.text())

    def _set_titles(self) -> None:
        self.tabs.titles = tuple(f"{self.labels[p]} {self.state[p]}".strip() for p in self.views)

    def write(self, pod: str, stream: str, text: str) -> None:
        """Take a chunk of one pod's stream."""
        view = self.views.get(pod)
        if view is not None:
            view.write(stream, text)

    def tick(self) -> None:
        """Re-render the pods whose output changed."""
        for view in self.views.values():
            view.tick()

    def pod_done(self, pod: str, result: Any, error: BaseException | None) -> None:
        """Final render of one pod, its exit code in the footer and the tab title."""
        ok = _ok(result, error)
        self.state[pod] = OK if ok else FAILED
        self.views[pod].output_path = getattr(result, "stdout_path", None)
        self.views[pod].finish(pod_footer(result, error) + f" · pod {pod}", ok=ok)
        self._set_titles()

    def text(self, summary: str = "") -> str:
        """Plain-text fallback: every pod's lines, prefixed."""
        lines = []
        for pod, view in self.views.items():
            body = view.text()
            prefix = f"[{self.labels[pod]}] "
            lines += [prefix + line for line in body.splitlines()]
        if summary:
            lines.append(summary)
        return "\n".join(lines)

    def finish(self, summary: str, ok: bool = True, interrupted: bool = False) -> None:
        """Final render of every pod and the summary under the tabs."""
        for pod, view in self.views.items():
            view.tick()
            view._render()
            if self.state[pod] == RUNNING:
                self.state[pod] = ""
        self._set_titles()
        style = "color:#1e7b34" if ok else "color:#b3261e;font-weight:bold"
        self.summary.value = (
            f'<div class="tjm-summary" style="{style};font-size:12px">{html.escape(summary)}</div>'
        )
        if self.display is not None:
            self.display.update_text(self.text(summary))
