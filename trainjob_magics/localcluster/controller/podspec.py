"""Pure functions: runtime + TrainJob -> JobSet body -> pod bodies (names, labels, env)."""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

from ..core.store import random_suffix
from ..runtimes.loader import ANCESTOR_LABEL, MPI_HOSTFILE, is_trainer_rjob

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
TRAINER_CONTAINER = "node"


@dataclass(frozen=True)
class PodSlot:
    """One pod the JobSet wants: replicated job, job index, completion index."""

    rjob: str
    job_index: int
    completion_index: int

    def hostname(self, jobset: str) -> str:
        return f"{jobset}-{self.rjob}-{self.job_index}-{self.completion_index}"


def _merge_env(base: list[dict[str, Any]], extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [e for e in base if e.get("name") not in {x.get("name") for x in extra}]
    return out + copy.deepcopy(extra)


def num_nodes(runtime: dict[str, Any], trainjob: dict[str, Any]) -> int:
    trainer = (trainjob.get("spec") or {}).get("trainer") or {}
    policy = (runtime.get("spec") or {}).get("mlPolicy") or {}
    return int(trainer.get("numNodes") or policy.get("numNodes") or 1)


def mpi_policy(runtime: dict[str, Any]) -> dict[str, Any] | None:
    return ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("mpi")


def openmpi_launcher_env(policy: dict[str, Any], trainer: dict[str, Any]) -> list[dict[str, Any]]:
    """The env Trainer's MPI plugin upserts into the launcher's ``node`` container for OpenMPI
    (kubeflow/trainer pkg/runtime/framework/plugins/mpi/mpi.go EnforceMLPolicy, constants in
    pkg/constants/constants.go). numProcPerNode: the TrainJob's, else the runtime's (Trainer also
    raises a runtime value of 1 to the GPUs per node; the local cluster leaves it)."""
    slots = trainer.get("numProcPerNode") or policy.get("numProcPerNode") or 1
    return [
        {"name": "OMPI_MCA_orte_default_hostfile", "value": MPI_HOSTFILE},
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
        {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
        {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
    ]


def _apply_to_container(c: dict[str, Any], trainer: dict[str, Any], with_command: bool) -> None:
    if trainer.get("image"):
        c["image"] = trainer["image"]
    if with_command and trainer.get("command"):
        c["command"] = list(trainer["command"])
    if with_command and trainer.get("args"):
        c["args"] = list(trainer["args"])
    if trainer.get("env"):
        c["env"] = _merge_env(c.get("env") or [], trainer["env"])
    if trainer.get("resourcesPerNode"):
        c["resources"] = copy.deepcopy(trainer["resourcesPerNode"])


def build_jobset_spec(runtime: dict[str, Any], trainjob: dict[str, Any]) -> dict[str, Any]:
    """The runtime's JobSet spec with spec.trainer applied (Trainer's plugins, simplified)."""
    spec = copy.deepcopy(((runtime.get("spec") or {}).get("template") or {}).get("spec") or {})
    trainer = (trainjob.get("spec") or {}).get("trainer") or {}
    name = trainjob["metadata"]["name"]
    nodes = num_nodes(runtime, trainjob)
    mpi = mpi_policy(runtime)
    launcher_as_node = bool(mpi and mpi.get("runLauncherAsNode"))
    for rjob in spec.get("replicatedJobs") or []:
        rjob.setdefault("replicas", 1)
        trainer_job = is_trainer_rjob(rjob)
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        if mpi:
            if rjob.get("name") == "launcher":
                count = 1
            else:
                count = nodes - 1 if launcher_as_node else nodes
        else:
            count = nodes if trainer_job else int(job_spec.get("parallelism") or 1)
        job_spec["parallelism"] = count
        job_spec["completions"] = count
        job_spec["completionMode"] = "Indexed"
        job_spec.setdefault("backoffLimit", 0)
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        pod_spec.setdefault("restartPolicy", "OnFailure" if not mpi else "Never")
        for c in pod_spec.get("containers") or []:
            if c.get("name") != TRAINER_CONTAINER:
                continue
            openmpi = mpi and (mpi.get("mpiImplementation") or "OpenMPI") == "OpenMPI"
            if openmpi and rjob.get("name") == "launcher":  # before spec.trainer.env, which wins
                c["env"] = _merge_env(c.get("env") or [], openmpi_launcher_env(mpi, trainer))
            if trainer_job or (mpi and rjob.get("name") == "node"):
                _apply_to_container(c, trainer, with_command=trainer_job)
            if not mpi and trainer_job:
                extra = [
                    {"name": "PET_NNODES", "value": str(nodes)},
                    {
                        "name": "PET_NPROC_PER_NODE",
                        "value": str(trainer.get("numProcPerNode") or "auto"),
                    },
                    {"name": "PET_MASTER_ADDR", "value": f"{name}-{rjob['name']}-0-0.{name}"},
                    {"name": "PET_MASTER_PORT", "value": "29400"},
                ]
                c["env"] = _merge_env(c.get("env") or [], extra)
    spec.setdefault("network", {}).setdefault("subdomain", name)
    spec["network"].setdefault("enableDNSHostnames", True)
    return spec


def slots(jobset_spec: dict[str, Any]) -> dict[str, list[PodSlot]]:
    """Replicated job name -> its pod slots, in creation order."""
    out: dict[str, list[PodSlot]] = {}
    for rjob in jobset_spec.get("replicatedJobs") or []:
        count = int(rjob["template"]["spec"].get("parallelism") or 0)
        out[rjob["name"]] = [
            PodSlot(rjob["name"], j, c)
            for j in range(int(rjob.get("replicas", 1)))
            for c in range(count)
        ]
    return out


def container_argv(container: dict[str, Any]) -> list[str] | None:
    """command + args; args alone when there is no command; None when neither is set."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    return argv or None


def env_dict(container: dict[str, Any]) -> dict[str, str]:
    return {
        e["name"]: str(e.get("value", ""))
        for e in container.get("env") or []
        if "name" in e and "valueFrom" not in e
    }


def jobset_labels(jobset: dict[str, Any], rjob_name: str, job_index: int) -> dict[str, str]:
    """The labels (and equal annotations) JobSet v0.12's labelAndAnnotateObject sets on a
    child Job and its pods: names, restart attempt, replicas, indexes and the job key (SHA-1
    of "<namespace>/<job name>")."""
    meta = jobset["metadata"]
    rjobs = (jobset.get("spec") or {}).get("replicatedJobs") or []
    total, global_index = 0, 0
    replicas = 1
    for r in rjobs:
        n = int(r.get("replicas", 1))
        if r.get("name") == rjob_name:
            global_index, replicas = total + job_index, n
        total += n
    job_name = f"{meta['name']}-{rjob_name}-{job_index}"
    restarts = int(((jobset.get("status") or {}).get("restarts")) or 0)
    return {
        JOBSET_NAME: meta["name"],
        RJOB_NAME: rjob_name,
        "jobset.sigs.k8s.io/restart-attempt": str(restarts),
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
        "jobset.sigs.k8s.io/global-replicas": str(total),
        JOB_INDEX: str(job_index),
        "jobset.sigs.k8s.io/job-key": hashlib.sha1(
            f"{meta.get('namespace', '')}/{job_name}".encode()
        ).hexdigest(),
        "jobset.sigs.k8s.io/job-global-index": str(global_index),
    }


def build_pod(
    jobset: dict[str, Any],
    rjob: dict[str, Any],
    slot: PodSlot,
    *,
    job_uid: str,
    ancestor_on_pods: bool,
) -> dict[str, Any]:
    """The pod body the Job controller would create for `slot`."""
    js_name = jobset["metadata"]["name"]
    ns = jobset["metadata"]["namespace"]
    hostname = slot.hostname(js_name)
    job_name = f"{js_name}-{slot.rjob}-{slot.job_index}"
    job_tmpl = rjob.get("template") or {}
    pod_tmpl = copy.deepcopy(job_tmpl["spec"].get("template") or {})
    labels = dict((pod_tmpl.get("metadata") or {}).get("labels") or {})
    job_labels = (job_tmpl.get("metadata") or {}).get("labels") or {}
    for k, v in job_labels.items():
        if k != ANCESTOR_LABEL or ancestor_on_pods:
            labels.setdefault(k, v)
    index = str(slot.completion_index)
    # JobSet's labelAndAnnotateObject: the same keys as labels and annotations.
    jobset_keys = jobset_labels(jobset, slot.rjob, slot.job_index)
    labels.update(
        {
            **jobset_keys,
            "jobset.sigs.k8s.io/jobset-uid": jobset["metadata"]["uid"],
            COMPLETION_INDEX: index,
            "batch.kubernetes.io/job-name": job_name,
            "batch.kubernetes.io/controller-uid": job_uid,
            "job-name": job_name,
            "controller-uid": job_uid,
        }
    )
    annotations = dict((pod_tmpl.get("metadata") or {}).get("annotations") or {})
    annotations.update({COMPLETION_INDEX: index, **jobset_keys})
    spec = pod_tmpl.get("spec") or {}
    spec["hostname"] = hostname
    spec["subdomain"] = jobset["spec"].get("network", {}).get("subdomain", js_name)
    spec.setdefault("restartPolicy", "Never")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    for c in spec.get("containers") or []:
        c.setdefault("imagePullPolicy", "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("resources", {})
        env = c.get("env") or []
        names = {e.get("name") for e in env}
        if "JOB_COMPLETION_INDEX" not in names:
            env.append({"name": "JOB_COMPLETION_INDEX", "value": index})
        if "PET_NODE_RANK" not in names and any(e.get("name") == "PET_NNODES" for e in env):
            env.append({"name": "PET_NODE_RANK", "value": index})
        c["env"] = env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{hostname}-{random_suffix()}",
            "generateName": f"{hostname}-",
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job_name,
                    "uid": job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }
