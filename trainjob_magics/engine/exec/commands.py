"""What keeps a session honest about its remote side: interruptible commands, heartbeats,
idle release, and a create that is safe to retry.

:class:`~trainjob_magics.engine.session.TrainJobSession` calls these; they only use the session's
public attributes plus ``_exec``, ``_inflight`` and ``_heartbeat``.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from typing import Any

from ..errors import (
    CommandInterruptedError,
    ConnectionLostError,
    ExecTimeoutError,
)
from ..result import ExecResult, StopReport
from .client import LOST_HINT, OnOutput
from .scripts import new_exec_id, wants_wrapper, wrap
from .stop import stop_command, stop_summary


# -- commands ----------------------------------------------------------------------------------
def run_command(
    session: Any,
    pod: str,
    argv: Sequence[str],
    *,
    container: str | None,
    stdin: bytes | None,
    timeout: float | None,
    on_output: OnOutput | None,
    exec_id: str | None = None,
    max_memory_output: int | None = None,
) -> ExecResult:
    """Run ``argv`` in ``pod``; shell commands run under the pid-file wrapper (as ``exec_id``
    when given) so that their whole process tree can be stopped.

    A KeyboardInterrupt here (or ``session.interrupt()`` from another thread) stops it and
    raises :class:`CommandInterruptedError`; a timeout stops it before raising
    :class:`ExecTimeoutError`; a dropped connection leaves it registered so that
    ``session.interrupt()`` can still stop it. Every error keeps the output so far in
    ``.partial``."""
    if not wants_wrapper(argv):
        exec_id = None
    elif exec_id is None:
        exec_id = new_exec_id()
    run_argv = wrap(exec_id, argv) if exec_id else list(argv)
    keep_registered = False
    if exec_id:
        session._inflight[exec_id] = (pod, container)
    try:
        return session._exec.run(
            session.namespace,
            pod,
            run_argv,
            container=container,
            stdin=stdin,
            timeout=timeout,
            on_output=on_output,
            max_memory_output=max_memory_output,
        )
    except KeyboardInterrupt as exc:
        partial = getattr(exc, "partial", None)
        reports = interrupt(session, only=exec_id) if exec_id else []
        raise CommandInterruptedError(
            interrupted_message(pod, reports, wrapped=exec_id is not None),
            partial=partial,
            reports=reports,
        ) from None
    except ExecTimeoutError as exc:
        if not exec_id:
            raise
        reports = interrupt(session, only=exec_id)
        raise ExecTimeoutError(
            timeout_message(pod, timeout, reports), partial=exc.partial, reports=reports
        ) from None
    except ConnectionLostError as exc:
        if not exec_id:
            raise
        keep_registered = True  # it may still run: session.interrupt() can stop it
        raise ConnectionLostError(
            str(exc).replace(LOST_HINT, f"stop it with session.interrupt(), or {LOST_HINT}"),
            partial=exc.partial,
        ) from None
    finally:
        if exec_id and not keep_registered:
            session._inflight.pop(exec_id, None)


def interrupted_message(pod: str, reports: list[StopReport], *, wrapped: bool = True) -> str:
    """One line saying what the interrupt did to the remote command."""
    if not wrapped:
        return (
            f"interrupted: stopped reading; the command (not run by a shell, so it has no pid "
            f"file) may still be running in pod {pod}"
        )
    return "interrupted: " + stop_summary(f"in pod {pod}", reports)


def timeout_message(pod: str, timeout: float | None, reports: list[StopReport]) -> str:
    """One line for a timeout that stopped (or tried to stop) the remote command."""
    limit = f"{timeout:g}s" if timeout is not None else "its timeout"
    return f"the command did not finish within {limit}: " + stop_summary(f"in pod {pod}", reports)


class SessionRunner:
    """An ``ExecClient``-like ``run`` through :func:`run_command`, for a group of commands (one
    per pod): each is wrapped and stopped on timeout; :meth:`interrupt` stops all of them and
    keeps the group from starting more."""

    def __init__(self, session: Any, max_memory_output: int | None = None) -> None:
        self.session = session
        self.max_memory_output = max_memory_output
        self.exec_ids: list[str] = []
        self.cancelled = False
        self._lock = threading.Lock()

    def run(
        self,
        namespace: str,
        pod: str,
        argv: Sequence[str],
        *,
        container: str | None = None,
        stdin: bytes | None = None,
        **options: Any,
    ) -> ExecResult:
        """Run ``argv`` in ``pod`` (``timeout``, ``on_output`` as for ``ExecClient.run``)."""
        exec_id = new_exec_id() if wants_wrapper(argv) else None
        with self._lock:
            if self.cancelled:
                raise CommandInterruptedError(f"interrupted: the command never started in {pod}")
            if exec_id:
                self.exec_ids.append(exec_id)
                self.session._inflight[exec_id] = (pod, container)
        return run_command(
            self.session,
            pod,
            argv,
            container=container,
            stdin=stdin,
            timeout=options.get("timeout"),
            on_output=options.get("on_output"),
            exec_id=exec_id,
            max_memory_output=self.max_memory_output,
        )

    def interrupt(self) -> list[StopReport]:
        """Stop every command of the group still running; no new ones start."""
        with self._lock:
            self.cancelled = True
            ids = set(self.exec_ids)
        return interrupt(self.session, only=ids) if ids else []


def interrupt(session: Any, only: str | Collection[str] | None = None) -> list[StopReport]:
    """Stop the session's running commands (all, or those with the exec ids ``only``), each
    with SIGINT, then SIGTERM, then SIGKILL; returns one report per command."""
    wanted = {only} if isinstance(only, str) else only
    targets = [
        (eid, pod, container)
        for eid, (pod, container) in list(session._inflight.items())
        if wanted is None or eid in wanted
    ]
    reports: list[StopReport | None] = [None] * len(targets)

    def stop(i: int, eid: str, pod: str, container: str | None) -> None:
        reports[i] = stop_command(session._exec, session.namespace, pod, container, eid)
        if reports[i].stopped:  # type: ignore[union-attr]
            session._inflight.pop(eid, None)

    threads = [
        threading.Thread(target=stop, args=(i, *t), daemon=True, name="trainjob-stop")
        for i, t in enumerate(targets)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return [
        r or StopReport(pod, eid, False, "the stopper did not answer in time")
        for r, (eid, pod, _c) in zip(reports, targets, strict=True)
    ]
