"""The panel of one ``%trainjob_forward``: the link, where it goes, the problems its connections
met (each once), an optional IFrame; frozen to static HTML when the forward ends."""

from __future__ import annotations

import html
import sys
import threading
from typing import Any

from .live import PANEL_MIME, panel_ref
from .styles import ERROR_WRAP_CSS, FAIL_COLOUR, MUTED_COLOUR, TEXT_COLOUR, state_badge

IFRAME_HEIGHT = 480


def forward_text(link: str, port: int, pod: str, alias: str) -> str:
    """The one-line description of a live forward."""
    return (
        f"Forwarding {link} -> port {port} of pod {pod} (session {alias!r}); "
        f"stop with %trainjob_forward --stop {port}"
    )


class ForwardPanel:
    """Shows a forward as HTML through a display handle (or as text where there is no
    Jupyter front end)."""

    def __init__(
        self,
        *,
        link: str,
        port: int,
        pod: str,
        alias: str,
        widgets: bool,
        show: bool,
        job: tuple[str, str, str] | None = None,
    ) -> None:
        self.link, self.port, self.pod, self.alias = link, port, pod, alias
        self.show = show
        self.job = job  # (TrainJob name, namespace, uid): the live panel's key
        self.problems: list[str] = []
        self.state = "Forwarding"
        self._lock = threading.Lock()
        self._display: Any = None
        if widgets:
            # static HTML through a display handle, not a widget: a reopened notebook shows it
            # (no "model not found"), and so do nbconvert and VS Code
            from IPython.display import display

            self._display = display(self.bundle(live=True), raw=True, display_id=True)
        else:
            print(self.text())

    def bundle(self, *, live: bool) -> dict[str, Any]:
        """The display: HTML, text and, for the lab extension, the live panel's key and what
        it needs to draw the ended form itself (``forwarding``: this drawing is the live one,
        which the kernel can no longer end once it restarted or the page was reopened)."""
        out: dict[str, Any] = {
            "text/html": self._html(live=live) + ERROR_WRAP_CSS,
            "text/plain": self.text(),
        }
        if self.job is not None:
            name, namespace, uid = self.job
            out[PANEL_MIME] = panel_ref(
                "forward",
                name,
                namespace,
                uid,
                port=self.port,
                link=self.link,
                pod=self.pod,
                alias=self.alias,
                forwarding=live,
            )
        return out

    def text(self) -> str:
        lines = [forward_text(self.link, self.port, self.pod, self.alias)]
        if self.state != "Forwarding":
            lines = [f"{self.state}: {self.link} -> port {self.port} of pod {self.pod}"]
        lines += [f"  ! {p}" for p in self.problems]
        return "\n".join(lines)

    def _html(self, *, live: bool) -> str:
        link = html.escape(self.link, quote=True)
        where = html.escape(f"port {self.port} of pod {self.pod} (session {self.alias!r})")
        anchor = (
            f'<a href="{link}" target="_blank" rel="noopener" '
            f'style="color:var(--jp-content-link-color,rgb(26,95,180))">{link}</a>'
            if live
            else f'<span style="color:{MUTED_COLOUR}">{link}</span>'
        )
        parts = [
            f'<div class="trainjob-forward trainjob-forward-panel" '
            f'style="color:{TEXT_COLOUR};font-size:13px">',
            f"{state_badge(self.state)} {anchor} "
            f'<span style="color:{MUTED_COLOUR}">&#8594; {where}</span>',
        ]
        parts += [
            f'<div class="tjm-forward-problem" style="color:{FAIL_COLOUR};'
            f'white-space:normal;overflow-wrap:break-word">&#9888; {html.escape(p)}</div>'
            for p in self.problems
        ]
        if live and self.show:
            parts.append(
                f'<iframe class="tjm-forward-frame" src="{link}" title="port {self.port}" '
                f'style="width:100%;height:{IFRAME_HEIGHT}px;border-width:1px;'
                "border-style:solid;border-color:var(--jp-border-color1,rgb(189,189,189));"
                'margin-top:4px"></iframe>'
            )
        parts.append("</div>")
        return "".join(parts)

    def problem(self, message: str) -> None:
        """A connection of the forward met ``message`` (called once per distinct problem)."""
        with self._lock:
            self.problems.append(message)
            if self._display is None:
                print(f"%trainjob_forward {self.port}: {message}", file=sys.stderr)
                return
            self._display.update(self.bundle(live=True), raw=True)

    def ended(self, state: str = "Stopped") -> None:
        """The forward is closed: the panel says so and its link and IFrame go."""
        with self._lock:
            if self.state != "Forwarding":
                return
            self.state = state
            if self._display is not None:
                self._display.update(self.bundle(live=False), raw=True)


__all__ = ["ForwardPanel", "forward_text"]
