"""Resolve a pod target spec into pods of a TrainJob.

A spec is one of (or a comma-separated list / a sequence of):

- ``trainer`` (the default): the session's trainer pod;
- ``all``: every pod of the job (terminating pods left out);
- a role (replicated-job name, e.g. ``node``, ``launcher``): all of its pods;
- a role and index (``node-2``, ``launcher-0``): the index counts the role's pods ordered by
  JobSet job index, then Job completion index (for one Job per role it is the completion index);
- a pod name.

Roles and indexes come from the JobSet labels on the pods (reference.md section 2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from kubernetes.client import ApiClient

from ..errors import InvalidInputError
from ..exec.fanout import PodCommand
from ..kube.names import COMPLETION_INDEX, JOB_INDEX_LABEL, RJOB_LABEL, jobset_selector, pods_path
from ..kube.objects import is_terminating, pod_name, pod_phase
from ..kube.requests import request
from ..kube.watch import Watcher
from ..result import PodRef
from .trainer_pod import LAUNCHER, TRAINER_CONTAINER

TRAINER = "trainer"


ALL = "all"


_ROLE_INDEX = re.compile(r"^(?P<role>.+)-(?P<index>\d+)$")


TargetSpec = str | Sequence[str] | Sequence[PodRef] | None


def job_pods_watcher(api: ApiClient, namespace: str, job: str) -> Watcher:
    """A watch of TrainJob ``job``'s pods (by the JobSet name label)."""
    return Watcher(
        api,
        pods_path(namespace),
        resource="pods",
        namespace=namespace,
        label_selector=jobset_selector(job),
    )


def list_job_pods(api: ApiClient, namespace: str, job: str) -> list[dict[str, Any]]:
    """Every pod of TrainJob ``job`` (selected by the JobSet name label)."""
    data = request(
        api,
        "GET",
        pods_path(namespace),
        verb="list",
        resource="pods",
        namespace=namespace,
        query=[("labelSelector", jobset_selector(job))],
    )
    return list(data.get("items") or [])


def _int_label(pod: Mapping[str, Any], key: str) -> int:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(key)
    if value is None:
        value = (meta.get("annotations") or {}).get(key)
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def default_container(pod: Mapping[str, Any]) -> str | None:
    """A pod's default exec container: ``node`` when present, else its first one."""
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    if not names:
        return None
    return TRAINER_CONTAINER if TRAINER_CONTAINER in names else names[0]


def pod_refs(pods: Sequence[Mapping[str, Any]]) -> list[PodRef]:
    """Live pods as :class:`PodRef`, launcher first, then by role and index."""
    by_role: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        if is_terminating(pod):
            continue
        role = ((pod.get("metadata") or {}).get("labels") or {}).get(RJOB_LABEL) or "pod"
        by_role.setdefault(str(role), []).append(pod)
    refs: list[PodRef] = []
    for role in sorted(by_role, key=lambda r: (r != LAUNCHER, r)):
        members = sorted(
            by_role[role],
            key=lambda p: (
                _int_label(p, JOB_INDEX_LABEL),
                _int_label(p, COMPLETION_INDEX),
                pod_name(p),
            ),
        )
        refs += [
            PodRef(pod_name(p), role, i, pod_phase(p), default_container(p))
            for i, p in enumerate(members)
        ]
    return refs


def split_spec(spec: TargetSpec) -> list[str]:
    """``"a, b"`` or ``["a", "b,c"]`` -> ``["a", "b", "c"]``; None -> ``["trainer"]``."""
    if spec is None:
        return [TRAINER]
    items = [spec] if isinstance(spec, str) else list(spec)
    parts: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise InvalidInputError(f"pod targets must be strings, got {type(item).__name__}")
        parts += [p.strip() for p in item.split(",") if p.strip()]
    if not parts:
        raise InvalidInputError("empty pod target: give trainer, all, a role, role-N or a pod name")
    return parts


