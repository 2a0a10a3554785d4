"""What the kernel tells the Jupyter server extension (the sidebar and the live panels): the
namespaces its sessions use (a file beside its connection file), and on each session's TrainJob
when the last command started, the idle stop and what closed it. Best effort: a note that
cannot be written never fails a magic."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from ..engine import note_session

log = logging.getLogger(__name__)


def _runtime_dir(shell: Any) -> str | None:
    kernel = getattr(shell, "kernel", None)
    app = getattr(getattr(kernel, "parent", None), "connection_file", None)
    path = app or getattr(getattr(shell, "config", None), "connection_file", None)
    with contextlib.suppress(Exception):
        from ipykernel.connect import get_connection_file

        path = path or get_connection_file()
    return os.path.dirname(os.path.abspath(path)) if isinstance(path, str) and path else None


def note_namespace(shell: Any, namespace: str) -> None:
    """Let the server extension watch ``namespace`` (the kernel's runtime directory)."""
    from ..jupyter.kernels_file import note_namespace as write

    where = _runtime_dir(shell)
    if where:
        write(where, namespace)


def _background(session: Any, **notes: Any) -> None:
    def run() -> None:
        try:
            note_session(session, **notes)
        except Exception as exc:  # the sidebar's idle time is stale; nothing else breaks
            log.debug("could not note %s on the TrainJob: %s", sorted(notes), exc)

    threading.Thread(target=run, daemon=True, name="tjm-note").start()


def note_command(session: Any) -> None:
    """The session was connected (or attached) just now: its last-command time starts there
    (the engine writes each command's start and end itself)."""
    _background(session, last_command=datetime.now(timezone.utc))


def note_idle_stop(session: Any, seconds: float | None) -> None:
    _background(session, idle_stop=seconds or 0.0)


def closed_by_note(session: Any, by: str) -> dict[str, str]:
    """The keyword of ``session.close`` that notes what closes it (the engine writes it once
    the close goes ahead, before the deletion); none for a session without a TrainJob."""
    if not by or not hasattr(session, "api_client"):
        return {}
    return {"closed_by": by}


_forwards_lock = threading.Lock()


def note_forwards(session: Any, link: Callable[[Any], str]) -> None:
    """The session's open forwards, for the sidebar to list and open (``link(forward)``: the
    link the kernel shows for it), in the background: each write reads the forwards open then
    (one at a time), so the last one written is the newest."""

    def run() -> None:
        with _forwards_lock:
            open_ones = [f for f in list(getattr(session, "forwards", []) or []) if not f.closed]
            rows = [
                {"localPort": f.local_port, "port": f.port, "pod": f.pod, "link": link(f)}
                for f in open_ones
            ]
            try:
                note_session(session, forwards=rows)
            except Exception as exc:  # the sidebar lists stale forwards; nothing else breaks
                log.debug("could not note the forwards on the TrainJob: %s", exc)

    threading.Thread(target=run, daemon=True, name="tjm-note-forwards").start()
