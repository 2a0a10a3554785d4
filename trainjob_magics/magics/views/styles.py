"""Inline styles and colours shared by the widget views (HTML in ipywidgets).

Colours come from JupyterLab's CSS variables (also defined by Notebook 7), so the views follow
the theme; the value after the comma is the fallback where the variables are missing (nbviewer,
exported HTML). Fallbacks are ``rgb()`` and borders longhands: JupyterLab's sanitizer of
untrusted HTML keeps those and drops hex values and shorthands. Every text colour reaches 4.5:1
(WCAG AA) on JupyterLab Light and Dark (tests/browser/test_live_output.py measures it from the
rendered colours, also in an untrusted notebook).
"""

from __future__ import annotations

import html

# Badge backgrounds (white text on them: at least 4.5:1 whatever the theme).
STATE_COLOURS = {
    "Running": "#1e7b34",
    "Complete": "#1e7b34",
    "Failed": "#b3261e",
    "Deleted": "#707070",
    "Stopped": "#707070",  # a port forward that ended
    "Suspended": "#a66300",
    "Queued": "#a66300",
    "Preempted": "#b3261e",
    "Evicted": "#b3261e",  # by Kueue without a preemption (PodsReadyTimeout)
}


TABLE_STYLE = "border-collapse:collapse;font-size:12px;margin-top:4px"


CELL_STYLE = "padding:2px 10px 2px 0;text-align:left;white-space:nowrap"


def state_badge(state: str) -> str:
    colour = STATE_COLOURS.get(state.split(" (")[0], "#1a5fb4")  # "Deleted (idle)": Deleted
    return (
        f'<span class="tjm-state" style="color:#fff;background:{colour};border-radius:3px;'
        f'padding:0 6px">{html.escape(state)}</span>'
    )


TEXT_COLOUR = "var(--jp-content-font-color1,rgba(0,0,0,0.87))"
MUTED_COLOUR = "var(--jp-content-font-color2,rgb(89,89,89))"
OK_COLOUR = "var(--jp-success-color0,rgb(30,123,52))"
FAIL_COLOUR = "var(--jp-error-color1,rgb(179,38,30))"
RULE_COLOUR = "var(--jp-brand-color2,rgb(138,164,200))"
STDERR_BACKGROUND = "var(--jp-rendermime-error-background,rgba(179,38,30,0.07))"
SCROLL_MAX_HEIGHT = "28rem"

# The scroll box of a finished (static) output: ``column-reverse`` starts it at the bottom.
BOX_STYLE = (
    f"display:flex;flex-direction:column-reverse;max-height:{SCROLL_MAX_HEIGHT};overflow:auto"
)


# The ``<pre>`` never scrolls itself (JupyterLab gives ``.jp-OutputArea-output pre`` an
# ``overflow:auto``, which would make it the scroll container and defeat following the tail).
# Lines wrap between words (JupyterLab's output <pre> breaks anywhere: word-break:break-all);
# a word longer than the line still breaks.
WRAP_STYLE = "white-space:pre-wrap;word-break:normal;overflow-wrap:break-word"
PRE_STYLE = (
    "margin:0;font-family:var(--jp-code-font-family,monospace);font-size:12px;"
    f"line-height:1.4;{WRAP_STYLE};overflow:visible;max-height:none;"
    f"color:{TEXT_COLOUR};background:transparent;border:none;padding:0"
)


# stderr as JupyterLab shows it: the normal text colour on a faint red background. Red text is
# kept for failures.
STDERR_STYLE = f"color:{TEXT_COLOUR};background-color:{STDERR_BACKGROUND}"


NOTE_STYLE = f"color:{MUTED_COLOUR};font-style:italic"


OK_STYLE = f"color:{OK_COLOUR}"


FAIL_STYLE = f"color:{FAIL_COLOUR};font-weight:bold"


# The output lines: a rule on the left, inside the scroll box.
LINES_STYLE = (
    f"border-left-width:3px;border-left-style:solid;border-left-color:{RULE_COLOUR};"
    "padding-left:6px"
)


# Status panel, per-pod summary and progress: the same variables, rgb() fallbacks, longhands.
MUTED_STYLE = f"color:{MUTED_COLOUR}"


# A warning: normal text (an orange text colour fails 4.5:1 on Light), marked by an orange rule.
WARN_STYLE = (
    f"color:{TEXT_COLOUR};border-left-width:3px;border-left-style:solid;"
    "border-left-color:var(--jp-warn-color1,rgb(245,124,0));padding-left:4px"
)


COMPACT_STYLE = "line-height:1.35;font-size:12px"


# contain:inline-size: the rows' one-line width is not the summary's own (an ipywidgets HTML
# widget's content is a flex item as wide as its widest line): it takes its container's width
# and each row's last line is cut with … instead of the panel running past the cell.
POD_SUMMARY_STYLE = (
    "line-height:1.35;font-size:12px;margin:2px 0 4px 0;max-height:22em;overflow:auto;"
    "contain:inline-size"
)


POD_ROW_STYLE = "display:flex;gap:0.8em;white-space:nowrap;align-items:baseline;padding:0 2px"


# The ✗ of a failed pod's row, on the row's red background: the error colour mixed with the text
# colour, darker in Light and lighter in Dark (5.9:1 and 5.2:1 on the row; the plain error
# colour is 3.95:1 and 3.66:1). Where color-mix() is dropped (a sanitized notebook), the
# first declaration holds.
FAIL_MARK_STYLE = (
    f"color:{FAIL_COLOUR};color:color-mix(in srgb,{FAIL_COLOUR} 70%,{TEXT_COLOUR});font-weight:bold"
)


# A failed pod's row: bold, on the stderr background, with a red rule; its texts in the text
# colour (the muted one is 4.33:1 on that background in Light).
POD_FAILED_ROW_STYLE = (
    f";font-weight:bold;background-color:{STDERR_BACKGROUND}"
    f";border-left-width:3px;border-left-style:solid;border-left-color:{FAIL_COLOUR}"
)


BAR_TRACK_STYLE = (
    "display:inline-block;width:12em;height:0.7em;vertical-align:middle;"
    "background-color:var(--jp-layout-color3,rgb(221,221,221));border-radius:2px;"
    "overflow:hidden;margin-right:6px"
)


BAR_FILL_OK = "background-color:var(--jp-success-color1,rgb(30,123,52))"


BAR_FILL_FAILED = f"background-color:{FAIL_COLOUR}"


# Final states a session's widgets show when it ends.
STATE_COLOURS.update(
    {
        "Interrupted": STATE_COLOURS["Suspended"],
        "Timed out": STATE_COLOURS["Suspended"],
        "Closed at kernel exit": STATE_COLOURS["Deleted"],
    }
)


# The error a cell of ours raises is shown by the front end in a <pre> that breaks inside words
# ("use|r-queue"). This rule, sent with our panels and frozen outputs, wraps the error text of
# output areas holding one of our views between words; it applies where the output is trusted
# (run in this session), the sanitizer drops <style> from an untrusted notebook.
ERROR_WRAP_CSS = (
    "<style>.jp-OutputArea:has(.trainjob-status,.trainjob-output,.trainjob-multipod-output) "
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"] pre'
    f"{{{WRAP_STYLE}}}</style>"
)
