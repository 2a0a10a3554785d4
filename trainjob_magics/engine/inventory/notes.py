"""The annotations a kernel writes on its session's TrainJob for the sidebar and live panels:
when the last command ran, the idle stop, and what closed it."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone
from typing import Any, Protocol

from kubernetes.client import ApiClient

from ..errors import TrainJobError
from ..kube.names import (
    CLOSED_BY_ANNOTATION,
    FORWARDS_ANNOTATION,
    IDLE_STOP_ANNOTATION,
    LAST_COMMAND_ANNOTATION,
    TRAINJOB_RESOURCE,
    trainjob_path,
)
from ..kube.requests import request

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class NamedJob(Protocol):
    """What a TrainJobSession offers here."""

    api_client: ApiClient
    namespace: str
    name: str


def rfc3339(when: datetime) -> str:
    """UTC, seconds, ``Z``."""
    return when.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def annotate(api: ApiClient, namespace: str, name: str, notes: dict[str, str | None]) -> Any:
    """Merge ``notes`` into the TrainJob's annotations (None removes one); one PATCH, no retry.
    Returns the TrainJob as patched."""
    return request(
        api,
        "PATCH",
        trainjob_path(namespace, name),
        verb="patch",
        resource=TRAINJOB_RESOURCE,
        namespace=namespace,
        name=name,
        body={"metadata": {"annotations": notes}},
        content_type=MERGE_PATCH,
        timeout=3.0,
        # best effort, often in the background: an outage is the cell's to announce
        in_outage_window=False,
    )


def note_session(
    session: NamedJob,
    *,
    last_command: datetime | None = None,
    idle_stop: float | None = None,
    closed_by: str | None = None,
    forwards: list[dict[str, Any]] | None = None,
) -> None:
    """Write what the sidebar shows about ``session`` (a TrainJobSession) on its TrainJob;
    ``forwards``: the open forwards (``[]`` removes the note)."""
    notes: dict[str, str | None] = {}
    if forwards is not None:
        notes[FORWARDS_ANNOTATION] = (
            json.dumps(forwards, separators=(",", ":")) if forwards else None
        )
    if last_command is not None:
        notes[LAST_COMMAND_ANNOTATION] = rfc3339(last_command)
    if idle_stop is not None:
        notes[IDLE_STOP_ANNOTATION] = f"{idle_stop:g}" if idle_stop > 0 else None
    if closed_by is not None:  # "" removes it: the job is not being closed after all
        notes[CLOSED_BY_ANNOTATION] = closed_by or None
    if notes:
        job = annotate(session.api_client, session.namespace, session.name, notes)
        version = (
            ((job or {}).get("metadata") or {}).get("resourceVersion")
            if isinstance(job, dict)
            else None
        )
        if version and hasattr(session, "seen_version"):  # where a replay of its end starts
            session.seen_version = str(version)


class LastCommandNotes:
    """Writes, in one background thread, when the session's last command started and ended
    (the sidebar's idle time counts from it): each begin and end is written, none held back a
    minute; a newer time replaces one not written yet. Best effort (a failed PATCH leaves the
    sidebar's idle time stale, nothing else)."""

    def __init__(self, session: NamedJob) -> None:
        self._session = session
        self._cond = threading.Condition()
        self._pending: datetime | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def note(self, when: datetime | None = None) -> None:
        """Write ``when`` (now) as the last command's time, soon."""
        with self._cond:
            if self._stopped:
                return
            self._pending = when or datetime.now(timezone.utc)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="tjm-note")
                self._thread.start()
            self._cond.notify_all()

    def stop(self) -> None:
        """Write nothing more (the session closed or was left)."""
        with self._cond:
            self._stopped, self._pending = True, None
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._pending is None:
                    self._cond.wait(30.0)
                if self._pending is None:  # nothing for a while (or stopped): end the thread
                    self._thread = None
                    return
                when, self._pending = self._pending, None
            try:
                note_session(self._session, last_command=when)
            except TrainJobError as exc:
                log.debug("could not note the last command on %s: %s", self._session.name, exc)
