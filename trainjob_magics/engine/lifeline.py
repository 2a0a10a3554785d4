"""What keeps a session honest about its remote side: interruptible commands, heartbeats,
idle release, and a create that is safe to retry.

:class:`~trainjob_magics.engine.session.TrainJobSession` calls these; they only use the session's
public attributes plus ``_exec``, ``_inflight`` and ``_heartbeat``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Sequence
from typing import Any

from kubernetes.client import ApiClient

from .apierrors import request
from .errors import (
    CommandInterruptedError,
    ConnectionLostError,
    ExecTimeoutError,
    IdleReleasedError,
    InvalidInputError,
    PodNotRunningError,
    TrainJobError,
)
from .exec_client import LOST_HINT, OnOutput
from .heartbeat import Heartbeat
from .interrupt import StopReport, stop_command, stop_summary
from .remote import new_exec_id, wants_wrapper, wrap
from .result import ExecResult
from .retry import with_retries
from .trainjob_body import GROUP, OWNER_HOST_ANNOTATION, OWNER_PID_ANNOTATION, trainjob_path

log = logging.getLogger(__name__)

TRAINJOB_RESOURCE = f"trainjobs.{GROUP}"


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


# -- heartbeats and idle release ---------------------------------------------------------------
def start_heartbeat(session: Any) -> Heartbeat | None:
    """Start the heartbeat thread when the session's job runs the idle watchdog."""
    if not session.idle_timeout:
        return None
    return Heartbeat(session, session.idle_timeout).start()


def stop_heartbeat(session: Any) -> None:
    heartbeat = getattr(session, "_heartbeat", None)
    if heartbeat is not None:
        heartbeat.stop()


def raise_if_idle(session: Any, exc: PodNotRunningError) -> None:
    """Raise :class:`IdleReleasedError` when the job ended itself through the idle watchdog."""
    if not session.idle_timeout or isinstance(exc, IdleReleasedError):
        return
    try:
        state = session.status().state
    except TrainJobError:
        return
    if state != "Complete":
        return
    stop_heartbeat(session)
    raise IdleReleasedError(
        f"TrainJob {session.name} ended itself after {session.idle_timeout:g}s without a "
        "heartbeat (idle_timeout) and released its resources; reconnect with "
        "%trainjob_connect (add --replace if the alias is taken) or connect(...)",
    ) from exc


# -- create ------------------------------------------------------------------------------------
def create_trainjob(api: ApiClient, namespace: str, name: str, body: dict[str, Any]) -> Any:
    """POST the TrainJob, retrying 5xx/connection failures; a 409 on a retry is success when
    the existing TrainJob is the one our earlier attempt created (same owner host and pid)."""
    attempts = {"n": 0}

    def once() -> Any:
        attempts["n"] += 1
        try:
            return request(
                api,
                "POST",
                trainjob_path(namespace),
                verb="create",
                resource=TRAINJOB_RESOURCE,
                namespace=namespace,
                name=name,
                body=body,
            )
        except InvalidInputError as exc:
            if exc.status != 409 or attempts["n"] == 1:
                raise
            existing = request(
                api,
                "GET",
                trainjob_path(namespace, name),
                verb="get",
                resource=TRAINJOB_RESOURCE,
                namespace=namespace,
                name=name,
            )
            mine = body["metadata"]["annotations"]
            theirs = (existing.get("metadata") or {}).get("annotations") or {}
            if all(
                theirs.get(k) == mine.get(k) for k in (OWNER_HOST_ANNOTATION, OWNER_PID_ANNOTATION)
            ):
                return existing
            raise

    return with_retries(once, what=f"create TrainJob {name}")


__all__ = [
    "SessionRunner",
    "StopReport",
    "create_trainjob",
    "interrupt",
    "interrupted_message",
    "raise_if_idle",
    "run_command",
    "start_heartbeat",
    "stop_heartbeat",
    "timeout_message",
]
