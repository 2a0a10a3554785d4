"""The status panels of a kernel that restarted or died, marked ended by the kernel after it.

A front end drops what the old kernel sends once a restart from its menu begins: JupyterLab
forgets the display ids it routes updates by, and the cells' message handlers, before it asks
the server to restart. A killed kernel sends nothing at all. So the panels it kept live still
read "Running", and no kernel can update them any more (an update reaches only the displays
made through the page's current connection).

Each kernel's live panels carry its mark (``tjm-k-<KERNEL_MARK>``, views/status.py) and hidden
ended forms. The kernel notes its mark in a file beside its connection file once it shows a live
panel, and whether its sessions were closed when it exits. A restart (or the server's restart
of a dead kernel) keeps the connection file: when the extension loads in the kernel after it,
it reads the note and shows, in the loading cell, one line saying what ended and a style rule
that turns that mark's live panels into their ended form, in the page. The rule is saved with
the notebook and applies again when a trusted notebook is reopened; the panels' own outputs
keep what they last received (a front end's model cannot be changed from the kernel).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from .views.status import ENDED_QUOTES, KERNEL_MARK
from .views.styles import NOTE_STYLE

_noted: set[str] = set()  # note files this process wrote


def note_path(shell: Any) -> Path | None:
    """``<connection file>.trainjob-panels`` of the kernel running ``shell`` (None outside a
    kernel)."""
    app = getattr(getattr(shell, "kernel", None), "parent", None)
    connection = getattr(app, "abs_connection_file", None) or getattr(app, "connection_file", "")
    if not connection:
        return None
    return Path(f"{connection}.trainjob-panels")


def _write(path: Path, closed: bool) -> None:
    with contextlib.suppress(OSError):
        path.write_text(json.dumps({"mark": KERNEL_MARK, "closed": closed}))


def note_live_panels(shell: Any) -> None:
    """This kernel shows a live panel: note its mark (once), for the kernel after it."""
    path = note_path(shell)
    if path is not None and str(path) not in _noted:
        _noted.add(str(path))
        _write(path, closed=False)


def note_exit(shell: Any, restart: bool, closed: bool = True) -> None:
    """The kernel exits with its sessions closed (``closed``; False when one was left running):
    on a restart, say so to the next kernel; for good, remove the note (no kernel comes after
    it)."""
    path = note_path(shell)
    if path is None or str(path) not in _noted:
        return
    if restart:
        _write(path, closed=closed)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def forget(shell: Any) -> None:
    """The extension is unloaded: its panels showed their final state already."""
    path = note_path(shell)
    if path is not None and str(path) in _noted:
        _noted.discard(str(path))
        with contextlib.suppress(OSError):
            path.unlink()


def ended_bundle(mark: str, closed: bool) -> dict[str, str]:
    """The loading cell's output: one line, and the rule showing the ended form of ``mark``'s
    live panels."""
    kind = "closed" if closed else "gone"
    # quoted as the panels show it (ENDED_QUOTES); no "above": the loading cell is often the
    # first one, above the panels
    said = f"its status panels now say '{ENDED_QUOTES[kind]}'"
    if closed:
        line = f"The kernel before this one restarted and closed its sessions: {said}."
    else:
        line = (
            f"The kernel before this one stopped without closing its sessions: {said}; list "
            "them with %trainjob_sessions --all."
        )
    scope = f".trainjob-status .tjm-live.tjm-k-{mark}"
    rule = (
        f"{scope} .tjm-when-live{{display:none!important}}"
        f"{scope} .tjm-when-{kind}{{display:revert!important}}"
    )
    return {
        "text/html": (
            f'<div class="trainjob-kernel-note" style="{NOTE_STYLE}">{line}</div>'
            f"<style>{rule}</style>"
        ),
        "text/plain": line,
    }


def mark_panels_of_the_kernel_before(shell: Any) -> None:
    """On load: the kernel before this one left live panels: show them as ended (see above)."""
    path = note_path(shell)
    if path is None or str(path) in _noted:
        return
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    with contextlib.suppress(OSError):
        path.unlink()
    mark = str(before.get("mark", ""))
    if not mark.isalnum() or mark == KERNEL_MARK:
        return
    from IPython.display import display

    display(ended_bundle(mark, bool(before.get("closed"))), raw=True)


__all__ = [
    "ended_bundle",
    "forget",
    "mark_panels_of_the_kernel_before",
    "note_exit",
    "note_live_panels",
    "note_path",
]
