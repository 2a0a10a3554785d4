"""Why a pod is not running yet: the scheduler (``PodScheduled=False``, ``FailedScheduling``)
or the kubelet's image pull (``ErrImagePull``, ``ImagePullBackOff``, ``InvalidImageName``),
read from the pod and its Events; and whether waiting longer can help."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..kube.events import Event

IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
HOPELESS = ("InvalidImageName", "ErrImageNeverPull")  # no retry can fix these
DEFAULT_IMAGE_PULL_RETRIES = 3


@dataclass(frozen=True)
class PodProblem:
    """What keeps a pod from running, in one line; ``hopeless``: waiting cannot help (``fix``
    then says what to do instead, when more than the image's fix); ``waits``: what the pod waits
    for, said instead of the reason (a real cluster's unschedulable pod waits for a node)."""

    pod: str
    reason: str
    message: str
    hopeless: bool = False
    fix: str = ""
    waits: str = ""

    def line(self) -> str:
        if self.waits:
            return f"pod {self.pod} {self.waits}: {self.message}"
        return (
            f"pod {self.pod}: {self.reason}: {self.message}"
            if self.message
            else (f"pod {self.pod}: {self.reason}")
        )


def _unscheduled(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("reason") or "Unschedulable"), str(cond.get("message") or "")
    return None


def _image_waiting(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    status = pod.get("status") or {}
    for cs in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_REASONS:
            return str(waiting["reason"]), " ".join(str(waiting.get("message") or "").split())
    return None


# What the scheduler, the Job controller and the kubelet say about objects a pod names that do
# not exist (kube-scheduler VolumeBinding, k8s.io/kubernetes pkg/controller/job, kubelet
# volumemanager and kuberuntime_container "CreateContainerConfigError").
_MISSING_PVC = re.compile(r'persistentvolumeclaim "(?P<name>[^"]+)" not found')
_MISSING_SA = re.compile(r'serviceaccount "(?P<name>[^"]+)" not found')
_MISSING_REF = re.compile(r'(?P<kind>secret|configmap) "(?P<name>[^"]+)" not found')
_MISSING_KEY = re.compile(
    r"couldn't find key (?P<key>\S+) in (?P<kind>Secret|ConfigMap) (?P<ref>\S+)"
)
_KINDS = {"secret": "Secret", "configmap": "ConfigMap"}
_INVALID = re.compile(r'(?:Job\.batch|Pod) "[^"]+" is invalid: .*')
_PLACEMENT = ("didn't match Pod's node affinity/selector", "untolerated taint")


def _missing(message: str, namespace: str) -> str:
    """``PersistentVolumeClaim "x" not found in namespace ns: ...`` for a missing object named
    in ``message``, else ''."""
    where = f" in namespace {namespace}" if namespace else ""
    m = _MISSING_PVC.search(message)
    if m:
        return (
            f'PersistentVolumeClaim "{m["name"]}" not found{where}: create it or fix '
            f"--volume pvc:{m['name']}:..."
        )
    m = _MISSING_SA.search(message)
    if m:
        return (
            f'service account "{m["name"]}" not found{where}: create it or fix '
            f"--service-account {m['name']}"
        )
    m = _MISSING_KEY.search(message)
    if m:
        return f"{m['kind']} {m['ref']} has no key {m['key']}: add it or fix the options"
    m = _MISSING_REF.search(message)
    if m:
        kind = m["kind"]
        return (
            f'{_KINDS[kind]} "{m["name"]}" not found{where}: create it or fix --volume '
            f"{kind}:{m['name']}:... / --env-from {kind}:{m['name']}"
        )
    return ""


def placement_mismatch(message: str) -> bool:
    """True when the scheduler found no node only for node selector/affinity or taints: no
    free room will change that (``0/3 nodes are available: 1 node(s) had untolerated taint
    {gpu: true}, 2 node(s) didn't match Pod's node affinity/selector. preemption: ...``)."""
    head = message.split("preemption:", 1)[0]
    if "nodes are available:" not in head:
        return False
    reasons = [
        r.strip().rstrip(".")
        for r in re.split(r", (?=\d+ )", head.split("nodes are available:", 1)[1])
        if r.strip()
    ]
    return bool(reasons) and all(any(p in r for p in _PLACEMENT) for r in reasons)


def user_error(
    pod: Mapping[str, Any], events: Sequence[Event] = (), *, placement: bool = False
) -> PodProblem | None:
    """A pod that cannot start because of what the session asked for (a missing PVC, Secret,
    ConfigMap; with ``placement``, node selectors/tolerations no node matches): hopeless."""
    meta = pod.get("metadata") or {}
    name, namespace = str(meta.get("name") or "?"), str(meta.get("namespace") or "")
    status = pod.get("status") or {}
    for cs in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") == "CreateContainerConfigError":
            message = " ".join(str(waiting.get("message") or "").split())
            fix = _missing(message, namespace)
            if fix:
                return PodProblem(name, "CreateContainerConfigError", message, True, fix)
    unscheduled = _unscheduled(pod)
    texts = [e.message for e in events if e.reason in ("FailedScheduling", "FailedMount")]
    if unscheduled is not None:
        texts.append(unscheduled[1])
    for text in reversed(texts):
        fix = _missing(text, namespace)
        if fix:
            reason = next((e.reason for e in events if e.message == text), "Unschedulable")
            return PodProblem(name, reason, text, True, fix)
    if placement and unscheduled is not None:
        scheduler = next((e for e in reversed(events) if e.reason == "FailedScheduling"), None)
        message = scheduler.message if scheduler else unscheduled[1]
        if placement_mismatch(message):
            return PodProblem(
                name,
                "Unschedulable",
                message,
                True,
                f"no node matches the pod's node selector and tolerations (pod {name}): fix "
                "--node-selector / --toleration (kubectl get nodes --show-labels shows them)",
            )
    return None


def job_problem(job: str, namespace: str, events: Sequence[Event]) -> PodProblem | None:
    """The Job controller could not create the pods (``FailedCreate``), or the JobSet
    controller the Jobs (``JobCreationFailed``): a missing service account, or a pod template
    the API server finds invalid (``... is invalid: spec.template.spec...``), is hopeless;
    other refusals (a quota, a webhook not ready yet) are told."""
    failures = [e for e in reversed(events) if e.reason in ("FailedCreate", "JobCreationFailed")]
    for failed in failures:  # the newest hopeless one, else the newest
        fix = _missing(failed.message, namespace)
        invalid = _INVALID.search(failed.message)
        if not fix and invalid:
            fix = (
                f"the pods of {job} cannot be created: {invalid[0]}; fix --pod-patch (or the "
                "options that put it there)"
            )
        if fix:
            return PodProblem(f"of {job}", failed.reason, failed.message, True, fix)
    if not failures:
        return None
    return PodProblem(f"of {job}", failures[0].reason, failures[0].message)


def pull_failures(events: Sequence[Event]) -> int:
    """How often the kubelet failed to pull an image (its ``Failed to pull image`` events)."""
    return sum(e.count for e in events if e.reason == "Failed" and "pull image" in e.message)


def pod_problem(
    pod: Mapping[str, Any],
    events: Sequence[Event] = (),
    *,
    image_pull_retries: int = DEFAULT_IMAGE_PULL_RETRIES,
) -> PodProblem | None:
    """The problem of a pod that is not running, or None when there is none to tell."""
    name = str((pod.get("metadata") or {}).get("name") or "?")
    image = _image_waiting(pod)
    if image is not None:
        reason, message = image
        pulled = next(
            (e.message for e in reversed(events) if e.reason == "Failed" and "pull" in e.message),
            "",
        )
        hopeless = reason in HOPELESS or (
            reason in ("ErrImagePull", "ImagePullBackOff")
            and pull_failures(events) >= max(1, image_pull_retries)
        )
        return PodProblem(name, reason, pulled or message, hopeless)
    unscheduled = _unscheduled(pod)
    if unscheduled is not None:
        reason, message = unscheduled
        scheduler = next((e for e in reversed(events) if e.reason == "FailedScheduling"), None)
        return PodProblem(name, reason, scheduler.message if scheduler else message)
    return None


__all__ = [
    "DEFAULT_IMAGE_PULL_RETRIES",
    "PodProblem",
    "job_problem",
    "placement_mismatch",
    "pod_problem",
    "pull_failures",
    "user_error",
]
