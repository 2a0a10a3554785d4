"""Preloaded runtimes are valid ClusterTrainingRuntimes and the helpers read them right."""

from __future__ import annotations

import copy

import pytest

from tests.crd_schema import crd_validator, field_path, load_crd_schema, prune
from tests.helpers.k8s_data import release_params, require_k8s_data
from trainjob_magics.localcluster.runtimes.loader import (
    ANCESTOR_LABEL,
    load_builtin_runtimes,
    mpi_policy,
    parse_runtime_yaml,
    replicated_jobs,
    runtime_framework,
    runtime_num_nodes,
    trainer_replicated_job,
)

SHARED_RUNTIMES = ["torch", "deepspeed", "jax", "mlx", "xgboost"]


def builtin(name: str) -> dict:
    return {r["metadata"]["name"]: r for r in load_builtin_runtimes()}[name]


def shared_runtimes_dir():
    """The ClusterTrainingRuntimes that ship with Trainer v2.3.0 (k8s data)."""
    return require_k8s_data() / "trainer-v2.3.0/runtimes"


def shared_runtime(framework: str) -> dict:
    path = shared_runtimes_dir() / f"{framework}_distributed.yaml"
    [doc] = parse_runtime_yaml(path.read_text())
    return doc


def assert_valid(plural: str, obj: dict, release: str | None = None) -> None:
    pruned, warnings = prune(load_crd_schema(plural, release=release), obj)
    assert warnings == [], f"fields the real server would drop: {warnings}"
    validator = crd_validator(plural, release=release)
    errors = [f"{field_path(e)}: {e.message}" for e in validator.iter_errors(pruned)]
    assert errors == []


def test_builtin_names() -> None:
    names = [r["metadata"]["name"] for r in load_builtin_runtimes()]
    assert names == ["deepspeed-distributed", "mpi-interactive", "torch-distributed"]


@pytest.mark.parametrize("release", release_params("trainer"))
@pytest.mark.parametrize("name", ["torch-distributed", "deepspeed-distributed", "mpi-interactive"])
def test_builtin_valid_against_real_crd(name: str, release: str) -> None:
    """Valid for every Trainer release's runtime CRDs (v2.0.1 ... v2.3.0)."""
    require_k8s_data()
    runtime = builtin(name)
    assert_valid("clustertrainingruntimes", runtime, release)
    namespaced = {**copy.deepcopy(runtime), "kind": "TrainingRuntime"}
    namespaced["metadata"]["namespace"] = "default"
    assert_valid("trainingruntimes", namespaced, release)


def test_validator_catches_a_broken_runtime() -> None:
    validator = crd_validator("clustertrainingruntimes")
    runtime = builtin("mpi-interactive")
    runtime["spec"]["mlPolicy"]["torch"] = {}
    errors = [(field_path(e), e.message) for e in validator.iter_errors(runtime)]
    assert errors == [("spec.mlPolicy", "Only one of the policy can be configured")]
    # An enum error blocks the CEL rules, as on a real apiserver.
    runtime["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "MPICH"
    paths = {field_path(e) for e in validator.iter_errors(runtime)}
    assert paths == {"spec.mlPolicy.mpi.mpiImplementation", "<nil>"}


@pytest.mark.parametrize(
    ("framework", "name"), [("torch", "torch-distributed"), ("deepspeed", "deepspeed-distributed")]
)
def test_builtin_faithful_to_trainer_v230(framework: str, name: str) -> None:
    assert builtin(name) == shared_runtime(framework)


@pytest.mark.parametrize(
    ("name", "trainer", "jobs", "launcher_as_node", "framework"),
    [
        ("torch-distributed", "node", ["node"], None, "torch"),
        ("deepspeed-distributed", "launcher", ["node", "launcher"], True, "deepspeed"),
        ("mpi-interactive", "launcher", ["node", "launcher"], True, "mpi"),
    ],
)
def test_helpers(
    name: str, trainer: str, jobs: list[str], launcher_as_node: bool | None, framework: str
) -> None:
    runtime = builtin(name)
    assert trainer_replicated_job(runtime) == trainer
    assert [j["name"] for j in replicated_jobs(runtime)] == jobs
    assert runtime_num_nodes(runtime) == 1
    assert runtime_framework(runtime) == framework
    policy = mpi_policy(runtime)
    if launcher_as_node is None:
        assert policy is None
    else:
        assert policy is not None and policy["runLauncherAsNode"] is launcher_as_node
        assert policy["mpiImplementation"] == "OpenMPI"
        assert policy["sshAuthMountPath"] == "/home/mpiuser/.ssh"


def test_mpi_interactive_layout() -> None:
    runtime = builtin("mpi-interactive")
    node, launcher = replicated_jobs(runtime)
    assert launcher["dependsOn"] == [{"name": "node", "status": "Ready"}]
    assert launcher["template"]["metadata"]["labels"] == {ANCESTOR_LABEL: "trainer"}
    assert ANCESTOR_LABEL not in (node["template"].get("metadata") or {}).get("labels", {})
    for job in (node, launcher):
        [container] = job["template"]["spec"]["template"]["spec"]["containers"]
        assert container["name"] == "node"
    [node_container] = node["template"]["spec"]["template"]["spec"]["containers"]
    assert node_container["command"] == ["/usr/sbin/sshd"]


def test_helpers_on_jobset_and_fallbacks() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "spec": copy.deepcopy(builtin("deepspeed-distributed")["spec"]["template"]["spec"]),
    }
    assert trainer_replicated_job(jobset) == "launcher"
    for job in jobset["spec"]["replicatedJobs"]:
        job["template"].pop("metadata", None)
    assert trainer_replicated_job(jobset) == "launcher"  # seed PR fallback
    jobset["spec"]["replicatedJobs"][1]["name"] = "worker"
    with pytest.raises(ValueError, match="cannot tell"):
        trainer_replicated_job(jobset)
    assert runtime_num_nodes({"spec": {"mlPolicy": {"numNodes": 4}}}) == 4
    assert runtime_num_nodes({"spec": {}}) == 1
    assert mpi_policy({"spec": {"mlPolicy": {"mpi": {}}}}) == {
        "numProcPerNode": 1,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": "/root/.ssh",
        "runLauncherAsNode": False,
    }


