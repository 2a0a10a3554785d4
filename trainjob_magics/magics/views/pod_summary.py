"""The per-pod summary of a multi-pod cell: one row per pod (or per group of pods whose output is
identical) with ✓/✗, exit code, duration and last line; failed pods first.

Pure functions over :class:`PodOutcome` rows, rendered as HTML (widget and frozen output) and
as text (the ``text/plain`` fallback).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .styles import (
    FAIL_MARK_STYLE,
    MUTED_STYLE,
    OK_STYLE,
    POD_FAILED_ROW_STYLE,
    POD_ROW_STYLE,
    POD_SUMMARY_STYLE,
    TEXT_COLOUR,
)
from .text import strip_ansi

RUNNING, OK, FAILED, ENDED = "…", "✓", "✗", "·"


@dataclass
class PodOutcome:
    """What one pod showed: its mark, exit code, duration, output lines and last line."""

    pod: str
    label: str
    mark: str = RUNNING
    code: str = "running"
    duration: float | None = None
    lines: tuple[tuple[str, str], ...] = ()
    hidden: int = 0

    @property
    def failed(self) -> bool:
        return self.mark == FAILED

    @property
    def last_line(self) -> str:
        for _stream, text in reversed(self.lines):
            text = strip_ansi(text).strip()
            if text:
                return text
        return ""


@dataclass
class PodGroup:
    """Pods whose output and outcome are identical (often all but the failed one)."""

    members: list[PodOutcome] = field(default_factory=list)

    @property
    def first(self) -> PodOutcome:
        return self.members[0]

    @property
    def failed(self) -> bool:
        return self.first.failed

    def names(self, limit: int = 4) -> str:
        """``node-0, node-1, … node-31`` (at most ``limit`` names and the last one)."""
        labels = [m.label for m in self.members]
        if len(labels) <= limit:
            return ", ".join(labels)
        return ", ".join(labels[: limit - 1]) + f", … {labels[-1]}"

    def duration(self) -> str:
        """``0.52 s`` or the range ``0.50-0.61 s`` of the group."""
        values = [m.duration for m in self.members if m.duration is not None]
        if not values:
            return ""
        lo, hi = min(values), max(values)
        return f"{lo:.2f} s" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f} s"

    @property
    def silent(self) -> bool:
        """No pod of the group printed anything."""
        return not self.first.lines and not self.first.hidden

    def who(self, unit: str = "pod") -> str:
        """``node-7``, ``31 pods: identical output (node-0, …)`` or ``4 pods: no output (…)``
        (``unit``: what a member is, ``rank`` for ranks)."""
        if len(self.members) == 1:
            return self.first.label
        what = "no output" if self.silent else "identical output"
        return f"{len(self.members)} {unit}s: {what} ({self.names()})"

    def title(self, unit: str = "pod") -> str:
        """``✗ node-7 · exit 3`` or ``✓ 31 pods: identical output (node-0, …) · exit 0``; no
        mark or code for pods that only ended (logs)."""
        m = self.first
        mark = "" if m.mark in (ENDED, RUNNING) else f"{m.mark} "
        parts = [f"{mark}{self.who(unit)}", "" if m.code == "ended" else m.code]
        d = self.duration()
        if d:
            parts.append(d)
        return " · ".join(p for p in parts if p)

    def fold_title(self, alone: bool, unit: str = "pod") -> str:
        """The head of the group's output under a summary that already names its pods, code and
        duration: ``output`` when it is the only group, else ``✗ output of node-7`` or
        ``✓ output of 31 pods``."""
        if alone:
            return "output"
        m = self.first
        mark = "" if m.mark in (ENDED, RUNNING) else f"{m.mark} "
        who = m.label if len(self.members) == 1 else f"{len(self.members)} {unit}s"
        return f"{mark}output of {who}"


TIMED_OUT = "timed out"


def outcome_of(result: Any, error: BaseException | None) -> tuple[str, str]:
    """(mark, code) of a finished pod: ``(✓, exit 0)``, ``(✗, exit 3)``, ``(✗, ErrorName)``."""
    if isinstance(error, TimeoutError):  # the cell's --timeout: the pod was still running
        return FAILED, TIMED_OUT
    if error is not None:
        return FAILED, type(error).__name__
    if result is None:
        return ENDED, "ended"
    if result.returncode is None:
        return FAILED, "no exit code"
    mark = OK if result.returncode == 0 else FAILED
    return mark, getattr(result, "status_label", None) or f"exit {result.returncode}"


def _order(o: PodOutcome) -> int:
    return {FAILED: 0, RUNNING: 1, ENDED: 2, OK: 3}.get(o.mark, 2)


def group_outcomes(outcomes: Sequence[PodOutcome]) -> list[PodGroup]:
    """Groups of identical output and outcome, failed groups first, then the largest."""
    groups: dict[tuple[Any, ...], PodGroup] = {}
    for o in outcomes:
        key = (o.mark, o.code, o.lines, o.hidden)  # running pods too: regrouped as they go
        groups.setdefault(key, PodGroup()).members.append(o)
    return sorted(groups.values(), key=lambda g: (_order(g.first), -len(g.members)))


def counts_line(outcomes: Sequence[PodOutcome], unit: str = "pod") -> str:
    """``32 pods · 31 ✓ · 1 ✗`` (and ``· 4 running`` while some still run)."""
    n = len(outcomes)
    marks = [o.mark for o in outcomes]
    parts = [f"{n} {unit}{'s' if n != 1 else ''}"]
    for mark, word in ((OK, OK), (FAILED, FAILED), (RUNNING, "running"), (ENDED, "ended")):
        count = marks.count(mark)
        if count:
            parts.append(f"{count} {word}")
    return " · ".join(parts)


def summary_rows(
    outcomes: Sequence[PodOutcome], unit: str = "pod"
) -> list[tuple[str, str, str, str, str]]:
    """Rows (mark, who, code, duration, last line), failed first, identical output grouped."""
    rows = []
    for g in group_outcomes(outcomes):
        m = g.first
        rows.append((m.mark, g.who(unit), m.code, g.duration(), m.last_line))
    return rows


def summary_text(outcomes: Sequence[PodOutcome], head: str = "", unit: str = "pod") -> str:
    """The summary as text lines (the ``text/plain`` fallback); ``head`` in place of the
    counts (the cell's own summary line, once it succeeded)."""
    lines = [head or counts_line(outcomes, unit)]
    for mark, who, code, dur, last in summary_rows(outcomes, unit):
        cols = [c for c in (code, dur) if c]
        tail = f"  | {last}" if last else ""
        lines.append(f"  {mark} {who} · {' · '.join(cols)}{tail}")
    return "\n".join(lines)


def summary_html(outcomes: Sequence[PodOutcome], head: str = "", unit: str = "pod") -> str:
    """The summary as compact HTML rows that fit a narrow window (the last line is cut with …);
    ``head`` in place of the counts."""
    e = html.escape
    rows = []
    for mark, who, code, dur, last in summary_rows(outcomes, unit):
        failed = mark == FAILED
        style = POD_ROW_STYLE + (POD_FAILED_ROW_STYLE if failed else "")
        mark_style = FAIL_MARK_STYLE if failed else OK_STYLE if mark == OK else MUTED_STYLE
        muted = f"color:{TEXT_COLOUR}" if failed else MUTED_STYLE
        cls = "tjm-pod-row tjm-pod-failed" if failed else "tjm-pod-row"
        rows.append(
            f'<div class="{cls}" style="{style}">'
            f'<span class="tjm-pod-mark" style="{mark_style};flex:none;width:1.2em">'
            f"{e(mark)}</span>"
            f'<span class="tjm-pod-name" style="flex:none;max-width:55%;overflow:hidden;'
            f'text-overflow:ellipsis">{e(who)}</span>'
            f'<span class="tjm-pod-code" style="flex:none">{e(code)}</span>'
            f'<span class="tjm-pod-duration" style="{muted};flex:none">{e(dur)}</span>'
            f'<span class="tjm-pod-last" style="{muted};flex:1 1 0;min-width:0;'
            f'overflow:hidden;text-overflow:ellipsis" title="{e(last)}">{e(last)}</span></div>'
        )
    return (
        f'<div class="tjm-pod-summary" style="{POD_SUMMARY_STYLE}">'
        f'<div class="tjm-pod-counts" style="font-weight:bold">'
        f"{e(head or counts_line(outcomes, unit))}</div>"
        f"{''.join(rows)}</div>"
    )
