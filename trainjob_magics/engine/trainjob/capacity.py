"""Whether an unschedulable pod can ever fit: the local cluster's one node, told by /version.

The local cluster (``trainjob_magics/localcluster``) serves no Node objects; its ``/version``
says what it is (gitVersion ends in ``+trainjob-magics-local``) and what its only node holds
(``trainjobMagicsLocalNode.allocatable``, docs/local-cluster.md). No node can join it, so a pod
asking for more than that allocatable waits forever. Any other server is a real cluster, where
a cluster autoscaler may add a node that can hold the pod: there the wait goes on.

A pod's request is counted as kube-scheduler does (``k8s.io/component-helpers`` ``PodRequests``):
the containers' requests (a missing request takes its limit) summed, at least the largest init
container (restartable ones add up), plus ``spec.overhead``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..errors import TrainJobError
from ..kube.requests import request

LOCAL_MARKER = "+trainjob-magics-local"
LOCAL_NODE_FIELD = "trainjobMagicsLocalNode"
GPU = "nvidia.com/gpu"
# The resources connect() sets, with its argument and the local cluster's option for each.
OPTIONS = {"cpu": ("cpu", "--cpus"), "memory": ("memory", "--memory"), GPU: ("gpu", "--gpus")}
WAIT_FOR_NODE = "waits for a node that can hold it (a cluster autoscaler may add one)"

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")
_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{
        s: Fraction(2 ** (10 * (i + 1))) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))
    },
}


def parse_quantity(value: object) -> Fraction | None:
    """A Kubernetes quantity as a number (``"500m"`` -> 1/2, ``"1Gi"`` -> 2**30), or None."""
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if not m:
        return None
    try:
        number = Fraction(m.group(1))
    except (ValueError, ZeroDivisionError):
        return None
    suffix = m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


@dataclass(frozen=True)
class LocalNode:
    """The local cluster's only node: its name and allocatable resources."""

    name: str
    allocatable: dict[str, Fraction]


def local_node(api: Any) -> LocalNode | None:
    """The local cluster's node as its /version tells it, or None for any other server (or
    when /version cannot be read: then nothing is known, and the wait goes on)."""
    try:
        info = request(api, "GET", "/version", verb="get", resource="version", attempts=1)
    except TrainJobError:
        return None
    if not isinstance(info, Mapping) or LOCAL_MARKER not in str(info.get("gitVersion") or ""):
        return None
    node = info.get(LOCAL_NODE_FIELD)
    if not isinstance(node, Mapping) or not isinstance(node.get("allocatable"), Mapping):
        return None
    allocatable: dict[str, Fraction] = {}
    for key, value in node["allocatable"].items():
        q = parse_quantity(value)
        if q is not None:
            allocatable[str(key)] = q
    return LocalNode(str(node.get("name") or "local-node"), allocatable)


def _container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    res = container.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    out: dict[str, Fraction] = {}
    for key, value in merged.items():
        q = parse_quantity(value)
        if q is not None:
            out[str(key)] = q
    return out


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, Fraction(0)) + v


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """What the pod asks of a node (``PodRequests``), zero entries dropped."""
    spec = pod.get("spec") or {}
    reqs: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        _add(reqs, _container_requests(c))
    restartable: dict[str, Fraction] = {}
    init_max: dict[str, Fraction] = {}
    for ic in spec.get("initContainers") or []:
        cr = _container_requests(ic)
        if ic.get("restartPolicy") == "Always":
            _add(reqs, cr)
            _add(restartable, cr)
            cr = dict(restartable)
        else:
            _add(cr, restartable)
        for k, v in cr.items():
            init_max[k] = max(init_max.get(k, Fraction(0)), v)
    for k, v in init_max.items():
        reqs[k] = max(reqs.get(k, Fraction(0)), v)
    overhead = {str(k): parse_quantity(v) for k, v in (spec.get("overhead") or {}).items()}
    _add(reqs, {k: v for k, v in overhead.items() if v is not None})
    return {k: v for k, v in reqs.items() if v}


def show(resource: str, value: Fraction) -> str:
    """A quantity for a message: cpu in cores or millicores, memory in Gi/Mi/Ki when exact."""
    if resource == "memory":
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value and value % size == 0:
                return f"{value // size}{unit}"
    if value.denominator == 1:
        return str(value.numerator)
    if resource == "cpu" and (value * 1000).denominator == 1:
        return f"{value * 1000}m"
    return f"{float(value):g}"


def beyond_node(pod: Mapping[str, Any], node: LocalNode) -> list[tuple[str, Fraction, Fraction]]:
    """The pod's requests above the node's allocatable: (resource, asked, held), sorted. Only
    these make a pod unschedulable for good; what other pods hold frees up again."""
    out = []
    for resource, want in sorted(pod_requests(pod).items()):
        held = node.allocatable.get(resource, Fraction(0))
        if want > held:
            out.append((resource, want, held))
    return out


def never_fits_line(job: str, over: list[tuple[str, Fraction, Fraction]], node: LocalNode) -> str:
    """What was asked, what the node holds, and what to do: one line."""
    asked = ", ".join(f"{r} {show(r, want)}" for r, want, _ in over)
    held = ", ".join(f"{r} {show(r, have)}" for r, _, have in over)
    less = " or ".join(f"{OPTIONS[r][0]}=..." for r, _, _ in over if r in OPTIONS)
    larger = [(OPTIONS[r][1], show(r, want)) for r, want, _ in over if r in OPTIONS]
    todo = f"ask for less with {less}" if less else "ask for less"
    if larger:
        flags = " ".join(f"{flag} {value}" for flag, value in larger)
        todo += (
            f", or start the local cluster with a larger "
            f"{'/'.join(flag for flag, _ in larger)} (trainjob-magics local-cluster {flags})"
        )
    return (
        f"TrainJob {job} asks for {asked} per pod, but the local cluster's only node "
        f"({node.name}) holds {held}, and no other node can join: {todo}"
    )


__all__ = [
    "LOCAL_MARKER",
    "WAIT_FOR_NODE",
    "LocalNode",
    "beyond_node",
    "local_node",
    "never_fits_line",
    "parse_quantity",
    "pod_requests",
]
