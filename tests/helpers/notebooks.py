"""Read executed notebooks (nbclient runs with the widget state stored)."""

from __future__ import annotations

from typing import Any

from devtools.notebook_run import WIDGET_VIEW_MIME, extract_widget_texts


def widget_texts_of_cell(nb: Any, index: int) -> list[str]:
    """Texts of the cell's widget views, resolved through the saved widget state only."""
    texts = extract_widget_texts(nb)
    found = []
    for output in nb.cells[index].get("outputs", []):
        view = (output.get("data") or {}).get(WIDGET_VIEW_MIME)
        if view:
            assert view["model_id"] in texts, f"cell {index}: widget {view} not in the saved state"
            found.append(texts[view["model_id"]])
    return found
