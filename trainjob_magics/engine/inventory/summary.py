"""What one session holds, read from the cluster, as the line ``%trainjob_sessions`` and
``%trainjob_status`` print."""

from __future__ import annotations

from ..trainjob.lifecycle import fetch_trainjob
from ..trainjob.targets import list_job_pods
from .notes import NamedJob
from .records import session_record


def holding_text(session: NamedJob) -> str:
    """``8 GPU · 32 CPU · held 2 h 10 min (17.3 GPU-h) · idle 41 min`` (two GETs)."""
    job = fetch_trainjob(session.api_client, session.namespace, session.name)
    pods = list_job_pods(session.api_client, session.namespace, session.name)
    return str(session_record(job, pods)["holds"]["text"])
