"""Why a pod went away while a command ran in it.

A command whose pod is deleted or evicted ends with the exit status of a killed process (137:
SIGKILL, 143: SIGTERM) or with a dropped connection, which reads like "out of memory". When an
exec ends that way we read the pod and its Events, and name what happened:

- the ``DisruptionTarget`` condition (Kubernetes 1.26+, GA in 1.31) says who disrupted it:
  ``EvictionByEvictionAPI`` (``kubectl drain``, the Eviction API), ``TerminationByKubelet``
  (node-pressure eviction), ``PreemptionByScheduler``, ``DeletionByTaintManager``,
  ``DeletionByPodGC``;
- ``status.reason: Evicted`` with ``status.message`` is the kubelet's eviction (older kubelets);
- a ``deletionTimestamp``, or a pod that is gone (404), is a deletion; its Events (``Evicted``
  from the kubelet, ``Preempted`` from the scheduler) still tell evictions apart;
- a pod that reached ``Failed``/``Succeeded`` stopped: its container ended.

A pod still Running without any of these was not disrupted: the exit status is the command's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient

from ..errors import NotFoundError, TrainJobError
from ..kube.events import events_about
from ..kube.objects import pod_phase
from ..kube.requests import request

KILLED_EXIT_CODES = frozenset({137, 143})  # 128 + SIGKILL, 128 + SIGTERM

# DisruptionTarget reasons (k8s.io/api/core/v1 types.go) -> (cause, who)
_DISRUPTIONS = {
    "EvictionByEvictionAPI": ("evicted", "through the Eviction API"),
    "TerminationByKubelet": ("evicted", "by the kubelet"),
    "PreemptionByScheduler": ("preempted", "by the scheduler"),
    "DeletionByTaintManager": ("deleted", "by the taint manager"),
    "DeletionByPodGC": ("deleted", "by the pod garbage collector"),
}


@dataclass(frozen=True)
class PodDisruption:
    """What took a pod away: ``cause`` is deleted, evicted, preempted or stopped."""

    pod: str
    cause: str
    detail: str = ""

    def describe(self) -> str:
        """``pod P was evicted by the kubelet (The node was low on resource: memory...)``."""
        return f"pod {self.pod} {'' if self.cause == 'stopped' else 'was '}{self.detail}".rstrip()


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


def read_disruption(pod: Mapping[str, Any], name: str) -> PodDisruption | None:
    """What the pod object says took it away (None: nothing did)."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            cause, who = _DISRUPTIONS.get(str(cond.get("reason")), ("deleted", ""))
            why = _one_line(cond.get("message"))
            detail = " ".join(x for x in (cause, who) if x) + (f" ({why})" if why else "")
            return PodDisruption(name, cause, detail)
    if status.get("reason") == "Evicted":
        why = _one_line(status.get("message"))
        return PodDisruption(
            name, "evicted", "evicted by the kubelet" + (f" ({why})" if why else "")
        )
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return PodDisruption(name, "deleted", "deleted")
    phase = pod_phase(pod)
    if phase in ("Failed", "Succeeded"):
        return PodDisruption(name, "stopped", f"stopped: its container ended (pod {phase})")
    return None


def _from_events(api: ApiClient, namespace: str, name: str) -> PodDisruption:
    for event in reversed(events_about(api, namespace, name, "Pod")):
        if event.reason == "Evicted":
            return PodDisruption(name, "evicted", f"evicted by the kubelet ({event.message})")
        if event.reason == "Preempted":
            return PodDisruption(name, "preempted", f"preempted by the scheduler ({event.message})")
    return PodDisruption(name, "deleted", "deleted")


def pod_disruption(api: ApiClient, namespace: str, name: str) -> PodDisruption | None:
    """What took pod ``name`` away, or None when it still runs undisturbed (or cannot be
    read: then nothing is claimed)."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    try:
        pod = request(
            api,
            "GET",
            path,
            verb="get",
            resource="pods",
            namespace=namespace,
            name=name,
            timeout=10.0,
            attempts=2,
        )
    except NotFoundError:
        return _from_events(api, namespace, name)
    except TrainJobError:
        return None
    found = read_disruption(pod, name)
    node = (pod.get("spec") or {}).get("nodeName")
    if found is None and node and pod_phase(pod) == "Running":
        return _node_gone(api, name, str(node))
    return found


def _node_gone(api: ApiClient, pod: str, node: str) -> PodDisruption | None:
    """A Running pod whose node was deleted: it still reads Running until the pod garbage
    collector removes it (about 40 s later), but its processes are gone (a real cluster)."""
    try:
        request(
            api,
            "GET",
            f"/api/v1/nodes/{quote(node, safe='')}",
            verb="get",
            resource="nodes",
            name=node,
            timeout=10.0,
            attempts=2,
        )
    except NotFoundError:
        if not _serves_nodes(api):  # e.g. the local cluster: no Node objects, every GET is a 404
            return None
        return PodDisruption(pod, "lost", f"lost: its node {node} was deleted")
    except TrainJobError:  # no permission to read nodes, or the server is busy: claim nothing
        return None
    return None


# what the local cluster's /version carries (trainjob/capacity.py LOCAL_MARKER)
LOCAL_MARKER = "+trainjob-magics-local"


def _serves_nodes(api: ApiClient) -> bool:
    """True when the server keeps Node objects (so a node's 404 means it was deleted): it lists
    one, or it lists none and is not the local cluster (a one-node cluster whose node was just
    deleted lists none too; seen on the real stack's node)."""
    try:
        listed = request(
            api, "GET", "/api/v1/nodes?limit=1", verb="list", resource="nodes", timeout=10.0
        )
    except TrainJobError:
        return False
    if (listed or {}).get("items"):
        return True
    try:
        info = request(api, "GET", "/version", verb="get", resource="version", attempts=1)
    except TrainJobError:
        return False
    return LOCAL_MARKER not in str((info or {}).get("gitVersion") or "")


__all__ = ["KILLED_EXIT_CODES", "PodDisruption", "pod_disruption", "read_disruption"]
