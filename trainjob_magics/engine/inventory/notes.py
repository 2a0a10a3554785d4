"""The annotations a kernel writes on its session's TrainJob for the sidebar and live panels:
when the last command ran, the idle stop, and what closed it."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Protocol

from kubernetes.client import ApiClient

from ..kube.names import (
    CLOSED_BY_ANNOTATION,
    IDLE_STOP_ANNOTATION,
    LAST_COMMAND_ANNOTATION,
    TRAINJOB_RESOURCE,
    trainjob_path,
)
from ..kube.requests import request

MERGE_PATCH = "application/merge-patch+json"


class NamedJob(Protocol):
    """What a TrainJobSession offers here."""

    api_client: ApiClient
    namespace: str
    name: str


def rfc3339(when: datetime) -> str:
    """UTC, seconds, ``Z``."""
    return when.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def annotate(api: ApiClient, namespace: str, name: str, notes: dict[str, str | None]) -> None:
    """Merge ``notes`` into the TrainJob's annotations (None removes one); one PATCH, no retry."""
    request(
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
) -> None:
    """Write what the sidebar shows about ``session`` (a TrainJobSession) on its TrainJob."""
    notes: dict[str, str | None] = {}
    if last_command is not None:
        notes[LAST_COMMAND_ANNOTATION] = rfc3339(last_command)
    if idle_stop is not None:
        notes[IDLE_STOP_ANNOTATION] = f"{idle_stop:g}" if idle_stop > 0 else None
    if closed_by is not None:
        notes[CLOSED_BY_ANNOTATION] = closed_by
    if notes:
        annotate(session.api_client, session.namespace, session.name, notes)