@pytest.mark.parametrize("framework", SHARED_RUNTIMES)
def test_parse_real_shared_runtimes(framework: str) -> None:
    runtime = shared_runtime(framework)
    assert runtime["kind"] == "ClusterTrainingRuntime"
    assert runtime["metadata"]["name"] == f"{framework}-distributed"
    assert trainer_replicated_job(runtime) in {"node", "launcher"}
    assert_valid("clustertrainingruntimes", runtime)


def test_parse_multi_doc_and_builtin_files_round_trip() -> None:
    text = "\n---\n".join(
        (shared_runtimes_dir() / f"{f}_distributed.yaml").read_text() for f in SHARED_RUNTIMES
    )
    docs = parse_runtime_yaml(text + "\n---\n")
    assert [d["metadata"]["name"] for d in docs] == [f"{f}-distributed" for f in SHARED_RUNTIMES]
    namespaced = parse_runtime_yaml(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\n"
        "metadata: {name: mine, namespace: team}\n"
        "spec: {template: {spec: {replicatedJobs: [{name: node}]}}}\n"
    )
    assert namespaced[0]["kind"] == "TrainingRuntime"
    assert trainer_replicated_job(namespaced[0]) == "node"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (None, r"document 1 is TrainJob \(trainer.kubeflow.org/v1alpha1\); expected"),
        ("kind: ClusterTrainingRuntime\napiVersion: v1\nmetadata: {name: x}\n", r"\(v1\)"),
        ("- a\n- b\n", "not a mapping"),
        ("", "no documents"),
        ("a: [unclosed\n", "does not parse"),
        (
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nspec: {}\n",
            "no metadata.name",
        ),
        (
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n"
            "metadata: {name: x}\nspec: {mlPolicy: {numNodes: 1}}\n",
            "no spec.template.spec.replicatedJobs",
        ),
    ],
)
def test_parse_rejects_non_runtimes(text: str | None, match: str) -> None:
    if text is None:
        text = (shared_runtimes_dir() / "example_flux-interactive-trainjob.yaml").read_text()
    with pytest.raises(ValueError, match=match):
        parse_runtime_yaml(text)


def test_a_runtime_then_a_trainjob_is_rejected_with_its_index() -> None:
    good = (shared_runtimes_dir() / "torch_distributed.yaml").read_text()
    bad = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    with pytest.raises(ValueError, match="document 2 is ConfigMap"):
        parse_runtime_yaml(good + "\n---\n" + bad)


@pytest.mark.parametrize(
    ("runtime", "nodes", "pods"),
    [
        ("mpi-interactive", 3, 3),  # the launcher is one of the nodes (runLauncherAsNode)
        ("mpi-interactive", 1, 2),  # ... and the node job keeps one pod
        ("deepspeed-distributed", 4, 4),
        ("torch-distributed", 3, 3),
    ],
)
def test_jobset_pod_count_is_every_pod_the_job_runs(runtime: str, nodes: int, pods: int) -> None:
    """The connect's "N/M pods running" counts the JobSet's pods (issue 36, defect 6), not
    those created so far: an MPI launcher comes after its node pods."""
    from trainjob_magics.engine.trainjob.runtime import jobset_pod_count
    from trainjob_magics.localcluster.controller.podspec import build_jobset_spec

    trainjob = {"metadata": {"name": "j"}, "spec": {"trainer": {"numNodes": nodes}}}
    spec = build_jobset_spec(copy.deepcopy(builtin(runtime)), trainjob)
    assert jobset_pod_count({"spec": spec}) == pods
    # without get on jobsets, or before the JobSet: nothing known
    assert jobset_pod_count(None) == 0
    # no launcher as node: the launcher and every node (Trainer's other MPI runtimes)
    rjobs = [{"name": "launcher"}, {"name": "node", "template": {"spec": {"parallelism": 3}}}]
    assert jobset_pod_count({"spec": {"replicatedJobs": rjobs}}) == 4
