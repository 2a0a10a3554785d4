"""Why a pod is not running yet: the scheduler (``PodScheduled=False``, ``FailedScheduling``)
or the kubelet's image pull (``ErrImagePull``, ``ImagePullBackOff``, ``InvalidImageName``),
read from the pod and its Events; and whether waiting longer can help."""

from __future__ import annotations

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


__all__ = ["DEFAULT_IMAGE_PULL_RETRIES", "PodProblem", "pod_problem", "pull_failures"]
