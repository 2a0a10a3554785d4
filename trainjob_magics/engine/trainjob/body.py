"""Build TrainJob bodies valid for Kubeflow Trainer v2.3 (trainer.kubeflow.org/v1alpha1).

No removed fields (``spec.labels``, ``spec.annotations``, ``spec.podSpecOverrides``): everything
the project needs to find its own jobs lives in ``metadata``.
"""

from __future__ import annotations

import getpass
import os
import random
import secrets
import socket
import string
from collections.abc import Mapping, Sequence
from typing import Any

from ..exec.scripts import DEFAULT_IDLE_TIMEOUT, keep_alive_command
from ..kube.names import (
    API_VERSION,
    CLUSTER_RUNTIME_KIND,
    CREATED_BY_ANNOTATION,
    GPU_RESOURCE,
    GROUP,
    IDLE_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_HOST_ANNOTATION,
    OWNER_KERNEL_ANNOTATION,
    OWNER_PID_ANNOTATION,
    SESSION_LABEL,
)

# Keeps the trainer pod alive: a POSIX-sh watchdog that exits (pod Succeeded, TrainJob Complete)
# after DEFAULT_IDLE_TIMEOUT seconds without a heartbeat (see remote.py); idle_timeout=None in
# build_trainjob gives plain `sleep infinity`.
KEEP_ALIVE_COMMAND: list[str] = keep_alive_command(DEFAULT_IDLE_TIMEOUT)


def generate_name() -> str:
    """Random TrainJob name like the Kubeflow SDK's: a lowercase letter plus 11 hex characters."""
    return random.choice(string.ascii_lowercase) + secrets.token_hex(6)[:11]


def owner_annotations() -> dict[str, str]:
    """Annotations naming the creating host, user and process (used to find orphans)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user database entry (containers with arbitrary uids)
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    notes = {
        OWNER_HOST_ANNOTATION: socket.gethostname(),
        OWNER_PID_ANNOTATION: str(os.getpid()),
        CREATED_BY_ANNOTATION: user,
    }
    kernel = _kernel_id()
    if kernel:
        notes[OWNER_KERNEL_ANNOTATION] = kernel
    return notes


def _kernel_id() -> str:
    """The Jupyter kernel id of this process (from its ``kernel-<id>.json`` argument), or ''."""
    import sys

    for arg in sys.argv:
        base = os.path.basename(arg)
        if base.startswith("kernel-") and base.endswith(".json"):
            return base[len("kernel-") : -len(".json")]
    return ""


def resources_per_node(
    cpu: str | None, memory: str | None, gpu: str | None
) -> dict[str, dict[str, str]] | None:
    """``ResourceRequirements`` with equal requests and limits (GPUs need limits)."""
    amounts = {"cpu": cpu, "memory": memory, GPU_RESOURCE: gpu}
    given = {key: value for key, value in amounts.items() if value is not None}
    if not given:
        return None
    return {"requests": dict(given), "limits": dict(given)}


def build_trainjob(
    name: str,
    namespace: str,
    runtime: str,
    *,
    runtime_kind: str = CLUSTER_RUNTIME_KIND,
    image: str | None = None,
    num_nodes: int | None = None,
    command: Sequence[str] | None = None,
    args: Sequence[str] | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    gpu: str | None = None,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
) -> dict[str, Any]:
    """Return the TrainJob manifest; inputs are assumed validated (see ``validation``).

    ``command=None`` injects the keep-alive command: the idle watchdog for ``idle_timeout``
    seconds (recorded in an annotation), or ``sleep infinity`` when ``idle_timeout`` is None.
    """
    watchdog = command is None and idle_timeout is not None
    trainer: dict[str, Any] = {
        "command": list(command) if command is not None else keep_alive_command(idle_timeout)
    }
    if image:
        trainer["image"] = image
    if args:
        trainer["args"] = list(args)
    if env:
        trainer["env"] = [{"name": key, "value": value} for key, value in env.items()]
    if num_nodes is not None:
        trainer["numNodes"] = num_nodes
    resources = resources_per_node(cpu, memory, gpu)
    if resources:
        trainer["resourcesPerNode"] = resources
    metadata_labels = dict(labels or {})
    metadata_labels[MANAGED_BY_LABEL] = MANAGED_BY_VALUE
    metadata_labels[SESSION_LABEL] = "true"
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": metadata_labels,
            "annotations": {
                **owner_annotations(),
                **({IDLE_ANNOTATION: f"{idle_timeout:g}"} if watchdog else {}),
            },
        },
        "spec": {
            "runtimeRef": {"name": runtime, "apiGroup": GROUP, "kind": runtime_kind},
            "trainer": trainer,
        },
    }


def runtime_ref(trainjob: Mapping[str, Any]) -> tuple[str, str]:
    """``(name, kind)`` of a TrainJob's runtimeRef (kind defaults to ClusterTrainingRuntime)."""
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    return str(ref.get("name") or ""), str(ref.get("kind") or CLUSTER_RUNTIME_KIND)
