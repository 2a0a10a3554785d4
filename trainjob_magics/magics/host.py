"""What the command modules work with: :class:`MagicsHost`, a small explicit object the one
Magics class builds and hands to ``connect``, ``cell``, ``sessions`` and ``files``.

It holds the shell, this kernel's session registry, the live settings (the ``TrainJobMagics``
configurable itself, so ``%config`` changes apply at once), the engine calls, the view
factories and the last cell result. Tests inject their own engine calls or views here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import engine
from .idle_stop import check_not_stopped
from .registry import Entry, SessionRegistry
from .views.frontend import use_widgets
from .views.output import WidgetOutputView
from .views.pods import PrefixedTextView, TabbedWidgetView
from .views.progress import ProgressView
from .views.status import ConnectStatusView
from .views.text import TextOutputView


@dataclass
class EngineCalls:
    """The engine functions the magics call (replace them to test the magics alone)."""

    connect: Callable[..., Any] = engine.connect
    attach: Callable[..., Any] = engine.attach
    check_runtime: Callable[..., None] = engine.check_runtime
    abandon: Callable[..., bool] = engine.abandon_trainjob
    new_name: Callable[[], str] = engine.new_trainjob_name
    find_trainjobs: Callable[..., Any] = engine.find_trainjobs
    close_trainjob: Callable[..., str] = engine.close_trainjob
    detached_run_of: Callable[..., Any] = engine.detached_run_of
    holding_text: Callable[[Any], str] = engine.holding_text


@dataclass
class ViewFactory:
    """The view classes the magics build (replace them to observe what a cell shows)."""

    text_output: type = TextOutputView
    widget_output: type = WidgetOutputView
    text_pods: type = PrefixedTextView
    widget_pods: type = TabbedWidgetView
    progress: type = ProgressView
    connect_status: type = ConnectStatusView


@dataclass
class MagicsHost:
    """The shell, its sessions, the live settings, and how to reach the engine and the views."""

    shell: Any
    settings: Any  # the TrainJobMagics configurable: read at use, never copied
    registry: SessionRegistry
    engine: EngineCalls = field(default_factory=EngineCalls)
    views: ViewFactory = field(default_factory=ViewFactory)
    last_result: Any = None  # the result of this shell's last %%trainjob cell

    def use_widgets(self) -> bool:
        """Whether output goes to widgets (else text), per ``TrainJobMagics.widgets``."""
        return use_widgets(self.shell, self.settings.widgets)

    def entry(self, alias: str | None) -> Entry:
        """The session ``alias`` (default when None), or a one-line usage error (one that
        says so when the session was stopped for being idle)."""
        check_not_stopped(self, alias)
        return self.registry.get(alias)

    def known_aliases(self) -> str:
        """``a, b`` (or ``none``): this kernel's session aliases, for error messages."""
        return ", ".join(e.alias for e in self.registry.entries()) or "none"

    def user_ns(self) -> dict[str, Any]:
        return self.shell.user_ns if self.shell is not None else {}

    def view_limits(self, where: str) -> dict[str, Any]:
        s = self.settings
        return {
            "max_lines": s.display_max_lines,
            "max_line_chars": s.display_max_line_chars,
            "interval": s.update_interval,
            "where": where,
        }

    def output_view(self, where: str) -> Any:
        """A widget output view, or streamed text where no widget front end is present."""
        kind = self.views.widget_output if self.use_widgets() else self.views.text_output
        return kind(**self.view_limits(where))

    def pods_view(self, pods: list[tuple[str, str]], where: str, live_summary: bool = True) -> Any:
        """A tab per pod (widgets) or prefixed lines (text); ``live_summary``: the per-pod
        summary shows while the pods run (a command's, not logs)."""
        if self.use_widgets():
            return self.views.widget_pods(
                pods, live_summary=live_summary, **self.view_limits(where)
            )
        return self.views.text_pods(pods, max_line_chars=self.settings.display_max_line_chars)


__all__ = ["EngineCalls", "MagicsHost", "ViewFactory"]
