"""Trainer versions of the local cluster, without a cluster: the Kueue/Trainer pair check, the
served TrainJob schema of each version against its real CRD, and the JobSet each version builds
(resourcesPerNode, podSpecOverrides / podTemplateOverrides / runtimePatches)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.crd_schema import crd_validator, default, field_path, load_crd_schema, prune
from tests.helpers.k8s_data import require_k8s_data
from trainjob_magics.localcluster.apiserver.trainjob_schema import (
    API_VERSION,
    SERVED_VERSION,
    TRAINJOB_SCHEMAS,
    SchemaError,
    validate_trainjob,
    validate_trainjob_update,
)
from trainjob_magics.localcluster.controller.podspec import (
    apply_resources_per_node,
    build_jobset_spec,
    jobset_metadata,
    quantity_string,
)
from trainjob_magics.localcluster.controller.runtime_snapshot import (
    SnapshotError,
    read_snapshot,
    snapshot_configmap,
)
from trainjob_magics.localcluster.controller.strategic_merge import (
    JOBSET_SPEC,
    POD_SPEC,
    strategic_merge,
)
from trainjob_magics.localcluster.controller.versions import (
    TRAINER_VERSIONS,
    check_trainer_version,
    check_version_pair,
    kueue_patch_field,
)
from trainjob_magics.localcluster.controller.webhook import override_errors
from trainjob_magics.localcluster.runtimes.loader import ANCESTOR_LABEL

# --- the Kueue / Trainer pair ---------------------------------------------------------------


def test_versions() -> None:
    assert TRAINER_VERSIONS == ("2.0", "2.1", "2.2", "2.3")
    assert check_trainer_version("2.1") == "2.1"
    with pytest.raises(ValueError, match=r"one of 2\.0, 2\.1, 2\.2, 2\.3, not '2\.4'"):
        check_trainer_version("2.4")


@pytest.mark.parametrize(
    ("kueue", "field"),
    [
        ("0.14.0", "podSpecOverrides"),
        ("0.14.4", "podSpecOverrides"),
        ("0.14.5", "podTemplateOverrides"),
        ("0.14", "podTemplateOverrides"),  # the newest 0.14, v0.14.8
        ("0.14.8", "podTemplateOverrides"),
        ("0.15", "podTemplateOverrides"),
        ("0.16", "podTemplateOverrides"),
        ("0.17", "runtimePatches"),
        ("0.19.2", "runtimePatches"),
        ("0.20", "runtimePatches"),
        ("main", "runtimePatches"),
    ],
)
def test_what_each_kueue_writes(kueue: str, field: str) -> None:
    """kubernetes-sigs/kueue pkg/controller/jobs/trainjob/trainjob_controller.go at each tag."""
    assert kueue_patch_field(kueue) == field


@pytest.mark.parametrize(
    ("kueue", "trainer"),
    [
        ("0.14.0", "2.0"),
        ("0.14", "2.1"),
        ("0.14.8", "2.1"),
        ("0.15", "2.1"),
        ("0.17", "2.2"),
        ("0.17", "2.3"),
        ("0.19", "2.3"),
        ("0.20", "2.3"),
        ("main", "2.3"),
    ],
)
def test_possible_pairs(kueue: str, trainer: str) -> None:
    assert check_version_pair(kueue, trainer) == []


@pytest.mark.parametrize(
    ("kueue", "trainer", "need"),
    [
        ("0.14", "2.2", "2.0 or 2.1"),
        ("0.14", "2.3", "2.0 or 2.1"),
        ("0.16", "2.3", "2.0 or 2.1"),
        ("0.17", "2.0", "2.2 or 2.3"),
        ("0.19", "2.1", "2.2 or 2.3"),
        ("0.20", "2.2", "2.3"),
        ("main", "2.2", "2.3"),
        ("main", "2.0", "2.3"),
    ],
)
def test_impossible_pairs(kueue: str, trainer: str, need: str) -> None:
    with pytest.raises(ValueError) as info:
        check_version_pair(kueue, trainer)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"Kueue {kueue} cannot drive Trainer {trainer}: ")
    assert f"use --trainer-version {need} with --kueue-version {kueue}" in message


def test_pair_that_runs_without_kueues_patch() -> None:
    """Kueue 0.14.0-0.14.4 were built against Trainer v2.0.1: on 2.1 their podSpecOverrides are
    pruned."""
    [warning] = check_version_pair("0.14.4", "2.1")
    assert "spec.podSpecOverrides" in warning and "spec.podTemplateOverrides" in warning
    assert check_version_pair("0.15", "2.0") != []


def test_bad_versions_rejected() -> None:
    with pytest.raises(ValueError, match="not a Kueue version"):
        check_version_pair("1.0", "2.3")
    with pytest.raises(ValueError, match="trainer_version"):
        check_version_pair("main", "2.4")


# --- the served TrainJob schema of each version, against its real CRD ----------------------

RELEASE = {"2.0": "trainer-v2.0.1", "2.1": "trainer-v2.1.0", "2.2": "trainer-v2.2.1"}
RELEASE["2.3"] = "trainer-v2.3.0"


def tj(name: str = "t0123456789a", **spec: Any) -> dict:
    body = {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    body["spec"].update(spec)
    return body


CONTAINER_OVERRIDE = {
    "name": "node",
    "env": [{"name": "A", "value": "1"}],
    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
}
POD_SPEC_OVERRIDE = {
    "targetJobs": [{"name": "node"}],
    "containers": [CONTAINER_OVERRIDE],
    "initContainers": [{"name": "init", "env": [{"name": "B", "value": "2"}]}],
    "nodeSelector": {"cloud.example.com/pool": "gpu"},
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}],
    "schedulingGates": [{"name": "example.com/gate"}],
    "serviceAccountName": "trainer",
}
POD_TEMPLATE_OVERRIDE = {
    "targetJobs": [{"name": "node"}, {"name": "launcher"}],
    "metadata": {"labels": {"kueue.x-k8s.io/podset": "node"}, "annotations": {"a": "b"}},
    "spec": {
        **{k: v for k, v in POD_SPEC_OVERRIDE.items() if k != "targetJobs"},
        "imagePullSecrets": [{"name": "pull"}],
        "affinity": {"nodeAffinity": {}},
    },
}
LONG_ARG = "x" * 70000
ROWS: list[tuple[str, dict]] = [
    ("minimal", tj()),
    ("labels-annotations", tj(labels={"a": "b"}, annotations={"c": "d"})),
    ("labels-not-strings", tj(labels={"a": 1})),
    ("podSpecOverrides", tj(podSpecOverrides=[POD_SPEC_OVERRIDE])),
    ("podSpecOverrides-no-targetJobs", tj(podSpecOverrides=[{"nodeSelector": {"a": "b"}}])),
    ("podSpecOverrides-volume-no-name", tj(podSpecOverrides=[{"targetJobs": [], "volumes": [{}]}])),
    (
        "podSpecOverrides-dup-container",
        tj(podSpecOverrides=[{"targetJobs": [], "containers": [{"name": "a"}, {"name": "a"}]}]),
    ),
    (
        "podSpecOverrides-toleration-seconds-string",
        tj(podSpecOverrides=[{"targetJobs": [], "tolerations": [{"tolerationSeconds": "5"}]}]),
    ),
    ("podSpecOverrides-empty-target", tj(podSpecOverrides=[{"targetJobs": [{"name": ""}]}])),
    ("podTemplateOverrides", tj(podTemplateOverrides=[POD_TEMPLATE_OVERRIDE])),
    (
        "podTemplateOverrides-unknown-in-metadata",
        tj(podTemplateOverrides=[{"targetJobs": [{"name": "n"}], "metadata": {"uid": "x"}}]),
    ),
    ("podTemplateOverrides-no-targetJobs", tj(podTemplateOverrides=[{"spec": {}}])),
    ("podTemplateOverrides-empty-target", tj(podTemplateOverrides=[{"targetJobs": [{}]}])),
    ("runtimePatches", tj(runtimePatches=[{"manager": "trainer.kubeflow.org/kubeflow-sdk"}])),
    ("runtimePatches-no-manager", tj(runtimePatches=[{}])),
    ("activeDeadlineSeconds", tj(activeDeadlineSeconds=60)),
    ("activeDeadlineSeconds-0", tj(activeDeadlineSeconds=0)),
    ("numProcPerNode-auto", tj(trainer={"numProcPerNode": "auto"})),
    ("numProcPerNode-int", tj(trainer={"numProcPerNode": 2})),
    ("command-item-70000", tj(trainer={"command": ["sh", LONG_ARG]})),
    ("args-129", tj(trainer={"args": ["a"] * 129})),
    ("image-501", tj(trainer={"image": "i" * 501})),
    (
        "env-fileKeyRef",
        tj(
            trainer={
                "env": [
                    {
                        "name": "F",
                        "valueFrom": {"fileKeyRef": {"key": "k", "path": "p", "volumeName": "v"}},
                    }
                ]
            }
        ),
    ),
    ("storageUri-not-uri", tj(initializer={"model": {"storageUri": "m"}})),
    ("storageUri-2049", tj(initializer={"model": {"storageUri": "hf://" + "m" * 2044}})),
    ("runtimeRef-name-empty", tj(runtimeRef={"name": ""})),
    ("name-with-dot", tj(name="a.b")),
    ("name-64", tj(name="a" * 64)),
    ("managedBy-other", tj(managedBy="example.com/x")),
    ("resources", tj(trainer={"resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}})),
]


def _oracle(body: dict, version: str) -> tuple[dict, list[str], set[str]]:
    """What the real apiserver with the CRD of ``version`` does: pruned object, warnings, the
    paths of its errors."""
    release = RELEASE[version]
    pruned, warnings = prune(load_crd_schema("trainjobs", release=release), body)
    paths = {field_path(e) for e in crd_validator("trainjobs", release=release).iter_errors(pruned)}
    return pruned, warnings, paths


def _mine(body: dict, version: str) -> tuple[dict | None, list[str], set[str]]:
    try:
        out, warnings = validate_trainjob(body, version)
    except SchemaError as err:
        return None, [], {c["field"] for c in err.causes if not c["field"].startswith("metadata.")}
    return out, warnings, set()


def _same_but_defaults(mine: Any, oracle: Any, path: str = "") -> None:
    if isinstance(oracle, dict):
        assert isinstance(mine, dict), path
        for key in oracle:
            assert key in mine, f"{path}.{key} dropped"
            _same_but_defaults(mine[key], oracle[key], f"{path}.{key}")
    elif isinstance(oracle, list):
        assert isinstance(mine, list) and len(mine) == len(oracle), path
        for m, o in zip(mine, oracle, strict=True):
            _same_but_defaults(m, o, f"{path}[]")
    else:
        assert mine == oracle, path


@pytest.mark.parametrize("version", TRAINER_VERSIONS)
@pytest.mark.parametrize("body", [r[1] for r in ROWS], ids=[r[0] for r in ROWS])
def test_served_schema_agrees_with_crd(body: dict, version: str) -> None:
    """Verdict, error paths, pruning warnings and the stored object, per Trainer version."""
    require_k8s_data()
    pruned, oracle_warnings, oracle_paths = _oracle(body, version)
    out, warnings, paths = _mine(body, version)
    assert paths == oracle_paths
    if out is not None:
        assert sorted(warnings) == sorted(oracle_warnings)
        _same_but_defaults(
            out, default(load_crd_schema("trainjobs", release=RELEASE[version]), pruned)
        )


def test_rows_tell_the_versions_apart() -> None:
    """Every version accepts or prunes some row differently from every other version."""
    require_k8s_data()
    seen = {
        version: tuple(
            (tuple(sorted(_oracle(b, version)[1])), frozenset(_oracle(b, version)[2]))
            for _, b in ROWS
        )
        for version in TRAINER_VERSIONS
    }
    assert len(set(seen.values())) == len(TRAINER_VERSIONS)


def test_the_served_version_is_a_context_variable() -> None:
    body = tj(podSpecOverrides=[POD_SPEC_OVERRIDE], activeDeadlineSeconds=5)
    _, warnings = validate_trainjob(body)
    assert warnings == ['unknown field "spec.podSpecOverrides"']
    token = SERVED_VERSION.set("2.0")
    try:
        out, warnings = validate_trainjob(body)
    finally:
        SERVED_VERSION.reset(token)
    assert warnings == ['unknown field "spec.activeDeadlineSeconds"']
    assert out["spec"]["podSpecOverrides"] == [POD_SPEC_OVERRIDE]
    with pytest.raises(ValueError, match=r"no TrainJob schema for Trainer '1\.9'"):
        validate_trainjob(body, "1.9")
    assert set(TRAINJOB_SCHEMAS) == set(TRAINER_VERSIONS)


# (id, change, {version: the field the CRD rejects as immutable, and its message})
UPDATES: list[tuple[str, Callable[[dict], None], dict[str, tuple[str, str]]]] = [
    (
        "runtimeRef",
        lambda b: b["spec"].update(runtimeRef={"name": "other"}),
        {
            "2.0": ("spec.runtimeRef", "runtimeRef is immutable"),
            "2.1": ("spec.runtimeRef", "runtimeRef is immutable"),
            "2.2": ("spec.runtimeRef", "field is immutable"),
            "2.3": ("spec.runtimeRef", "field is immutable"),
        },
    ),
    (
        "managedBy",
        lambda b: b["spec"].update(managedBy="kueue.x-k8s.io/multikueue"),
        {
            "2.0": ("spec.managedBy", "ManagedBy value is immutable"),
            "2.1": ("spec.managedBy", "ManagedBy value is immutable"),
            "2.2": ("spec.managedBy", "field is immutable"),
            "2.3": ("spec.managedBy", "field is immutable"),
        },
    ),
    (
        "trainer",
        lambda b: b["spec"]["trainer"].update(numNodes=3),
        {
            "2.2": ("spec.trainer", "field is immutable"),
            "2.3": ("spec.trainer", "field is immutable"),
        },
    ),
    ("suspend", lambda b: b["spec"].update(suspend=True), {}),
]


@pytest.mark.parametrize("version", TRAINER_VERSIONS)
@pytest.mark.parametrize(
    ("change", "expected"), [(u[1], u[2]) for u in UPDATES], ids=[u[0] for u in UPDATES]
)
def test_immutable_fields_per_version(
    change: Callable[[dict], None], expected: dict[str, tuple[str, str]], version: str
) -> None:
    require_k8s_data()
    old, _ = validate_trainjob(tj(trainer={"numNodes": 2}), version)
    new = copy.deepcopy(old)
    change(new)
    release = RELEASE[version]
    oracle = [
        (field_path(e), e.message)
        for e in crd_validator("trainjobs", release=release).iter_errors(new, old=old)
    ]
    want = [expected[version]] if version in expected else []
    assert oracle == want
    if not want:
        validate_trainjob_update(old, new, version)
        return
    with pytest.raises(SchemaError) as info:
        validate_trainjob_update(old, new, version)
    [cause] = info.value.causes
    assert (cause["field"], cause["message"].rpartition(": ")[2]) == want[0]


# --- strategic merge patch (k8s.io/apimachinery pkg/util/strategicpatch) -------------------


def test_strategic_merge_lists_by_key() -> None:
    original = {
        "containers": [
            {"name": "node", "image": "a", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "b"},
        ],
        "tolerations": [{"key": "x"}],
        "nodeSelector": {"a": "1", "b": "2"},
    }
    patch = {
        "containers": [{"name": "node", "env": [{"name": "B", "value": "2"}]}],
        "tolerations": [{"key": "y"}],
        "nodeSelector": {"b": None, "c": "3"},
    }
    out = strategic_merge(original, patch, POD_SPEC)
    assert out["containers"][0] == {
        "name": "node",
        "image": "a",
        # a new item goes before the live ones (mergeSortedSlice)
        "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
    }
    assert [c["name"] for c in out["containers"]] == ["node", "side"]
    assert out["tolerations"] == [{"key": "y"}]  # no patchStrategy: replaced
    assert out["nodeSelector"] == {"a": "1", "c": "3"}  # null deletes
    assert original["containers"][0]["env"] == [{"name": "A", "value": "1"}]  # not mutated


def test_strategic_merge_directives() -> None:
    original = {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]}
    out = strategic_merge(original, {"volumes": [{"name": "a", "$patch": "delete"}]}, POD_SPEC)
    assert out == {"volumes": [{"name": "b", "emptyDir": {}}]}
    out = strategic_merge(
        original, {"volumes": [{"$patch": "replace"}, {"name": "c", "emptyDir": {}}]}, POD_SPEC
    )
    assert out == {"volumes": [{"name": "c", "emptyDir": {}}]}
    out = strategic_merge({"affinity": {"x": 1}}, {"affinity": {"$patch": "replace", "y": 2}}, {})
    assert out == {"affinity": {"y": 2}}
    spec = {"replicatedJobs": [{"name": "node"}, {"name": "launcher"}]}
    patch = {"replicatedJobs": [{"name": "launcher", "replicas": 1}, {"name": "node"}]}
    out = strategic_merge(spec, patch, JOBSET_SPEC)
    assert out["replicatedJobs"] == [{"name": "launcher", "replicas": 1}, {"name": "node"}]


# --- the JobSet each version builds --------------------------------------------------------


def _runtime(resources: dict | None = None, mpi: bool = False) -> dict:
    container: dict[str, Any] = {
        "name": "node",
        "image": "img",
        "env": [{"name": "W", "value": "1"}],
    }
    if resources is not None:
        container["resources"] = resources
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": {} if mpi else {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [copy.deepcopy(container)]}}},
        },
    }
    rjobs = [node]
    policy: dict[str, Any] = {"numNodes": 1, "torch": {}}
    if mpi:
        policy = {"numNodes": 1, "mpi": {"runLauncherAsNode": True}}
        launcher = copy.deepcopy(node)
        launcher["name"] = "launcher"
        launcher["template"]["metadata"]["labels"] = {ANCESTOR_LABEL: "trainer"}
        rjobs.append(launcher)
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "rt", "uid": "u1", "resourceVersion": "7"},
        "spec": {
            "mlPolicy": policy,
            "template": {
                "metadata": {"labels": {"from": "runtime"}},
                "spec": {"replicatedJobs": rjobs},
            },
        },
    }


def _job(**spec: Any) -> dict:
    spec.setdefault("runtimeRef", {"name": "rt"})
    body = tj("job", **spec)
    body["metadata"].update(namespace="default", uid="tj-uid")
    return body


def _container(jobset_spec: dict, rjob: str = "node") -> dict:
    [job] = [r for r in jobset_spec["replicatedJobs"] if r["name"] == rjob]
    return job["template"]["spec"]["template"]["spec"]["containers"][0]


def _pod_spec(jobset_spec: dict, rjob: str = "node") -> dict:
    [job] = [r for r in jobset_spec["replicatedJobs"] if r["name"] == rjob]
    return job["template"]["spec"]["template"]["spec"]


BASE = {
    "requests": {"cpu": "1", "memory": "1Gi"},
    "limits": {"cpu": "2"},
    "claims": [{"name": "c"}],
}


@pytest.mark.parametrize(
    ("version", "want"),
    [
        (
            "2.3",
            {
                "requests": {"cpu": "3", "memory": "1Gi"},
                "limits": {"cpu": "2", "nvidia.com/gpu": "1"},
            },
        ),
        ("2.2", {"requests": {"cpu": "3"}, "limits": {"nvidia.com/gpu": "1"}}),
        ("2.1", {"requests": {"cpu": "3"}, "limits": {"nvidia.com/gpu": "1"}}),
        ("2.0", {"requests": {"cpu": "3"}, "limits": {"nvidia.com/gpu": "1"}}),
    ],
)
def test_resources_per_node_merge_or_replace(version: str, want: dict) -> None:
    job = _job(
        trainer={"resourcesPerNode": {"requests": {"cpu": "3"}, "limits": {"nvidia.com/gpu": 1}}}
    )
    spec = build_jobset_spec(_runtime(BASE), job, version)
    assert _container(spec)["resources"] == want  # claims are never copied


def test_resources_per_node_edge_cases() -> None:
    container = {"name": "node", "resources": {"limits": {"cpu": "2"}}}
    apply_resources_per_node(container, {"claims": [{"name": "x"}]}, "2.2")
    assert container["resources"] == {"limits": {"cpu": "2"}}  # no limits/requests: untouched
    apply_resources_per_node(container, None, "2.3")
    assert container["resources"] == {"limits": {"cpu": "2"}}
    apply_resources_per_node(container, {"limits": {"memory": 2000}}, "2.3")
    assert container["resources"] == {"limits": {"cpu": "2", "memory": "2k"}}
    assert [quantity_string(v) for v in (1, 1000000, 1536, "500m")] == ["1", "1M", "1536", "500m"]


@pytest.mark.parametrize(
    ("version", "node_gets_it"), [("2.0", False), ("2.1", True), ("2.3", True)]
)
def test_resources_for_mpi_node_with_launcher_as_node(version: str, node_gets_it: bool) -> None:
    job = _job(trainer={"resourcesPerNode": {"limits": {"cpu": "4"}}})
    spec = build_jobset_spec(_runtime(mpi=True), job, version)
    assert _container(spec, "launcher")["resources"] == {"limits": {"cpu": "4"}}
    # every container carries ``resources`` (Trainer writes corev1.Container as JSON); only
    # the ones resourcesPerNode reaches have any
    assert bool(_container(spec, "node")["resources"]) is node_gets_it


OVERRIDE = {
    "targetJobs": [{"name": "node"}],
    "nodeSelector": {"pool": "gpu"},
    "containers": [{"name": "node", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
    "volumes": [{"name": "d", "emptyDir": {}}],
}


def test_pod_spec_overrides_only_on_v20() -> None:
    job = _job(podSpecOverrides=[OVERRIDE])
    pod = _pod_spec(build_jobset_spec(_runtime(), job, "2.0"))
    assert pod["nodeSelector"] == {"pool": "gpu"} and "targetJobs" not in pod
    assert pod["containers"][0]["volumeMounts"] == [{"name": "d", "mountPath": "/d"}]
    assert pod["containers"][0]["env"][0] == {"name": "W", "value": "1"}  # merged, not replaced
    for version in ("2.1", "2.2", "2.3"):
        assert "nodeSelector" not in _pod_spec(build_jobset_spec(_runtime(), job, version))


def test_pod_template_overrides_on_v21() -> None:
    override = {
        "targetJobs": [{"name": "node"}],
        "metadata": {"labels": {"kueue.x-k8s.io/podset": "node"}, "name": "ignored"},
        "spec": {k: v for k, v in OVERRIDE.items() if k != "targetJobs"},
    }
    job = _job(podTemplateOverrides=[override], labels={"team": "a"}, annotations={"n": "1"})
    spec = build_jobset_spec(_runtime(), job, "2.1")
    template = spec["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["metadata"] == {"labels": {"kueue.x-k8s.io/podset": "node"}}
    assert template["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert jobset_metadata(_runtime(), job, "2.1") == ({"from": "runtime", "team": "a"}, {"n": "1"})
    assert jobset_metadata(_runtime(), job, "2.2") == ({"from": "runtime"}, {})
    assert "nodeSelector" not in _pod_spec(build_jobset_spec(_runtime(), job, "2.0"))


def test_runtime_patches_from_v22() -> None:
    patch = {
        "manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": {"l": "1"}},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "launcher",
                            "template": {
                                "spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}
                            },
                        }
                    ]
                },
            }
        },
    }
    job = _job(runtimePatches=[{"manager": "only/a-name"}, patch])
    for version in ("2.2", "2.3"):
        spec = build_jobset_spec(_runtime(mpi=True), job, version)
        assert [r["name"] for r in spec["replicatedJobs"]] == ["node", "launcher"]  # order kept
        assert _pod_spec(spec, "launcher")["nodeSelector"] == {"a": "b"}
        assert "nodeSelector" not in _pod_spec(spec, "node")
        assert jobset_metadata(_runtime(), job, version)[0] == {"from": "runtime", "l": "1"}
    assert "nodeSelector" not in _pod_spec(
        build_jobset_spec(_runtime(mpi=True), job, "2.1"), "launcher"
    )


# --- the v2.3 runtime snapshot -------------------------------------------------------------


def test_snapshot_configmap_and_round_trip() -> None:
    runtime = {**_runtime(), "status": {"x": 1}}
    cm = snapshot_configmap(_job(), runtime)
    assert cm["metadata"]["name"] == "job-runtime-snapshot"
    assert cm["metadata"]["ownerReferences"] == [
        {
            "apiVersion": API_VERSION,
            "kind": "TrainJob",
            "name": "job",
            "uid": "tj-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    text = cm["data"]["runtime"]
    assert text.startswith(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n"
    )
    back = read_snapshot(cm, _job())
    assert "status" not in back and back["metadata"] == runtime["metadata"]
    assert (
        back["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
            "metadata"
        ]
        == {}
    )
    assert _container(back["spec"]["template"]["spec"])["resources"] == {}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda cm: cm["metadata"]["ownerReferences"][0].update(uid="other"),
            "invalid runtime snapshot: a snapshot configmap exists but is owned by another object",
        ),
        (
            lambda cm: cm.update(data={}),
            'invalid runtime snapshot: snapshot ConfigMap missing "runtime" data key',
        ),
        (
            lambda cm: cm["data"].update(runtime="- a list"),
            "invalid runtime snapshot: unable to unmarshal the snapshot: error unmarshaling JSON",
        ),
        (
            lambda cm: cm["data"].update(
                runtime=cm["data"]["runtime"].replace("name: rt", "name: x")
            ),
            "invalid runtime snapshot: the snapshot refers to the wrong runtime: expecting a "
            'runtime with name, api group and kind of "rt", "trainer.kubeflow.org", '
            '"ClusterTrainingRuntime" but found runtime with name, api group and kind of "x", '
            '"trainer.kubeflow.org", "ClusterTrainingRuntime"',
        ),
    ],
)
def test_snapshot_errors(change: Callable[[dict], None], message: str) -> None:
    job = _job(
        runtimeRef={
            "name": "rt",
            "kind": "ClusterTrainingRuntime",
            "apiGroup": "trainer.kubeflow.org",
        }
    )
    cm = snapshot_configmap(job, _runtime())
    change(cm)
    with pytest.raises(SnapshotError) as info:
        read_snapshot(cm, job)
    assert str(info.value).startswith(message)


# --- the v2.0/v2.1 override webhook --------------------------------------------------------


def test_override_webhook_errors() -> None:
    runtime = _runtime()
    bad = _job(
        podSpecOverrides=[
            {"targetJobs": [{"name": "nope"}, {"name": "node"}]},
            {
                "targetJobs": [{"name": "node"}],
                "containers": [{"name": "node", "env": [{"name": "A"}]}],
            },
        ]
    )
    errors = override_errors("podSpecOverrides", runtime, bad, None, None)
    assert errors == [
        "spec.podSpecOverrides: Invalid value: []v1alpha1.PodSpecOverride{...}: must not have "
        "targetJob that doesn't exist in the runtime job template",
        'spec.podSpecOverrides: Duplicate value: "node"',
        "spec.podSpecOverrides: Invalid value: []v1alpha1.PodSpecOverride{...}: must not have envs "
        "for the dataset-initializer, model-initializer, node containers",
    ]
    old = _job(suspend=True, podTemplateOverrides=[])
    new = _job(suspend=True, podTemplateOverrides=[{"targetJobs": [{"name": "node"}]}])
    active = {"status": {"replicatedJobsStatus": [{"name": "node", "active": 1}]}}
    assert override_errors("podTemplateOverrides", runtime, new, old, None) == []
    assert override_errors("podTemplateOverrides", runtime, new, old, active) == [
        "spec.podTemplateOverrides: Forbidden: PodTemplateOverrides cannot be modified when the "
        "JobSet's ReplicatedJob node is still active"
    ]


def test_cli_trainer_version_option() -> None:
    from trainjob_magics.cli import _parser

    args = _parser().parse_args(["local-cluster"])
    assert args.trainer_version == "2.3"
    assert (
        _parser().parse_args(["local-cluster", "--trainer-version", "2.0"]).trainer_version == "2.0"
    )
    with pytest.raises(SystemExit):
        _parser().parse_args(["local-cluster", "--trainer-version", "2.4"])
