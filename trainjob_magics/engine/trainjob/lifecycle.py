"""Create, fetch and delete a TrainJob (create is safe to retry; delete cascades in the
background), and wait until it and its pods are gone."""

from __future__ import annotations

import json
from typing import Any

import urllib3
from kubernetes.client import ApiClient

from ..errors import InvalidInputError, NotFoundError, TrainJobError
from ..kube.names import (
    OWNER_HOST_ANNOTATION,
    OWNER_PID_ANNOTATION,
    TRAINJOB_RESOURCE,
    trainjob_path,
)
from ..kube.requests import request
from ..kube.retry import window_of, with_retries
from ..kube.watch import Watcher, iter_lines
from .targets import job_pods_watcher


# -- create ------------------------------------------------------------------------------------
def create_trainjob(
    api: ApiClient,
    namespace: str,
    name: str,
    body: dict[str, Any],
    *,
    query: list[tuple[str, str]] | None = None,
) -> Any:
    """POST the TrainJob, retrying 5xx/connection failures; a 409 on a retry is success when
    the existing TrainJob is the one our earlier attempt created (same owner host and pid).
    ``query``: e.g. ``fieldValidation=Strict`` (an unknown field is a 422, not dropped), or
    ``dryRun=All`` (validated and admitted, nothing stored)."""
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
                query=query,
            )
        except InvalidInputError as exc:
            if exc.status != 409 or attempts["n"] == 1:
                raise
            existing = fetch_trainjob(api, namespace, name)
            mine = body["metadata"]["annotations"]
            theirs = (existing.get("metadata") or {}).get("annotations") or {}
            if all(
                theirs.get(k) == mine.get(k) for k in (OWNER_HOST_ANNOTATION, OWNER_PID_ANNOTATION)
            ):
                return existing
            raise

    return with_retries(once, what=f"create TrainJob {name}", window=window_of(api))


def fetch_trainjob(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """GET the TrainJob (raises NotFoundError when it does not exist)."""
    return request(
        api,
        "GET",
        trainjob_path(namespace, name),
        verb="get",
        resource=TRAINJOB_RESOURCE,
        namespace=namespace,
        name=name,
    )


def delete_hint(name: str, namespace: str) -> str:
    return f"`kubectl delete trainjob {name} -n {namespace}`"


def wait_pods_gone(api: ApiClient, namespace: str, name: str, deadline: float) -> bool:
    """Watch until no pod of TrainJob ``name`` is left; False on timeout."""
    watcher = job_pods_watcher(api, namespace, name)
    return bool(watcher.run(deadline, lambda: True if not watcher.objects else None))


def wait_trainjob_gone(api: ApiClient, namespace: str, name: str, deadline: float) -> bool:
    """Watch until the TrainJob object itself is gone; False on timeout."""
    watcher = Watcher(
        api,
        trainjob_path(namespace),
        resource=TRAINJOB_RESOURCE,
        namespace=namespace,
        field_selector=f"metadata.name={name}",
    )
    return bool(watcher.run(deadline, lambda: True if name not in watcher.objects else None))


def deleted_version(
    api: ApiClient, namespace: str, name: str, since: str, wait: float = 5.0
) -> dict[str, Any] | None:
    """The TrainJob as it was when it was deleted (its annotations say who closed it), replayed
    by a watch from resourceVersion ``since`` (one the session saw; the API server keeps a few
    minutes of history). None when it cannot be told: no ``since``, history too old (410), no
    permission, no DELETED event within ``wait`` seconds."""
    if not since:
        return None
    query = [
        ("watch", "true"),
        ("fieldSelector", f"metadata.name={name}"),
        ("resourceVersion", since),
        ("timeoutSeconds", str(max(1, int(wait)))),
    ]
    try:
        resp = request(
            api,
            "GET",
            trainjob_path(namespace),
            verb="watch",
            resource=TRAINJOB_RESOURCE,
            namespace=namespace,
            query=query,
            stream=True,
            timeout=(10.0, wait + 5.0),
            in_outage_window=False,
        )
    except TrainJobError:
        return None
    try:
        for line in iter_lines(resp):  # the history since ``since`` comes first
            event = json.loads(line)
            if event.get("type") == "DELETED":
                return dict(event.get("object") or {})
            if event.get("type") == "ERROR":  # 410: the history is gone
                return None
    except (urllib3.exceptions.HTTPError, OSError, ValueError):
        return None
    finally:
        resp.close()
        resp.release_conn()
    return None


# Background deletion: the TrainJob goes at once and the garbage collector removes its JobSet,
# Jobs, pods and MPI secret after it; close() then waits until no pod of it is left. Not
# Foreground: Trainer (v2.1-v2.3 and master, pkg/controller/trainjob_controller.go Reconcile)
# does not skip a TrainJob that carries a deletionTimestamp, so while the garbage collector holds
# the TrainJob for its dependents, Trainer applies the JobSet again after each deletion: new
# JobSets, Jobs and pods, several rounds, and one more JobSet can even appear after the TrainJob
# is gone (seen on the real stack: 50 s and 5 rounds of pods to close a deepspeed session).
DELETE_BODY = {"propagationPolicy": "Background"}


def delete_trainjob(api: ApiClient, namespace: str, name: str) -> bool:
    """Delete a TrainJob (background cascade); False when it was already gone."""
    try:
        request(
            api,
            "DELETE",
            trainjob_path(namespace, name),
            verb="delete",
            resource=TRAINJOB_RESOURCE,
            namespace=namespace,
            name=name,
            body=DELETE_BODY,
        )
    except NotFoundError:
        return False
    return True
