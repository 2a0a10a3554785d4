"""Output grouped per pod: a per-pod summary with each pod's output on demand (widgets), or
``[node-2] line`` prefixes (text).
"""

from __future__ import annotations

import html
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .pod_summary import (
    ENDED,
    FAILED,
    OK,
    RUNNING,
    TIMED_OUT,
    PodGroup,
    PodOutcome,
    counts_line,
    group_outcomes,
    outcome_of,
    summary_html,
    summary_text,
)
from .styles import FAIL_STYLE, NOTE_STYLE, OK_STYLE
from .text import Throttle, echoes_ctrl_c, hidden_note, strip_ansi


def pod_footer(result: Any, error: BaseException | None) -> str:
    """``exit code 0 · 0.52 s`` or ``ConnectionLostError: ...`` for one pod."""
    if error is not None:
        return f"{type(error).__name__}: {' '.join(str(error).split())}"
    code = "no exit code" if result.returncode is None else f"exit code {result.returncode}"
    code = getattr(result, "status_label", None) or code  # a Python cell has no exit code
    return f"{code} · {result.duration:.2f} s"


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
        if not summary:  # the cell's error says it
            return
        glued = interrupted and echoes_ctrl_c(self._stream("stdout"))
        self._emit_plain(("" if self._at_line_start and not glued else "\n") + summary)

    def _emit_plain(self, line: str) -> None:
        s = self._stream("stdout")
        s.write(line + "\n")
        s.flush()
        self._at_line_start = True


