"""Drive the IPython extension in-process: an InteractiveShell with trainjob_magics loaded."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from typing import Any

from benchmarks import fixtures

RUNTIME = "torch-distributed"


class NullWriter(io.TextIOBase):
    """A stdout that discards text (counts characters), so terminal speed is not measured."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, s: str) -> int:
        self.chars += len(s)
        return len(s)

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def quiet() -> Iterator[NullWriter]:
    """Send stdout to a NullWriter for the duration."""
    sink = NullWriter()
    old = sys.stdout
    sys.stdout = sink
    try:
        yield sink
    finally:
        sys.stdout = old


def make_shell(kubeconfig: str, widgets: str = "off", namespace: str = "") -> Any:
    """The InteractiveShell singleton with the extension loaded and pointed at the cluster
    (``namespace``: new sessions' namespace; empty: the kubeconfig context's)."""
    fixtures.magics_available()
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("trainjob_magics")
    set_widgets(shell, widgets)
    shell.run_line_magic("config", f"TrainJobMagics.kubeconfig = {kubeconfig!r}")
    shell.run_line_magic("config", f"TrainJobMagics.namespace = {namespace!r}")
    return shell


def set_widgets(shell: Any, mode: str) -> None:
    """`%config TrainJobMagics.widgets = 'on'|'off'`."""
    shell.run_line_magic("config", f"TrainJobMagics.widgets = {mode!r}")


def connect(shell: Any, runtime: str = RUNTIME, nodes: int = 1) -> None:
    """`%trainjob_connect RUNTIME --nodes N`."""
    with quiet():
        shell.run_line_magic("trainjob_connect", f"{runtime} --nodes {nodes}")


def close(shell: Any) -> None:
    """`%trainjob_close`."""
    with contextlib.suppress(Exception), quiet():
        shell.run_line_magic("trainjob_close", "")


def cell(shell: Any, body: str, line: str = "") -> Any:
    """`%%trainjob LINE` + body via run_cell_magic (output discarded)."""
    with quiet():
        return shell.run_cell_magic("trainjob", line, body)


def current_session(shell: Any) -> Any:
    """The engine session behind the magics' default alias (for the session.execute baseline)."""
    from trainjob_magics.magics.extension import loaded_magics

    magics = loaded_magics(shell)
    entry = magics.registry.find() if magics is not None else None
    return entry.session if entry is not None else None


def count_widget_messages() -> tuple[list[int], Any]:
    """Patch ipywidgets' Widget._send to count comm messages; returns (counter, undo)."""
    from ipywidgets.widgets.widget import Widget

    counter = [0]
    orig = Widget._send

    def _send(self: Any, *a: Any, **k: Any) -> Any:
        counter[0] += 1
        return orig(self, *a, **k)

    Widget._send = _send

    def undo() -> None:
        Widget._send = orig

    return counter, undo
