"""Every TrainJob this project created in a namespace (to find, attach to or close orphans)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubernetes.client import ApiClient

from ..errors import InvalidInputError, PermissionDeniedError
from ..kube import kubeconfig
from ..kube.names import (
    CREATED_BY_ANNOTATION,
    IDLE_ANNOTATION,
    JOBSET_NAME_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_HOST_ANNOTATION,
    OWNER_KERNEL_ANNOTATION,
    OWNER_PID_ANNOTATION,
    TRAINJOB_RESOURCE,
    pods_path,
    trainjob_path,
)
from ..kube.objects import parse_time, pod_phase
from ..kube.requests import request
from ..validation import validate_name, validate_namespace
from .body import runtime_ref
from .lifecycle import delete_trainjob, fetch_trainjob, wait_pods_gone, wait_trainjob_gone


@dataclass
class ManagedTrainJob:
    """One TrainJob created by trainjob-magics, with its owner and state."""

    name: str
    namespace: str
    runtime: str
    state: str  # Running | Pending | Complete | Failed | Suspended | Deleting
    host: str
    pid: str
    user: str
    kernel: str
    created: datetime | None
    idle_timeout: str

    @property
    def mine(self) -> bool:
        """Created by this very process."""
        return self.host == socket.gethostname() and self.pid == str(os.getpid())

    def age(self, now: datetime | None = None) -> float | None:
        """Seconds since creation."""
        if self.created is None:
            return None
        now = now or datetime.now(timezone.utc)
        return max(0.0, (now - self.created).total_seconds())


def job_state(trainjob: Mapping[str, Any], phases: list[str]) -> str:
    """Deleting, Failed, Complete, Suspended, Running (every pod) or Pending."""
    meta = trainjob.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return "Deleting"
    for cond in (trainjob.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Failed", "Complete", "Suspended"):
            return str(cond["type"])
    if phases and all(p == "Running" for p in phases):
        return "Running"
    return "Pending"


def managed_trainjobs(api: ApiClient, namespace: str) -> list[ManagedTrainJob]:
    """TrainJobs labelled ``app.kubernetes.io/managed-by=trainjob-magics``, oldest first."""
    data = request(
        api,
        "GET",
        trainjob_path(namespace),
        verb="list",
        resource=TRAINJOB_RESOURCE,
        namespace=namespace,
        query=[("labelSelector", f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")],
    )
    jobs = list(data.get("items") or [])
    phases: dict[str, list[str]] = {}
    if jobs:
        pods = request(
            api,
            "GET",
            pods_path(namespace),
            verb="list",
            resource="pods",
            namespace=namespace,
            query=[("labelSelector", JOBSET_NAME_LABEL)],
        )
        for pod in pods.get("items") or []:
            owner = ((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL)
            if owner:
                phases.setdefault(owner, []).append(pod_phase(pod))
    out = []
    for job in jobs:
        meta = job.get("metadata") or {}
        notes = meta.get("annotations") or {}
        name = str(meta.get("name") or "")
        out.append(
            ManagedTrainJob(
                name=name,
                namespace=namespace,
                runtime=runtime_ref(job)[0],
                state=job_state(job, phases.get(name, [])),
                host=str(notes.get(OWNER_HOST_ANNOTATION, "")),
                pid=str(notes.get(OWNER_PID_ANNOTATION, "")),
                user=str(notes.get(CREATED_BY_ANNOTATION, "")),
                kernel=str(notes.get(OWNER_KERNEL_ANNOTATION, "")),
                created=parse_time(meta.get("creationTimestamp")),
                idle_timeout=str(notes.get(IDLE_ANNOTATION, "")),
            )
        )
    out.sort(key=lambda j: (j.created or datetime.min.replace(tzinfo=timezone.utc), j.name))
    return out


def list_trainjobs(
    namespace: str | None = None,
    *,
    context: str | None = None,
    config_file: str | None = None,
) -> list[ManagedTrainJob]:
    """Every TrainJob trainjob-magics created in ``namespace`` (default: the kubeconfig's)."""
    if namespace is not None:
        validate_namespace(namespace)
    api, default_namespace = kubeconfig.load(config_file, context)
    try:
        return managed_trainjobs(api, namespace or default_namespace)
    finally:
        api.close()


def find_trainjobs(
    namespaces: Iterable[str | None],
    *,
    context: str | None = None,
    config_file: str | None = None,
    problems: list[str] | None = None,
) -> tuple[list[ManagedTrainJob], list[str]]:
    """Every TrainJob trainjob-magics created in these namespaces (None: the kubeconfig's), and
    the namespaces searched, each once, in order. With ``problems`` (a list) and more than one
    namespace, a namespace the user may not list adds one line to it instead of failing."""
    wanted = list(namespaces) or [None]
    for ns in wanted:
        if ns is not None:
            validate_namespace(ns)
    api, default_namespace = kubeconfig.load(config_file, context)
    searched = list(dict.fromkeys(ns or default_namespace for ns in wanted))
    jobs: list[ManagedTrainJob] = []
    try:
        for ns in searched:
            try:
                jobs += managed_trainjobs(api, ns)
            except PermissionDeniedError as exc:
                # one namespace the user may not list is one line, not the whole answer
                if problems is None or len(searched) == 1:
                    raise
                problems.append(f"namespace {ns}: {exc}")
    finally:
        api.close()
    return jobs, searched


def close_trainjob(
    name: str,
    namespace: str | None = None,
    *,
    context: str | None = None,
    config_file: str | None = None,
    timeout: float = 180.0,
) -> str:
    """Delete a TrainJob this project created (any owner) and wait for its pods; returns one
    line saying what happened. Raises NotFoundError when there is no such TrainJob and
    InvalidInputError when it was not created by trainjob-magics."""
    validate_name(name)
    if namespace is not None:
        validate_namespace(namespace)
    api, default_namespace = kubeconfig.load(config_file, context)
    ns = namespace or default_namespace
    try:
        job = fetch_trainjob(api, ns, name)
        labels = (job.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            raise InvalidInputError(
                f"TrainJob {name} in namespace {ns} was not created by trainjob-magics; "
                f"delete it yourself with `kubectl delete trainjob {name} -n {ns}`"
            )
        deadline = time.monotonic() + timeout
        delete_trainjob(api, ns, name)
        # the TrainJob first (background deletion: at once), then its pods, which the garbage
        # collector deletes after it (lifecycle.DELETE_BODY says why not foreground)
        if wait_trainjob_gone(api, ns, name, deadline) and wait_pods_gone(api, ns, name, deadline):
            return f"Closed TrainJob {name} in namespace {ns} (deleted, its pods are gone)."
        return (
            f"TrainJob {name} in namespace {ns} is being deleted; its pods were still there "
            f"after {timeout:g}s"
        )
    finally:
        api.close()


def abandon_trainjob(
    name: str,
    namespace: str | None = None,
    *,
    context: str | None = None,
    config_file: str | None = None,
) -> bool:
    """Ask for the deletion of a TrainJob whose connect was given up (no wait); False when it
    does not exist (yet)."""
    validate_name(name)
    if namespace is not None:
        validate_namespace(namespace)
    api, default_namespace = kubeconfig.load(config_file, context)
    try:
        return delete_trainjob(api, namespace or default_namespace, name)
    finally:
        api.close()