class MultiPodWidgetView:
    """Per-pod output as a widget: the per-pod summary first (failed pods first and marked),
    then each pod's output on demand: a Tab up to ``TAB_LIMIT`` pods, a Dropdown beyond.

    A failed pod is selected as soon as it fails, so it is shown without a click. ``finish``
    freezes the display into static HTML (the summary, each group of identical output in a
    ``<details>``, failed ones open) with the same text as its ``text/plain``.
    """

    TAB_LIMIT = 8
    STATIC_GROUPS = 8  # outputs kept in the frozen HTML (failed ones always), bounding its size
    UNIT = "pod"  # what an entry is, in the rows and notes ("31 pods: identical output")

    def __init__(
        self,
        pods: Sequence[tuple[str, str]],
        max_lines: int = 1000,
        max_line_chars: int = 10000,
        interval: float = 0.1,
        where: str = "_trainjob[pod]",
        show: bool = True,
        live_summary: bool = True,
    ) -> None:
        import ipywidgets as w

        from .output import WidgetOutputView

        self.where = where
        # a command's pods: the summary shows from the start (logs have no outcome to show)
        self.live_summary = live_summary
        self._head = ""  # the cell's summary line, in place of the counts once it succeeded
        self._errors: dict[str, BaseException] = {}
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
        self.state = {pod: RUNNING for pod in self.views}
        self.code = {pod: "running" for pod in self.views}
        self.duration: dict[str, float | None] = {pod: None for pod in self.views}
        self._renders = -1
        # the summary compares every pod's lines: redrawn at most twice a second while running
        self._overview_throttle = Throttle(max(interval, 0.5))
        self._chose_failed = False
        self._outcomes = False
        self.overview = w.HTML(value="")
        self.overview.add_class("trainjob-pod-summary")
        self.tabs: Any = None
        self.selector: Any = None
        if len(self.views) <= self.TAB_LIMIT:
            self.tabs = w.Tab(children=[v.widget for v in self.views.values()])
            self.picker: Any = self.tabs
        else:
            self.selector = w.Dropdown(
                options=self._options(),
                description=f"{self.UNIT.capitalize()} output:",
                layout=w.Layout(width="auto"),
            )
            self.selector.style.description_width = "initial"
            # every entry's output in a Stack, in the options' order, whose shown child follows
            # the dropdown in the page (jslink): a choice made while the cell runs shows at
            # once, though the busy kernel reads it only after the cell
            self.shown = w.Stack(layout=w.Layout(display="block"))
            self._link = w.jslink((self.selector, "index"), (self.shown, "selected_index"))
            self.selector.observe(self._on_select, names="value")
            self.picker = w.VBox([self.selector, self.shown])
            from .frontend import OWNED

            setattr(self.picker, OWNED, (self._link,))  # closed with the panel (close_tree)
        self._set_titles()
        self.summary = w.HTML(value="")
        from .hold import hold_widget

        self.widget = w.VBox([self.overview, self.picker, self.summary, hold_widget()])
        self.widget.add_class("trainjob-multipod-output")
        self._render_overview()
        self.display: Any = None
        if show:
            from .frontend import WidgetDisplay

            self.display = WidgetDisplay(self.widget, self.text())

    # ------------------------------------------------------------ state

    def outcomes(self) -> list[PodOutcome]:
        """Every pod's outcome so far, in pod order."""
        return [
            PodOutcome(
                pod,
                self.labels[pod],
                mark=self.state[pod],
                code=self.code[pod],
                duration=self.duration[pod],
                lines=tuple(view.buffer.view()),
                hidden=view.buffer.hidden,
            )
            for pod, view in self.views.items()
        ]

    def counts(self, outcomes: list[PodOutcome]) -> str:
        """The summary's head line before the cell's own: ``3 pods · 2 ✓ · 1 ✗``."""
        return counts_line(outcomes, self.UNIT)

    def _title(self, pod: str) -> str:
        """``node-0 ✓``, ``node-1 ✗``, ``node-2 · running`` (a command's) or ``node-2`` (logs)."""
        state, label = self.state[pod], self.labels[pod]
        if state in (OK, FAILED):
            return f"{label} {state}"
        return f"{label} · {self.code[pod]}" if self.live_summary else label

    def _options(self) -> list[tuple[str, str]]:
        """Dropdown entries, failed pods first: ``✗ node-7 · exit 3``, ``node-8 · running``."""
        order = sorted(self.views, key=lambda p: 0 if self.state[p] == FAILED else 1)
        out = []
        for pod in order:
            state, code = self.state[pod], self.code[pod]
            mark = f"{state} " if state in (OK, FAILED) else ""
            extra = f" · {code}" if code and (self.live_summary or state in (OK, FAILED)) else ""
            out.append((f"{mark}{self.labels[pod]}{extra}", pod))
        return out

    def _set_titles(self) -> None:
        if self.tabs is not None:
            self.tabs.titles = tuple(self._title(p) for p in self.views)
        else:
            current = self.selector.value
            options = self._options()
            with self.selector.hold_sync(), self.shown.hold_sync():
                # entries are only added: the children first, so that any index is in range
                self.shown.children = [self.views[pod].widget for _label, pod in options]
                with self.selector.hold_trait_notifications():
                    self.selector.options = options
                    self.selector.value = current
                self.shown.selected_index = self.selector.index

    def _select(self, pod: str) -> None:
        if self.tabs is not None:
            self.tabs.selected_index = list(self.views).index(pod)
        else:
            self.selector.value = pod

    def _on_select(self, change: dict[str, Any]) -> None:
        if change.get("new") in self.views:
            self.shown.selected_index = self.selector.index

    @property
    def has_outcomes(self) -> bool:
        """True once a pod finished with an outcome (a command; logs have none)."""
        return self._outcomes

    @property
    def shows_summary(self) -> bool:
        """A command's summary shows from the start, while its pods run; logs get none."""
        return self.has_outcomes or self.live_summary

    def _render_overview(self) -> None:
        shown = self.shows_summary
        self.overview.value = (
            summary_html(self.outcomes(), self._head or self.counts(self.outcomes()), self.UNIT)
            if shown
            else ""
        )

    # ------------------------------------------------------------ events

    def write(self, pod: str, stream: str, text: str) -> None:
        """Take a chunk of one pod's stream."""
        view = self.views.get(pod)
        if view is not None:
            view.write(stream, text)

    def tick(self) -> None:
        """Re-render the pods whose output changed, and the summary (their last lines)."""
        renders = 0
        for view in self.views.values():
            view.tick()
            renders += view.renders
        if renders != self._renders and self._overview_throttle.ready():
            self._renders = renders
            self._render_overview()

    def pod_done(self, pod: str, result: Any, error: BaseException | None) -> None:
        """Final render of one pod: footer, mark, summary row; the first failed pod is shown."""
        mark, code = outcome_of(result, error)
        self._outcomes = True
        self.state[pod], self.code[pod] = mark, code
        self.duration[pod] = getattr(result, "duration", None)
        if error is not None:
            self._errors[pod] = error
        view = self.views[pod]
        view.output_path = getattr(result, "stdout_path", None)
        view.finish(pod_footer(result, error) + f" · pod {pod}", ok=mark == OK)
        self._set_titles()
        if mark == FAILED and not self._chose_failed:
            self._chose_failed = True
            self._select(pod)
        self._render_overview()

    def finish(self, summary: str, ok: bool = True, interrupted: bool = False) -> None:
        """Final render of every pod and the summary line; then the display turns static."""
        for pod, view in self.views.items():
            view.tick()
            view._render()
            if self.state[pod] == RUNNING:  # the cell ended before this pod did
                ending = "interrupted" if interrupted else "ended" if ok else "stopped"
                if not interrupted and TIMED_OUT in self.code.values():  # the same --timeout
                    ending = TIMED_OUT
                self.state[pod], self.code[pod] = ENDED, ending
        self._outcomes = self._outcomes or interrupted
        if ok and summary and self.has_outcomes:  # "4 pods ok · 2.00 s" heads the summary
            self._head, summary = summary, ""
        self._set_titles()
        self._render_overview()
        style = OK_STYLE if ok else FAIL_STYLE
        self.summary.value = (
            f'<div class="tjm-summary" style="{style};font-size:12px">{html.escape(summary)}</div>'
            if summary
            else ""
        )
        if self.display is not None:
            self.display.freeze(self.static_html(summary, ok), self.text(summary))

    # ------------------------------------------------------------ static output

    def _fold_title(self, g: PodGroup, alone: bool) -> str:
        """The head of a group's output: short under a summary that names the pods already."""
        return g.fold_title(alone, self.UNIT) if self.has_outcomes else g.title(self.UNIT)

    def _footer_of(self, g: PodGroup) -> str:
        """The footer kept under a group's output: only a pod's error, which the summary row
        names but does not explain (exit codes and durations are in the row)."""
        pod = g.first.pod
        if len(g.members) == 1 and pod in self._errors:
            return self.views[pod].footer.value
        return ""

    def static_html(self, summary: str = "", ok: bool = True) -> str:
        """What the widget shows, as HTML that needs no kernel: the summary, then each group of
        identical output in a ``<details>`` (a command's failed ones open; logs' when short or
        alone), the hidden-lines note at its end too; beyond ``STATIC_GROUPS`` groups a note
        says where the rest is. A group without output has its summary row only."""
        from .output import render_lines_html, scroll_box_html

        outcomes = self.outcomes()
        groups = group_outcomes(outcomes)
        short = sum(len(g.first.lines) for g in groups) <= 40
        if ok and summary and self.has_outcomes:
            self._head, summary = summary, ""
        parts = (
            [summary_html(outcomes, self._head or self.counts(outcomes), self.UNIT)]
            if self.has_outcomes
            else []
        )
        kept = self._kept(groups)
        shown = [g for g in groups if g in kept and not g.silent]
        for g in shown:
            pod = g.first.pod
            view = self.views[pod]
            hidden = view.buffer.hidden
            body = scroll_box_html(render_lines_html(view.buffer.view(), hidden, self.where))
            if hidden:
                note = html.escape(hidden_note(hidden, self.where))
                body += f'<div class="tjm-note" style="{NOTE_STYLE};font-size:12px">{note}</div>'
            # a command's folds: the failed ones open (the rows say how the others ended);
            # logs have no outcome: open when short, or when there is only one
            logs_open = not self.has_outcomes and (short or len(shown) == 1)
            opened = " open" if g.failed or logs_open else ""
            title = html.escape(self._fold_title(g, alone=len(groups) == 1))
            parts.append(
                f'<details class="tjm-pod-output"{opened} style="margin:2px 0">'
                f'<summary style="cursor:pointer;font-size:12px">{title}</summary>'
                f"{body}{self._footer_of(g)}</details>"
            )
        left = sum(len(g.members) for g in groups if g not in kept)
        if left:
            note = self._left_note(left)
            parts.append(f'<div class="tjm-note" style="{NOTE_STYLE}">{html.escape(note)}</div>')
        if summary:
            style = OK_STYLE if ok else FAIL_STYLE
            parts.append(
                f'<div class="tjm-summary" style="{style};font-size:12px">'
                f"{html.escape(summary)}</div>"
            )
        return f'<div class="trainjob-multipod-output tjm-static">{"".join(parts)}</div>'

    def _left_note(self, left: int) -> str:
        return f"[… the output of {left} more {self.UNIT}s is not kept here; it is in {self.where}]"

    def _kept(self, groups: list[PodGroup]) -> list[PodGroup]:
        """The groups the frozen output keeps: failed ones always, then the largest."""
        kept = [g for g in groups if g.failed]
        kept += [g for g in groups if not g.failed][: max(0, self.STATIC_GROUPS - len(kept))]
        return kept

    def text(self, summary: str = "") -> str:
        """Plain-text fallback: the per-pod summary, then the lines of each group of identical
        output (as the frozen HTML keeps them: its size does not grow with the pod count),
        prefixed with the first pod's label."""
        outcomes = self.outcomes()
        if summary and self._head == summary:
            summary = ""  # it heads the summary
        lines = (
            [summary_text(outcomes, self._head or self.counts(outcomes), self.UNIT)]
            if self.has_outcomes
            else []
        )
        groups = group_outcomes(outcomes)
        kept = self._kept(groups)
        for g in kept:
            if g.silent:
                continue
            pod = g.first.pod
            prefix = f"[{self.labels[pod]}] "
            if len(g.members) > 1:  # the lines of a group under its head, unprefixed
                prefix = ""
                if len(groups) > 1 or not self.has_outcomes:
                    lines.append(f"[{self._fold_title(g, alone=False)}]")
            lines += [prefix + line for line in self.views[pod].text().splitlines()]
        left = sum(len(g.members) for g in groups if g not in kept)
        if left:
            lines.append(self._left_note(left))
        if summary:
            lines.append(summary)
        return "\n".join(lines)


TabbedWidgetView = MultiPodWidgetView  # the name the host's view factory imports
