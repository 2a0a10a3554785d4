"""Per-kernel session registry: named sessions, default = last connected, close on exit/reset."""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..engine import DetachedRunError
from .failures import TrainJobUsageError
from .sidebar_notes import closed_by_note


@dataclass
class Entry:
    """One named session and the settings it was connected with."""

    alias: str
    session: Any
    settings: dict[str, Any] = field(default_factory=dict)
    status_widget: Any = None
    views: list[Any] = field(default_factory=list)  # status panels showing this session

    def watch(self, view: Any) -> None:
        """Let ``view`` (anything with ``final(state)``) show how the session ends."""
        if view is not None:
            self.views.append(view)

    def push_status(self, status: Any) -> None:
        """Show a newer status of the session in each of its panels at once
        (``update(status, now=True)``); a panel that fails is skipped."""
        for view in list(self.views):
            with contextlib.suppress(Exception):
                view.update(status, now=True)

    def push_final(self, state: str, note: str = "", cause: str = "") -> None:
        """Show the session's final state ("Deleted", "Closed at kernel exit", ...) in every
        panel of it (which then ignores later updates); ``cause``: what ended it ("deleted by
        %trainjob_close"), told with the time since the panel saw it ready. A panel that fails
        is skipped."""
        views, self.views = self.views, []
        for view in views:
            with contextlib.suppress(Exception):
                view.final(state, note, cause=cause)


@dataclass
class CloseReport:
    """Outcome of closing one session."""

    alias: str
    name: str
    error: str = ""
    left: str = ""  # left running: its detached run lives (what the line says)
    refused: str = ""  # %trainjob_close without --force: what it would kill

    def line(self) -> str:
        """``Closed session 'a' (TrainJob x deleted).`` or why it could not be closed."""
        if self.left or self.refused:
            return self.left or self.refused
        if self.error:
            return f"Could not close session {self.alias!r} (TrainJob {self.name}): {self.error}"
        return f"Closed session {self.alias!r} (TrainJob {self.name} deleted)."


def session_name(session: Any) -> str:
    """The TrainJob name of a session (``?`` when unknown)."""
    return str(getattr(session, "name", "") or "?")


class SessionRegistry:
    """Holds this kernel's sessions by alias; the default is the last one connected."""

    def __init__(self, exit_timeout: Callable[[], float] = lambda: 4.0) -> None:
        self.exit_timeout = exit_timeout  # seconds per session at interpreter exit (read then)
        self._entries: dict[str, Entry] = {}
        self._lock = threading.RLock()
        _ALL.add(self)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, alias: object) -> bool:
        return alias in self._entries

    def entries(self) -> list[Entry]:
        """Entries in connection order (the last one is the default)."""
        with self._lock:
            return list(self._entries.values())

    @property
    def default_alias(self) -> str | None:
        """Alias of the last connected session still open."""
        with self._lock:
            return next(reversed(self._entries), None) if self._entries else None

    def add(self, alias: str, session: Any, settings: dict[str, Any] | None = None) -> Entry:
        """Register (or re-register) a session; it becomes the default."""
        with self._lock:
            self._entries.pop(alias, None)
            entry = Entry(alias, session, dict(settings or {}))
            self._entries[alias] = entry
        _close_first_at_exit()
        return entry

    def find(self, alias: str | None = None) -> Entry | None:
        """The entry for ``alias`` (default session when None), or None."""
        with self._lock:
            key = alias if alias is not None else self.default_alias
            return self._entries.get(key) if key is not None else None

    def get(self, alias: str | None = None) -> Entry:
        """Like ``find`` but raises a one-line ``UsageError`` naming the known aliases."""
        entry = self.find(alias)
        if entry is not None:
            return entry
        if not self._entries:
            raise TrainJobUsageError(
                "no TrainJob session in this kernel: start one with %trainjob_connect RUNTIME"
            )
        known = ", ".join(self._entries)
        raise TrainJobUsageError(f"no session named {alias!r}; open sessions: {known}")

    def remove(self, alias: str) -> Entry | None:
        """Forget a session without closing it."""
        with self._lock:
            return self._entries.pop(alias, None)

    def close(
        self,
        alias: str | None = None,
        timeout: float | None = None,
        by: str = "",
        *,
        force: bool = False,
    ) -> CloseReport:
        """Close one session (default when None) and forget it, even when closing failed;
        ``by``: what closes it (``%trainjob_close``), said in its panels. A live detached run
        is killed only with ``force``: ``%trainjob_close`` keeps the session and reports what
        it would kill (``refused``); anything else leaves the job running (``left``)."""
        entry = self.get(alias)
        report = _close_entry(entry, timeout, by=by, force=force)
        if not report.refused:
            self.remove(entry.alias)
        return report

    def close_all(
        self,
        timeout: float | None = None,
        final_state: str = "Deleted",
        by: str = "",
        *,
        force: bool = False,
    ) -> list[CloseReport]:
        """Close every session concurrently; waits at most about ``timeout`` seconds overall.

        Their widgets then show ``final_state`` ("Closed at kernel exit" on shutdown). A
        session whose detached run lives is kept (``%trainjob_close``) or left (anything else)
        unless ``force``, as :meth:`close` does."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        if not entries:
            return []
        reports: dict[str, CloseReport] = {}

        def run(e: Entry) -> None:
            reports[e.alias] = _close_entry(e, timeout, final_state, by, force)

        threads = [
            threading.Thread(target=run, args=(e,), daemon=True, name=f"trainjob-close-{e.alias}")
            for e in entries
        ]
        for t in threads:
            t.start()
        wait = None if timeout is None else timeout + 5.0
        for t in threads:
            t.join(wait)
        with self._lock:
            for e in entries:
                if reports.get(e.alias) is not None and reports[e.alias].refused:
                    self._entries.setdefault(e.alias, e)
        return [
            reports.get(e.alias) or CloseReport(e.alias, session_name(e.session), "still closing")
            for e in entries
        ]


def left_line(alias: str, session: Any, error: BaseException) -> str:
    """The one line of a session left alone because its detached run lives."""
    name = session_name(session)
    state = getattr(error, "run", None)
    what = state.summary() if state is not None else str(error)
    return (
        f"Left session {alias!r} running, its TrainJob is not deleted: {what}. Attach with "
        f"%trainjob_connect --attach {name}; end it with %trainjob_close {name} --force"
    )


def _close_entry(
    entry: Entry,
    timeout: float | None,
    final_state: str = "Deleted",
    by: str = "",
    force: bool = False,
) -> CloseReport:
    name = session_name(entry.session)
    kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    if force:
        kwargs["force"] = True
    # what closes it, noted on the TrainJob by the engine once the close goes ahead (a close
    # refused for a live detached run leaves no note: the sidebar read "Closing" for good)
    kwargs.update(
        closed_by_note(entry.session, by or ("kernel exit" if final_state.endswith("exit") else ""))
    )
    try:
        entry.session.close(**kwargs)
    except DetachedRunError as exc:
        if by == "%trainjob_close":
            return CloseReport(entry.alias, name, refused=f"{exc}")
        entry.session.leave()  # kernel exit, restart, %reset, %unload_ext: the run goes on
        line = left_line(entry.alias, entry.session, exc)
        entry.push_final("Left running", line)
        return CloseReport(entry.alias, name, left=line)
    except Exception as exc:
        report = CloseReport(entry.alias, name, f"{type(exc).__name__}: {exc}")
        entry.push_final("Close failed", report.line())
        return report
    if final_state == "Closed at kernel exit":
        by = by or "kernel exit"
    cause = f"deleted by {by}" if by and by.startswith("%") else f"deleted at {by}" if by else ""
    note = f"session {entry.alias!r} closed" if cause else f"TrainJob {name} deleted"
    entry.push_final(
        final_state, note if cause else f"{note}; session {entry.alias!r} closed", cause
    )
    return CloseReport(entry.alias, name)


# ------------------------------------------------------------ process-wide cleanup

_ALL: weakref.WeakSet[SessionRegistry] = weakref.WeakSet()


def close_all_registries(
    timeout: float | None = None, report: Callable[[str], Any] | None = None
) -> None:
    """Close the sessions of every registry of this process (atexit), each registry with its
    own exit timeout unless ``timeout`` is given."""
    for reg in list(_ALL):
        wait = reg.exit_timeout() if timeout is None else timeout
        for rep in reg.close_all(timeout=wait, final_state="Closed at kernel exit"):
            if report is not None:
                with contextlib.suppress(Exception):
                    report(rep.line())


class _NoWaitWarnings(logging.Filter):
    """At interpreter exit the TrainJobs are deleted (that is what is reported); how waiting
    for their pods went is no news then, and the process may be tearing down its sockets."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is being deleted but" not in str(record.msg)


