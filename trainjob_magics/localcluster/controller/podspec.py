"""Pure functions: runtime + TrainJob -> JobSet body -> pod bodies (names, labels, env).

The JobSet follows the Trainer version (``controller/versions.py``): the TrainJob's per-pod
changes (``podSpecOverrides`` v2.0, ``podTemplateOverrides`` v2.1, ``runtimePatches`` v2.2+)
are strategic-merged into the runtime's template first (kubeflow/trainer
pkg/runtime/core/trainingruntime.go newRuntimeInfo at each tag), then ``spec.trainer`` is
applied (pkg/runtime/framework/plugins/jobset/builder.go Trainer).
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

from ..core.store import random_suffix
from ..runtimes.loader import ANCESTOR_LABEL, MPI_HOSTFILE, is_trainer_rjob
from .strategic_merge import (
    JOB_TEMPLATE_SPEC,
    JOBSET_SPEC,
    POD_SPEC,
    POD_TEMPLATE_SPEC,
    Meta,
    strategic_merge,
)
from .versions import DEFAULT_TRAINER_VERSION, at_least

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX}']"
TRAINER_PORT = 29500  # constants.ContainerTrainerPort
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


# Trainer's resourceRequirementsPatchMeta (pkg/util/trainingruntime/trainingruntime.go, v2.3.0):
# limits and requests merge per key, claims by name.
_RESOURCE_REQUIREMENTS = {"claims": Meta(True, "name")}
_LIMITS_REQUESTS = ("limits", "requests")
_SI = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"))


def quantity_string(value: Any) -> Any:
    """A TrainJob quantity as Trainer writes it to the JobSet: decoded into a
    resource.Quantity, which serializes as a string; an integer in DecimalSI canonical form
    (2000 -> "2k"). Strings are kept as written (Quantity would canonicalize "1000m" to "1")."""
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    for exp, suffix in _SI:
        if value and value % 10**exp == 0:
            return f"{value // 10**exp}{suffix}"
    return str(value)


def _quantities(resources: dict[str, Any]) -> dict[str, Any]:
    return {
        k: ({r: quantity_string(q) for r, q in v.items()} if isinstance(v, dict) else v)
        for k, v in resources.items()
    }


def apply_resources_per_node(
    container: dict[str, Any], resources_per_node: dict[str, Any] | None, version: str
) -> None:
    """``trainer.resourcesPerNode`` on the runtime's ``node`` container.

    Before v2.3 it replaces the container's resources with its limits and requests, when it
    has either (pkg/runtime/framework/plugins/jobset/builder.go Trainer, v2.0.1-v2.2.1). From
    v2.3 it is strategic-merged into them: its keys override, the runtime's other keys stay;
    the JobSet gets the merged limits and requests (pkg/runtime/core/trainingruntime.go
    newRuntimeInfo with MergeResourceRequirements, v2.3.0, PR 3602). Neither copies claims.
    """
    if resources_per_node is None:
        return
    if not at_least(version, "2.3"):
        if any(resources_per_node.get(k) is not None for k in _LIMITS_REQUESTS):
            container["resources"] = _quantities(
                {
                    k: copy.deepcopy(resources_per_node[k])
                    for k in _LIMITS_REQUESTS
                    if resources_per_node.get(k) is not None
                }
            )
        return
    current = container.get("resources") or {}
    base = {k: current[k] for k in _LIMITS_REQUESTS if current.get(k) is not None}
    merged = strategic_merge(base, _quantities(resources_per_node), _RESOURCE_REQUIREMENTS)
    container["resources"] = {k: merged[k] for k in _LIMITS_REQUESTS if merged.get(k) is not None}


def _targets(override: dict[str, Any], rjob_name: str) -> bool:
    return any(t.get("name") == rjob_name for t in override.get("targetJobs") or [])


def apply_trainjob_patches(
    jobset_spec: dict[str, Any], trainjob: dict[str, Any], version: str
) -> dict[str, Any]:
    """The runtime's JobSet spec with the TrainJob's per-pod changes of Trainer ``version``:

    - v2.0 ``spec.podSpecOverrides``: each override, in order, strategic-merged into the pod
      spec of every replicated job it targets (mergePodSpecOverrides, v2.0.1);
    - v2.1 ``spec.podTemplateOverrides``: ``{metadata: {labels, annotations}, spec}`` merged
      into the pod template (mergePodTemplateOverrides, v2.1.0);
    - v2.2 ``spec.runtimePatches``: each ``replicatedJobs[].template`` of a patch merged into
      the runtime's replicated job of that name; unknown names are ignored
      (mergeRuntimePatches, v2.2.1);
    - v2.3 ``spec.runtimePatches``: each ``trainingRuntimeSpec.template.spec`` merged into
      the whole JobSet spec, the runtime's replicated-job order restored (mergeRuntimePatches,
      v2.3.0).
    """
    spec = copy.deepcopy(jobset_spec)
    tj_spec = trainjob.get("spec") or {}
    if at_least(version, "2.3"):
        return _merge_runtime_patches_v23(spec, tj_spec.get("runtimePatches") or [])
    if at_least(version, "2.2"):
        return _merge_runtime_patches_v22(spec, tj_spec.get("runtimePatches") or [])
    v21 = at_least(version, "2.1")
    overrides = tj_spec.get("podTemplateOverrides" if v21 else "podSpecOverrides") or []
    for override in overrides:
        for rjob in spec.get("replicatedJobs") or []:
            if not _targets(override, rjob.get("name", "")):
                continue
            job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
            pod_template = job_spec.setdefault("template", {})
            if v21:
                patch: dict[str, Any] = {}
                meta = {
                    k: v
                    for k, v in (override.get("metadata") or {}).items()
                    if k in ("labels", "annotations") and v is not None
                }
                if meta:
                    patch["metadata"] = meta
                if override.get("spec") is not None:
                    patch["spec"] = override["spec"]
                job_spec["template"] = strategic_merge(pod_template, patch, POD_TEMPLATE_SPEC)
            else:
                # The whole override is the patch; targetJobs is no PodSpec field and is lost
                # when Trainer decodes the result into a corev1.PodSpec.
                merged = strategic_merge(pod_template.get("spec") or {}, override, POD_SPEC)
                merged.pop("targetJobs", None)
                pod_template["spec"] = merged
    return spec


def _patch_specs(patches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each patch's ``trainingRuntimeSpec.template.spec`` (patches without one are skipped)."""
    out = []
    for patch in patches:
        template = ((patch.get("trainingRuntimeSpec") or {}).get("template")) or {}
        if isinstance(template.get("spec"), dict):
            out.append(template["spec"])
    return out