def names_one_pod(spec: TargetSpec, refs: Sequence[PodRef]) -> bool:
    """True when ``spec`` names one pod by its nature (``trainer``, ``role-N``, a pod name),
    not a group (``all``, a bare role, several parts) that happens to hold one pod."""
    parts = split_spec(spec)
    if len(parts) != 1 or parts[0] == ALL:
        return False
    if parts[0] == TRAINER:
        return True
    names = {r.name for r in refs}
    return parts[0] in names or parts[0] not in {r.role for r in refs}


def _available(refs: Sequence[PodRef]) -> str:
    roles: dict[str, int] = {}
    for ref in refs:
        roles[ref.role] = roles.get(ref.role, 0) + 1
    shown = [TRAINER, ALL]
    for role, count in roles.items():
        shown.append(f"{role} ({role}-0..{role}-{count - 1})" if count > 1 else f"{role}-0")
    return ", ".join(shown) + ", or a pod name"


def resolve(spec: TargetSpec, refs: Sequence[PodRef], trainer_pod: str | None) -> list[PodRef]:
    """The pods ``spec`` names, in ``refs`` order for ``all``/roles, without duplicates.

    Raises :class:`InvalidInputError` naming the available targets when a part matches nothing.
    """
    by_name = {r.name: r for r in refs}
    roles = {r.role for r in refs}
    chosen: list[PodRef] = []
    for part in split_spec(spec):
        if part == ALL:
            matches = list(refs)
        elif part == TRAINER:
            if trainer_pod is None:
                raise InvalidInputError("the job has no trainer pod yet; check session.status()")
            matches = [by_name.get(trainer_pod) or PodRef(trainer_pod, TRAINER, 0, "Unknown")]
        elif part in by_name:
            matches = [by_name[part]]
        elif part in roles:
            matches = [r for r in refs if r.role == part]
        else:
            m = _ROLE_INDEX.match(part)
            matches = []
            if m and m["role"] in roles:
                matches = [r for r in refs if r.role == m["role"] and r.index == int(m["index"])]
            if not matches:
                if not refs:
                    raise InvalidInputError(
                        f"no pod matches target {part!r}: the job has no pods; check "
                        "session.status()"
                    )
                raise InvalidInputError(
                    f"no pod matches target {part!r}; available: {_available(refs)}"
                )
        for ref in matches:
            if ref not in chosen:
                chosen.append(ref)
    return chosen


def pod_commands(
    refs: Sequence[PodRef], container: str | None, trainer_container: str
) -> list[PodCommand]:
    """Per-pod exec targets: the given container, else the pod's own default (the session's
    container for the trainer)."""
    out = []
    for ref in refs:
        default = trainer_container if ref.role == TRAINER else ref.container
        out.append(
            PodCommand(ref.name, container or default, "" if ref.role == TRAINER else ref.label)
        )
    return out


def wants_multi(pods: TargetSpec) -> bool:
    """True when ``execute(pods=...)`` returns a :class:`MultiExecResult` (not just the trainer)."""
    if is_resolved(pods):
        return True
    return pods is not None and split_spec(pods) != [TRAINER]


def is_resolved(spec: object) -> TypeGuard[Sequence[PodRef]]:
    """True for a list of :class:`PodRef` (what ``session.pods()`` returned): no lookup needed."""
    return (
        isinstance(spec, (list, tuple)) and bool(spec) and all(isinstance(r, PodRef) for r in spec)
    )


def resolve_pods(
    api: ApiClient, namespace: str, job: str, spec: TargetSpec, trainer_pod: str | None
) -> list[PodRef]:
    """List the job's pods and resolve ``spec`` against them (``trainer`` and resolved
    :class:`PodRef` lists need no listing)."""
    if is_resolved(spec):
        return list(spec)
    if split_spec(spec) == [TRAINER] and trainer_pod is not None:
        return [PodRef(trainer_pod, TRAINER, 0, "Running")]
    return resolve(spec, pod_refs(list_job_pods(api, namespace, job)), trainer_pod)
