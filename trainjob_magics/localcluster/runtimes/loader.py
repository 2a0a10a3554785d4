"""Training runtimes: the preloaded ClusterTrainingRuntimes and helpers to read any runtime.

The helpers accept a ClusterTrainingRuntime / TrainingRuntime (replicated jobs under
``spec.template.spec``) or a JobSet (replicated jobs under ``spec``).
"""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any

import yaml

API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
MPI_HOSTFILE = "/etc/mpi/hostfile"
# CRD defaults of spec.mlPolicy.mpi (Trainer v2.3.0).
MPI_DEFAULTS = {
    "numProcPerNode": 1,
    "mpiImplementation": "OpenMPI",
    "sshAuthMountPath": "/root/.ssh",
    "runLauncherAsNode": False,
}


def parse_runtime_yaml(text: str) -> list[dict]:
    """Parse one or more runtime documents; raise ValueError for anything else."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ValueError(f"runtime YAML does not parse: {err}") from err
    if not docs:
        raise ValueError("runtime YAML holds no documents")
    for index, doc in enumerate(docs, 1):
        _check_runtime(doc, index)
    return docs


def _check_runtime(doc: Any, index: int) -> None:
    if not isinstance(doc, dict):
        raise ValueError(f"runtime YAML document {index} is a {type(doc).__name__}, not a mapping")
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    if kind not in RUNTIME_KINDS or api_version != API_VERSION:
        raise ValueError(
            f"runtime YAML document {index} is {kind or 'a document without kind'} "
            f"({api_version or 'no apiVersion'}); expected ClusterTrainingRuntime or "
            f"TrainingRuntime of {API_VERSION}"
        )
    name = (doc.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"runtime YAML document {index} ({kind}) has no metadata.name")
    if not isinstance(doc.get("spec"), dict):
        raise ValueError(f"{kind} {name} has no spec")
    if not replicated_jobs(doc):
        raise ValueError(f"{kind} {name} has no spec.template.spec.replicatedJobs")


def load_builtin_runtimes() -> list[dict]:
    """The preloaded ClusterTrainingRuntimes (fresh copies), sorted by name."""
    folder = resources.files(__package__)
    found: list[dict] = []
    for entry in folder.iterdir():
        if entry.name.endswith(".yaml"):
            found.extend(parse_runtime_yaml(entry.read_text(encoding="utf-8")))
    return sorted(copy.deepcopy(found), key=lambda r: r["metadata"]["name"])


def replicated_jobs(obj: dict) -> list[dict]:
    """The replicated jobs of a runtime (spec.template.spec) or a JobSet (spec)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") in RUNTIME_KINDS:
        spec = ((spec.get("template") or {}).get("spec")) or {}
    jobs = spec.get("replicatedJobs")
    return jobs if isinstance(jobs, list) else []


def is_trainer_rjob(rjob: dict) -> bool:
    """Whether a replicated job's Job template carries the trainer ancestor label."""
    labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(ANCESTOR_LABEL) == ANCESTOR_TRAINER


def trainer_replicated_job(obj: dict) -> str:
    """Name of the replicated job whose Job template carries the trainer ancestor label.

    Falls back to ``launcher`` (MPI runtimes), then to the only replicated job.
    """
    jobs = replicated_jobs(obj)
    for job in jobs:
        if is_trainer_rjob(job):
            return job["name"]
    names = [job.get("name") for job in jobs]
    if "launcher" in names:
        return "launcher"
    if len(names) == 1:
        return names[0]
    raise ValueError(f"cannot tell the trainer replicated job among {names}")


def mpi_policy(runtime: dict) -> dict | None:
    """``spec.mlPolicy.mpi`` with the CRD defaults filled in, or None for non-MPI runtimes."""
    policy = ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("mpi")
    if policy is None:
        return None
    return {**MPI_DEFAULTS, **policy}


def runtime_num_nodes(runtime: dict) -> int:
    """``spec.mlPolicy.numNodes`` (1 when unset)."""
    value = ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("numNodes")
    return int(value) if value is not None else 1


def runtime_framework(runtime: dict) -> str:
    """The ``trainer.kubeflow.org/framework`` label, or ""."""
    return ((runtime.get("metadata") or {}).get("labels") or {}).get(FRAMEWORK_LABEL, "")
