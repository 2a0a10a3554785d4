"""Read executed notebooks (nbclient runs with the widget state stored)."""

from __future__ import annotations

from typing import Any

from devtools.notebook_run import WIDGET_VIEW_MIME, extract_widget_texts


def widget_texts_of_cell(nb: Any, index: int) -> list[str]:
    """Texts of the cell's widget views, resolved through the saved widget state only, and of
    the views frozen into static HTML when they finished (their ``text/plain``)."""
    texts = extract_widget_texts(nb)
    found = []
    for output in nb.cells[index].get("outputs", []):
        data = output.get("data") or {}
        view = data.get(WIDGET_VIEW_MIME)
        if view:
            assert view["model_id"] in texts, f"cell {index}: widget {view} not in the saved state"
            found.append(texts[view["model_id"]])
        elif 'class="trainjob-' in data.get("text/html", ""):
            found.append(data.get("text/plain", ""))
    return found


def html_of_cell(nb: Any, index: int) -> str:
    """The ``text/html`` of the cell's outputs (the frozen views), joined."""
    return "".join(
        (output.get("data") or {}).get("text/html", "")
        for output in nb.cells[index].get("outputs", [])
    )


def index_of(nb: Any, first_line: str) -> int:
    """The index of the first code cell whose source starts with ``first_line``."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.source.startswith(first_line):
            return index
    raise AssertionError(f"no code cell starting with {first_line!r}")