def _merge_runtime_patches_v22(
    spec: dict[str, Any], patches: list[dict[str, Any]]
) -> dict[str, Any]:
    """Trainer v2.2.1 (pkg/runtime/core/trainingruntime.go mergeRuntimePatches): for each
    ``replicatedJobs[]`` entry of a patch that has a ``template``, strategic-merge it into the
    ``template`` (a batchv1.JobTemplateSpec) of every runtime replicated job of that name; a
    name the runtime does not have is ignored, and nothing else of the patch is used."""
    rjobs = spec.get("replicatedJobs") or []
    for patch_spec in _patch_specs(patches):
        for rjob_patch in patch_spec.get("replicatedJobs") or []:
            template = rjob_patch.get("template")
            if template is None:
                continue
            for rjob in rjobs:
                if rjob.get("name") != rjob_patch.get("name"):
                    continue
                rjob["template"] = strategic_merge(
                    rjob.get("template") or {}, template, JOB_TEMPLATE_SPEC
                )
    return spec


def _merge_runtime_patches_v23(
    spec: dict[str, Any], patches: list[dict[str, Any]]
) -> dict[str, Any]:
    """Trainer v2.3.0 (pkg/runtime/core/trainingruntime.go mergeRuntimePatches): each patch's
    spec strategic-merged into the whole JobSet spec (so a new name adds a replicated job),
    then the runtime's replicated-job order restored with a stable sort in which a name the
    runtime did not have counts as index 0 (Go's zero value of the map lookup)."""
    order = {r.get("name"): i for i, r in enumerate(spec.get("replicatedJobs") or [])}
    for patch_spec in _patch_specs(patches):
        spec = strategic_merge(spec, patch_spec, JOBSET_SPEC)
    if spec.get("replicatedJobs"):
        spec["replicatedJobs"].sort(key=lambda r: order.get(r.get("name"), 0))
    return spec