def _at_exit() -> None:
    import sys

    quiet = _NoWaitWarnings()
    session_log = logging.getLogger("trainjob_magics.engine.session")
    session_log.addFilter(quiet)
    try:
        close_all_registries(report=lambda line: print(line, file=sys.stderr))
    finally:
        session_log.removeFilter(quiet)


def _close_first_at_exit() -> None:
    """Move our exit hook to the front: atexit runs hooks last-registered first, and the
    kubernetes client registers the removal of its kubeconfig temp files (the CA and client
    certificate data the session's TLS reads) when it first loads a kubeconfig, after this
    module was imported. Run after that, the close found no CA file and left the TrainJob."""
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)


atexit.register(_at_exit)


# ------------------------------------------------------------ shell / kernel hooks


def install_hooks(shell: Any, on_close: Callable[[str], None]) -> None:
    """Close the shell's sessions on ``shell.reset`` (``%reset``) and kernel shutdown/restart.

    ``on_close(reason)`` does the closing. The wrappers are instance attributes, removed by
    :func:`uninstall_hooks`.
    """
    if "reset" not in vars(shell):
        original_reset = shell.reset

        def reset(*args: Any, **kwargs: Any) -> Any:
            on_close("reset")
            return original_reset(*args, **kwargs)

        reset._trainjob_hook = True  # type: ignore[attr-defined]  # marks our wrapper
        shell.reset = reset
    kernel = getattr(shell, "kernel", None)
    if kernel is not None and "do_shutdown" not in vars(kernel):
        original_shutdown = kernel.do_shutdown

        def do_shutdown(*args: Any, **kwargs: Any) -> Any:
            restart = kwargs.get("restart", args[0] if args else False)
            on_close("restart" if restart else "shutdown")
            return original_shutdown(*args, **kwargs)

        do_shutdown._trainjob_hook = True  # type: ignore[attr-defined]  # marks our wrapper
        with contextlib.suppress(Exception):
            kernel.do_shutdown = do_shutdown


def uninstall_hooks(shell: Any) -> None:
    """Remove the wrappers installed by :func:`install_hooks`."""
    if getattr(vars(shell).get("reset"), "_trainjob_hook", False):
        del shell.reset
    kernel = getattr(shell, "kernel", None)
    if kernel is not None and getattr(vars(kernel).get("do_shutdown"), "_trainjob_hook", False):
        with contextlib.suppress(Exception):
            del kernel.do_shutdown
