"""Front-end detection and widget display helpers (widget view + text fallback)."""

from __future__ import annotations

import contextlib
from typing import Any


def has_kernel(shell: Any) -> bool:
    """True inside a Jupyter kernel (ipykernel), False in terminal IPython or a bare shell."""
    return getattr(shell, "kernel", None) is not None


def ipywidgets_available() -> bool:
    """True when ipywidgets imports."""
    try:
        import ipywidgets  # noqa: F401
    except Exception:
        return False
    return True


def use_widgets(shell: Any, mode: str = "auto") -> bool:
    """Whether to render widgets: ``off`` never, ``on`` if ipywidgets imports, ``auto`` in a kernel.

    Terminal IPython has no widget front end; JupyterLab, Notebook 7, VS Code and nbclient talk
    to ipykernel. nbconvert without widget state still gets the text through ``text/plain``.
    """
    mode = (mode or "auto").lower()
    if mode == "off":
        return False
    if mode == "on":
        return ipywidgets_available()
    return has_kernel(shell) and ipywidgets_available()


def widget_bundle(widget: Any, text: str) -> dict[str, Any]:
    """The widget's display bundle with ``text`` as its ``text/plain`` fallback."""
    bundle = dict(widget._repr_mimebundle_() or {})
    bundle["text/plain"] = text
    return bundle


class WidgetDisplay:
    """A widget shown through a display handle, so its text fallback can be updated later."""

    def __init__(self, widget: Any, text: str = "") -> None:
        from IPython.display import display

        self.widget = widget
        self.panel: dict[str, Any] | None = None  # the live key the frozen view carries
        self.handle = display(widget_bundle(widget, text), raw=True, display_id=True)

    def update_text(self, text: str) -> None:
        """Replace the ``text/plain`` fallback (the widget view stays the same model)."""
        if self.handle is not None:
            self.handle.update(widget_bundle(self.widget, text), raw=True)

    def freeze(self, html: str, text: str) -> None:
        """Replace the live widget by static ``text/html`` + ``text/plain`` and close its model.

        A finished result then survives the kernel: a notebook saved without widget state shows
        it in JupyterLab, Notebook 7, nbviewer and GitHub. With :attr:`panel` set, the bundle
        also carries the panel MIME type: the lab extension adds the job's live state above.
        """
        from .live import PANEL_MIME
        from .styles import ERROR_WRAP_CSS

        if self.handle is not None:
            bundle: dict[str, Any] = {"text/html": html + ERROR_WRAP_CSS, "text/plain": text}
            if self.panel is not None:
                bundle[PANEL_MIME] = self.panel
            self.handle.update(bundle, raw=True)
        close_tree(self.widget)


# a widget's attribute naming widgets that are not its children but go with it (a jslink
# between two of its children): closed with it, never left alive pointing at closed models
OWNED = "_trainjob_owned"


def close_tree(widget: Any) -> None:
    """Close ``widget``, every widget below it (through ``children``) and those they own
    (:data:`OWNED`)."""
    todo = [widget]
    while todo:
        item = todo.pop()
        todo.extend(getattr(item, "children", None) or ())
        todo.extend(getattr(item, OWNED, None) or ())
        with contextlib.suppress(Exception):
            item.close()
