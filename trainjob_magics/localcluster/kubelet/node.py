"""The local cluster's one node: its name and what it can hold, and what a pod asks of it.

The node is internal: no Node object is served (``nodes`` is not a kind of this API server).
Its allocatable resources are what the kubelet would report in ``Node.status.allocatable``;
here capacity and allocatable are the same (no system or kube reservations). They show only
through the scheduler's messages in pod conditions and Events.

A pod's request follows ``k8s.io/component-helpers/resource/helpers.go`` (``PodRequests``) on
a pod the API server defaulted (``pkg/apis/core/v1/defaults.go``: a container's missing request
takes its limit): the sum over the containers, at least the largest init container (restartable
init containers, the sidecars, add up), plus ``spec.overhead``. Quantities become the
scheduler's integers as ``pkg/scheduler/framework/types.go`` (``Resource.Add``) does:
``MilliValue()`` for cpu, ``Value()`` (rounded up) for the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.quantity import parse_quantity

NODE_NAME = "local-node"
GPU = "nvidia.com/gpu"
# The default node: big enough for every example of the README and the notebooks, whatever
# the machine (the pods are local processes that reserve nothing of it).
DEFAULT_CPUS = 64
DEFAULT_MEMORY = "256Gi"
DEFAULT_GPUS = 8
MAX_PODS = 110  # the kubelet's --max-pods default
CPU, MEMORY, EPHEMERAL, PODS_RESOURCE = "cpu", "memory", "ephemeral-storage", "pods"


def scheduler_value(resource: str, value: str | int | float) -> int:
    """The scheduler's integer for a quantity: millicores for cpu, else units (rounded up)."""
    q = parse_quantity(value)
    return math.ceil(q * 1000) if resource == CPU else math.ceil(q)


def is_scalar_resource(name: str) -> bool:
    """``schedutil.IsScalarResourceName``: extended (``example.com/x``), hugepages, prefixed
    native (``kubernetes.io/x``) and attachable-volumes resources; the scheduler ignores
    other names."""
    return "/" in name or name.startswith(("hugepages-", "attachable-volumes-"))


@dataclass(frozen=True)
class NodeResources:
    """The node's allocatable resources in the scheduler's integers."""

    milli_cpu: int
    memory: int
    gpus: int
    ephemeral_storage: int = 0
    pods: int = MAX_PODS

    def allocatable(self) -> dict[str, int]:
        return {
            CPU: self.milli_cpu,
            MEMORY: self.memory,
            EPHEMERAL: self.ephemeral_storage,
            GPU: self.gpus,
            PODS_RESOURCE: self.pods,
        }

    def quantities(self) -> dict[str, str]:
        """``Node.status.allocatable`` as the kubelet reports it: quantities as strings."""
        cpu = str(self.milli_cpu // 1000) if self.milli_cpu % 1000 == 0 else f"{self.milli_cpu}m"
        return {
            CPU: cpu,
            MEMORY: str(self.memory),
            EPHEMERAL: str(self.ephemeral_storage),
            GPU: str(self.gpus),
            PODS_RESOURCE: str(self.pods),
        }

    def describe(self) -> str:
        cpu = str(self.milli_cpu // 1000) if self.milli_cpu % 1000 == 0 else f"{self.milli_cpu}m"
        mem = self.memory
        for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if mem and mem % size == 0:
                return f"cpu {cpu}, memory {mem // size}{unit}, {GPU} {self.gpus}"
        return f"cpu {cpu}, memory {mem}, {GPU} {self.gpus}"


def node_resources(
    cpus: str | int | float | None = None,
    memory: str | int | None = None,
    gpus: int | str | None = None,
    ephemeral_storage: int = 0,
) -> NodeResources:
    """The node's resources: 64 CPUs, 256 GiB of memory and 8 GPUs unless given (not the
    machine's size).

    ``cpus`` is a cpu quantity (``4``, ``"2.5"``, ``"500m"``), ``memory`` a memory quantity
    (``"16Gi"``, or bytes), ``gpus`` a whole number. Raises ValueError for anything else.
    """
    milli = _non_negative(CPU, DEFAULT_CPUS if cpus is None else cpus)
    mem = _non_negative(MEMORY, DEFAULT_MEMORY if memory is None else memory)
    if gpus is None:
        gpu_count = DEFAULT_GPUS
    else:
        q = parse_quantity(gpus)
        if q.denominator != 1 or q < 0:
            raise ValueError(f"gpus must be a whole number >= 0, not {gpus!r}")
        gpu_count = int(q)
    return NodeResources(milli, mem, gpu_count, ephemeral_storage)


def _non_negative(resource: str, value: str | int | float) -> int:
    n = scheduler_value(resource, value)
    if n < 0:
        raise ValueError(f"{resource} must not be negative, not {value!r}")
    return n


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    res = container.get("resources") or {}
    limits = res.get("limits") or {}
    requests = {**limits, **(res.get("requests") or {})}  # a missing request takes the limit
    out: dict[str, int] = {}
    for name, value in requests.items():
        if name in (CPU, MEMORY, EPHEMERAL) or is_scalar_resource(name):
            try:
                out[name] = scheduler_value(name, value)
            except ValueError:
                continue
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What the pod asks of a node, in the scheduler's integers (zero entries dropped)."""
    spec = pod.get("spec") or {}
    reqs: dict[str, int] = {}
    for c in spec.get("containers") or []:
        _add(reqs, _container_requests(c))
    restartable: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for ic in spec.get("initContainers") or []:
        cr = _container_requests(ic)
        if ic.get("restartPolicy") == "Always":
            _add(reqs, cr)
            _add(restartable, cr)
            cr = dict(restartable)
        else:
            cr = {**cr}
            _add(cr, restartable)
        for k, v in cr.items():
            init_max[k] = max(init_max.get(k, 0), v)
    for k, v in init_max.items():
        reqs[k] = max(reqs.get(k, 0), v)
    _add(reqs, _container_requests({"resources": {"requests": spec.get("overhead") or {}}}))
    return {k: v for k, v in reqs.items() if v}


__all__ = [
    "DEFAULT_GPUS",
    "GPU",
    "MAX_PODS",
    "NODE_NAME",
    "NodeResources",
    "node_resources",
    "pod_requests",
    "scheduler_value",
]