def jobset_metadata(
    runtime: dict[str, Any], trainjob: dict[str, Any], version: str
) -> tuple[dict[str, str], dict[str, str]]:
    """The JobSet's labels and annotations (Trainer's propagation labels): the runtime
    template's, then ``spec.labels``/``spec.annotations`` (v2.0/v2.1) or each runtime patch's
    ``trainingRuntimeSpec.template.metadata`` (v2.2+) on top (newRuntimeInfo)."""
    template_meta = (((runtime.get("spec") or {}).get("template") or {}).get("metadata")) or {}
    labels = dict(template_meta.get("labels") or {})
    annotations = dict(template_meta.get("annotations") or {})
    tj_spec = trainjob.get("spec") or {}
    if at_least(version, "2.2"):
        for patch in tj_spec.get("runtimePatches") or []:
            meta = (((patch.get("trainingRuntimeSpec") or {}).get("template")) or {}).get(
                "metadata"
            ) or {}
            labels.update(meta.get("labels") or {})
            annotations.update(meta.get("annotations") or {})
    else:
        labels.update(tj_spec.get("labels") or {})
        annotations.update(tj_spec.get("annotations") or {})
    return labels, annotations


def _gets_resources(rjob: dict[str, Any], runtime: dict[str, Any], version: str) -> bool:
    """Which replicated jobs take ``resourcesPerNode``: the trainer one; from v2.1 also
    ``node`` of an MPI runtime with runLauncherAsNode (builder.go Trainer, trainingruntime.go
    newRuntimeInfo in v2.3, which also needs an mlPolicy)."""
    policy = (runtime.get("spec") or {}).get("mlPolicy")
    mpi = (policy or {}).get("mpi") or {}
    launcher_as_node = bool(mpi.get("runLauncherAsNode")) and rjob.get("name") == "node"
    if at_least(version, "2.3"):
        return (is_trainer_rjob(rjob) and policy is not None) or launcher_as_node
    if at_least(version, "2.1"):
        return is_trainer_rjob(rjob) or launcher_as_node
    return is_trainer_rjob(rjob)


def build_jobset_spec(
    runtime: dict[str, Any], trainjob: dict[str, Any], version: str = DEFAULT_TRAINER_VERSION
) -> dict[str, Any]:
    """The runtime's JobSet spec with the TrainJob's patches and spec.trainer applied, as
    Trainer ``version`` builds it (Trainer's plugins, simplified)."""
    template_spec = ((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}
    spec = apply_trainjob_patches(template_spec, trainjob, version)
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
                # the launcher is one of the nodes, and the node job keeps one pod even for a
                # single node (mpi.go EnforceMLPolicy, v2.0-v2.3: max(numNodes-1, 1))
                count = max(nodes - 1, 1) if launcher_as_node else nodes
        else:
            count = nodes if trainer_job else int(job_spec.get("parallelism") or 1)
        job_spec["parallelism"] = count
        job_spec["completions"] = count
        job_spec["completionMode"] = "Indexed"
        job_spec.setdefault("backoffLimit", 0)
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        pod_spec.setdefault("restartPolicy", "OnFailure" if not mpi else "Never")
        for c in pod_spec.get("containers") or []:
            # Trainer applies the template as JSON of corev1.Container, whose resources struct
            # is never omitted
            c.setdefault("resources", {})
            if c.get("name") != TRAINER_CONTAINER:
                continue
            openmpi = mpi and (mpi.get("mpiImplementation") or "OpenMPI") == "OpenMPI"
            if openmpi and rjob.get("name") == "launcher":  # before spec.trainer.env, which wins
                c["env"] = _merge_env(c.get("env") or [], openmpi_launcher_env(mpi, trainer))
            if trainer_job or (mpi and rjob.get("name") == "node"):
                _apply_to_container(c, trainer, with_command=trainer_job)
            if _gets_resources(rjob, runtime, version):
                apply_resources_per_node(c, trainer.get("resourcesPerNode"), version)
            if not mpi and trainer_job:
                # the torch plugin (plugins/torch/torch.go, v2.0-v2.3): PET_* env with the node
                # rank from the pod's completion index, and the trainer port 29500
                extra = [
                    {"name": "PET_NNODES", "value": str(nodes)},
                    {
                        "name": "PET_NPROC_PER_NODE",
                        "value": str(trainer.get("numProcPerNode") or "auto"),
                    },
                    {
                        "name": "PET_NODE_RANK",
                        "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}},
                    },
                    {"name": "PET_MASTER_ADDR", "value": f"{name}-{rjob['name']}-0-0.{name}"},
                    {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
                ]
                c["env"] = _merge_env(c.get("env") or [], extra)
                ports = [p for p in c.get("ports") or [] if p.get("containerPort") != TRAINER_PORT]
                # protocol: the JobSet CRD's schema default
                c["ports"] = [*ports, {"containerPort": TRAINER_PORT, "protocol": "TCP"}]
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
