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


# Status panel, per-pod summary and progress (nb-pods): JupyterLab's CSS variables with the
# light-theme colours as fallbacks.
MUTED_STYLE = "color:var(--jp-ui-font-color2,#555)"


WARN_STYLE = "color:var(--jp-warn-color0,#a66300)"


COMPACT_STYLE = "line-height:1.35;font-size:12px"


POD_SUMMARY_STYLE = (
    "line-height:1.35;font-size:12px;margin:2px 0 4px 0;max-height:22em;overflow:auto"
)


POD_ROW_STYLE = "display:flex;gap:0.8em;white-space:nowrap;align-items:baseline;padding:0 2px"


POD_FAILED_ROW_STYLE = (
    ";font-weight:bold;background:var(--jp-error-color3,rgba(179,38,30,0.07))"
    ";border-left:3px solid var(--jp-error-color1,#b3261e)"
)


BAR_TRACK_STYLE = (
    "display:inline-block;width:12em;height:0.7em;vertical-align:middle;"
    "background:var(--jp-layout-color3,#ddd);border-radius:2px;overflow:hidden;margin-right:6px"
)


BAR_FILL_OK = "background:var(--jp-success-color1,#1e7b34)"


BAR_FILL_FAILED = "background:var(--jp-error-color1,#b3261e)"


# Final states a session's widgets show when it ends (nb-pods).
STATE_COLOURS.update(
    {
        "Interrupted": STATE_COLOURS["Suspended"],
        "Timed out": STATE_COLOURS["Suspended"],
        "Closed at kernel exit": STATE_COLOURS["Deleted"],
    }
)
