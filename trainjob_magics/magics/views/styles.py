"""Inline styles and colours shared by the widget views (HTML in ipywidgets)."""

from __future__ import annotations

import html

STATE_COLOURS = {
    "Running": "#1e7b34",
    "Complete": "#1e7b34",
    "Failed": "#b3261e",
    "Deleted": "#777",
    "Suspended": "#a66300",
    "Queued": "#a66300",
    "Preempted": "#b3261e",
}


TABLE_STYLE = "border-collapse:collapse;font-size:12px;margin-top:4px"


CELL_STYLE = "padding:2px 10px 2px 0;text-align:left;white-space:nowrap"


def state_badge(state: str) -> str:
    colour = STATE_COLOURS.get(state, "#1a5fb4")
    return (
        f'<span class="tjm-state" style="color:#fff;background:{colour};border-radius:3px;'
        f'padding:0 6px">{html.escape(state)}</span>'
    )


BOX_STYLE = (
    "display:flex;flex-direction:column-reverse;max-height:32em;overflow:auto;"
    "border-left:3px solid #8aa4c8;padding-left:6px"
)


PRE_STYLE = (
    "margin:0;font-family:var(--jp-code-font-family,monospace);font-size:12px;white-space:pre-wrap"
)


STDERR_STYLE = "color:#b3261e;background:rgba(179,38,30,0.07)"


NOTE_STYLE = "color:#777;font-style:italic"


OK_STYLE = "color:#1e7b34"


FAIL_STYLE = "color:#b3261e;font-weight:bold"
