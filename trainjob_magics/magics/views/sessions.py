"""``%trainjob_sessions`` as an HTML table (with the text table as its fallback)."""

from __future__ import annotations

import html

from .status_text import SESSION_COLUMNS, SessionRow, format_sessions
from .styles import CELL_STYLE, MUTED_STYLE, TABLE_STYLE, state_badge


def render_sessions_html(rows: list[SessionRow]) -> str:
    """This kernel's sessions as an HTML table; the default one in bold."""
    if not rows:
        return (
            f'<div class="tjm-sessions" style="{MUTED_STYLE}">'
            f"{html.escape(format_sessions([]))}</div>"
        )
    th = "".join(f'<th style="{CELL_STYLE}">{c.title()}</th>' for c in SESSION_COLUMNS)
    body = []
    for r in rows:
        alias = html.escape(r.alias) + (" (default)" if r.default else "")
        cells = [alias, *(html.escape(x or "-") for x in (r.name, r.namespace, r.runtime))]
        tds = "".join(f'<td style="{CELL_STYLE}">{c}</td>' for c in cells)
        weight = "font-weight:bold" if r.default else ""
        body.append(
            f'<tr style="{weight}">{tds}<td style="{CELL_STYLE}">{state_badge(r.state)}</td></tr>'
        )
    return (
        f'<table class="tjm-sessions" style="{TABLE_STYLE}"><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def show_sessions(rows: list[SessionRow]) -> None:
    """Display the table as static HTML (``text/plain``: the text table): a snapshot that needs
    no widget model, so a saved notebook shows it."""
    from IPython.display import display

    page = f'<div class="trainjob-sessions">{render_sessions_html(rows)}</div>'
    display({"text/html": page, "text/plain": format_sessions(rows)}, raw=True)
