"""Pod shaping in TrainJob bodies: every option, rendered in the field each Trainer release has
(2.0 podSpecOverrides, 2.1 podTemplateOverrides, 2.2/2.3 runtimePatches), checked against that
release's real CRD (schema, CEL rules, no field the server would drop); the served field read
from the published schema; every bad value one line before anything is sent."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.crd_schema import load_crd_schema, problems
from tests.helpers.k8s_data import release_params, require_k8s_data
from trainjob_magics.engine.errors import InvalidInputError
from trainjob_magics.engine.trainjob.body import build_trainjob
from trainjob_magics.engine.trainjob.overrides import (
    MANAGER,
    apply_shaping,
    merge,
    replicated_jobs,
)
from trainjob_magics.engine.trainjob.served import from_spec_schema
from trainjob_magics.engine.trainjob.shaping import build_shaping

# A runtime with an initializer (its own container), an MPI-style launcher and the node job.
RUNTIME: dict[str, Any] = {
    "spec": {
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": name,
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {"containers": [{"name": c} for c in containers]}
                                }
                            }
                        },
                    }
                    for name, containers in (
                        ("dataset-initializer", ["dataset-initializer"]),
                        ("launcher", ["launcher"]),
                        ("node", ["node"]),
                    )
                ]
            }
        }
    }
}
JOBS = replicated_jobs(RUNTIME)

# One value for every option of the table.
OPTIONS: dict[str, dict[str, Any]] = {
    "pvc": {"volumes": ["pvc:data:/data"]},
    "pvc-ro": {"volumes": ["pvc:data:/data:ro"]},
    "configmap": {"volumes": ["configmap:cfg:/etc/cfg"]},
    "secret": {"volumes": ["secret:creds:/etc/creds"]},
    "emptydir": {"volumes": ["emptydir:/scratch:2Gi"]},
    "shm": {"shm_size": "8Gi"},
    "service-account": {"service_account": "reader"},
    "node-selector": {"node_selector": {"pool": "gpu", "example.com/zone": "a"}},
    "toleration": {"tolerations": ["gpu=true:NoSchedule", "spot:NoExecute"]},
    "image-pull-secret": {"image_pull_secrets": ["regcred"]},
    "label": {"labels": {"team": "vision", "cost.example.com/center": "42"}},
    "annotation": {"annotations": {"example.com/owner": "Ann Smith <ann@example.com>"}},
    "pod-patch": {
        "pod_patch": {
            "metadata": {"labels": {"patched": "yes"}},
            "spec": {
                "containers": [
                    {"name": "launcher", "volumeMounts": [{"name": "tjm-pvc-0", "mountPath": "/d"}]}
                ],
                "volumes": [{"name": "extra", "emptyDir": {}}],
            },
        },
        "volumes": ["pvc:data:/data"],
    },
}
FIELD = {
    "trainer-v2.0.1": "podSpecOverrides",
    "trainer-v2.1.0": "podTemplateOverrides",
    "trainer-v2.2.1": "runtimePatches",
    "trainer-v2.3.0": "runtimePatches",
}


@pytest.fixture(scope="module", params=release_params("trainer"))
def release(request: pytest.FixtureRequest) -> str:
    require_k8s_data()
    return request.param


def _served(release: str):
    spec = load_crd_schema("trainjobs", release=release)["properties"]["spec"]
    served = from_spec_schema(spec)
    assert served is not None
    return served


def _body(release: str, **options: Any) -> dict[str, Any]:
    body = build_trainjob("shaped", "team-a", "torch-distributed")
    return apply_shaping(body, build_shaping(**options), _served(release), JOBS)


def _pod_parts(release: str, body: dict[str, Any]) -> dict[str, tuple[dict, dict]]:
    """replicated job -> (pod metadata, pod spec) as the body patches it."""
    spec = body["spec"]
    out: dict[str, tuple[dict, dict]] = {}
    if FIELD[release] == "podSpecOverrides":
        for entry in spec.get("podSpecOverrides") or []:
            pod = {k: v for k, v in entry.items() if k != "targetJobs"}
            for target in entry["targetJobs"]:
                out[target["name"]] = ({}, pod)
    elif FIELD[release] == "podTemplateOverrides":
        for entry in spec.get("podTemplateOverrides") or []:
            for target in entry["targetJobs"]:
                out[target["name"]] = (entry.get("metadata") or {}, entry.get("spec") or {})
    else:
        (ours,) = [p for p in spec.get("runtimePatches") or [] if p["manager"] == MANAGER]
        for rj in ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            template = rj["template"]["spec"]["template"]
            out[rj["name"]] = (template.get("metadata") or {}, template.get("spec") or {})
    return out


def test_the_served_field_is_read_from_each_releases_schema(release: str) -> None:
    served = _served(release)
    assert served.field == FIELD[release]
    assert served.release == release.removeprefix("trainer-v")[:3]
    assert served.cel_immutable_patches == (release == "trainer-v2.3.0")


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_option_is_valid_for_every_release(release: str, option: str) -> None:
    """Schema, CEL rules and pruning of the release's CRD accept the body, and the option
    reaches the pod template of every replicated job (mounts: the node container only)."""
    kwargs = OPTIONS[option]
    if option == "image-pull-secret" and release == "trainer-v2.0.1":
        with pytest.raises(InvalidInputError, match=r"Trainer 2\.1 or later"):
            _body(release, **kwargs)
        return
    if option == "pod-patch" and release == "trainer-v2.0.1":
        with pytest.raises(InvalidInputError, match=r"pod metadata needs Kubeflow Trainer 2\.1"):
            _body(release, **kwargs)
        kwargs = copy.deepcopy(kwargs)
        del kwargs["pod_patch"]["metadata"]
    body = _body(release, **kwargs)
    assert problems("trainjobs", body, release=release) == []
    parts = _pod_parts(release, body)
    if option in ("label", "annotation"):
        key = "labels" if option == "label" else "annotations"
        assert body["metadata"][key].items() >= kwargs[key].items()  # the TrainJob itself
        if release == "trainer-v2.0.1":  # no pod metadata in 2.0: the JobSet's (spec.labels)
            assert body["spec"][key] == kwargs[key]
            return
    assert set(parts) == {"dataset-initializer", "launcher", "node"}  # every job named
    node_meta, node_spec = parts["node"]
    containers = {c["name"]: c for c in node_spec.get("containers") or []}
    for job, (_meta, pod) in parts.items():
        names = {c["name"] for c in pod.get("containers") or []}
        assert names <= {c for j in JOBS if j.name == job for c in j.containers}, (job, names)
    if "volumes" in kwargs:
        mounts = {m["mountPath"]: m for m in containers["node"]["volumeMounts"]}
        path = kwargs["volumes"][0].split(":")[2 if not option.startswith("emptydir") else 1]
        assert path in mounts
        vol = next(v for v in node_spec["volumes"] if v["name"] == mounts[path]["name"])
        if option.startswith("pvc"):
            assert vol["persistentVolumeClaim"]["claimName"] == "data"
            # ro on both: the mount's flag, and the claim's, which attaches the volume
            # read-only (a ReadOnlyMany claim needs it) and covers every container
            ro = option == "pvc-ro"
            assert mounts[path].get("readOnly", False) == ro
            assert vol["persistentVolumeClaim"].get("readOnly", False) == ro
        elif option == "configmap":
            assert vol["configMap"] == {"name": "cfg"}
        elif option == "secret":
            assert vol["secret"] == {"secretName": "creds"}
        elif option == "emptydir":
            assert vol["emptyDir"] == {"sizeLimit": "2Gi"}
        # the initializer has the volumes but no mounts (its container is not patched)
        assert "containers" not in parts["dataset-initializer"][1]
    if option == "shm":
        shm = next(v for v in node_spec["volumes"] if v["name"] == "tjm-shm")
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
        assert {"name": "tjm-shm", "mountPath": "/dev/shm"} in containers["node"]["volumeMounts"]
    if option == "service-account":
        assert all(p[1]["serviceAccountName"] == "reader" for p in parts.values())
    if option == "node-selector":
        assert node_spec["nodeSelector"] == kwargs["node_selector"]
    if option == "toleration":
        assert node_spec["tolerations"] == [
            {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
        ]
    if option == "image-pull-secret":
        assert node_spec["imagePullSecrets"] == [{"name": "regcred"}]
    if option in ("label", "annotation"):
        key = "labels" if option == "label" else "annotations"
        assert node_meta[key] == kwargs[key]
    if option == "pod-patch":
        launcher = parts["launcher"][1]
        assert launcher["containers"] == [
            {"name": "launcher", "volumeMounts": [{"name": "tjm-pvc-0", "mountPath": "/d"}]}
        ]
        assert {"name": "extra", "emptyDir": {}} in node_spec["volumes"]
        assert any(v["name"] == "tjm-pvc-0" for v in node_spec["volumes"])
        if release != "trainer-v2.0.1":
            assert node_meta["labels"] == {"patched": "yes"}


def test_all_options_together_are_valid(release: str) -> None:
    every: dict[str, Any] = {}
    for option, kwargs in OPTIONS.items():
        if option == "pvc-ro":
            continue
        for key, value in kwargs.items():
            if key == "volumes":
                every.setdefault("volumes", [])
                every["volumes"] += [v for v in value if v not in every["volumes"]]
            else:
                every[key] = value
    if release == "trainer-v2.0.1":
        del every["image_pull_secrets"]
        every["pod_patch"] = {"spec": every["pod_patch"]["spec"]}
    body = _body(release, **every)
    assert problems("trainjobs", body, release=release) == []


@pytest.mark.parametrize("release", ["trainer-v2.2.1", "trainer-v2.3.0"])
def test_kueues_entry_and_ours_live_side_by_side(release: str) -> None:
    """Kueue's webhook appends its own runtimePatches entry (manager kueue.x-k8s.io/manager):
    both entries are valid together (listType map keyed by manager)."""
    require_k8s_data()
    body = _body(release, volumes=["pvc:data:/data"])
    body["spec"]["runtimePatches"].append(
        {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
    )
    assert problems("trainjobs", body, release=release) == []
    twice = copy.deepcopy(body)  # the same manager twice is invalid (why --dry-run drops it)
    twice["spec"]["runtimePatches"].append(twice["spec"]["runtimePatches"][-1])
    assert problems("trainjobs", twice, release=release)


def test_unread_runtime_names_the_node_job_only() -> None:
    jobs = replicated_jobs(None)
    assert [(j.name, j.containers) for j in jobs] == [("node", ("node",))]


def test_merge_is_strategic_for_named_lists() -> None:
    base = {"spec": {"containers": [{"name": "node", "volumeMounts": [{"mountPath": "/a"}]}]}}
    patch = {"spec": {"containers": [{"name": "node", "volumeMounts": [{"mountPath": "/b"}]}]}}
    merged = merge(base, patch)
    assert merged["spec"]["containers"] == [
        {"name": "node", "volumeMounts": [{"mountPath": "/a"}, {"mountPath": "/b"}]}
    ]
    tol = merge({"tolerations": [{"key": "a"}]}, {"tolerations": [{"key": "b"}]})
    assert tol["tolerations"] == [{"key": "a"}, {"key": "b"}]


def test_pod_patch_naming_a_container_no_pod_has_is_one_line() -> None:
    shaping = build_shaping(pod_patch={"spec": {"containers": [{"name": "sidecar"}]}})
    body = build_trainjob("shaped", "ns", "rt")
    with pytest.raises(InvalidInputError, match="no pod of the runtime has a container 'sidecar'"):
        apply_shaping(body, shaping, from_spec_schema({"properties": {"runtimePatches": {}}}), JOBS)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"volumes": "nfs:x:/d"}, "--volume kind 'nfs' is unknown"),
        ({"volumes": "pvc:Data:/d"}, "not a valid Kubernetes name"),
        ({"volumes": "pvc:data:d"}, "must be absolute"),
        ({"volumes": "pvc:data"}, "--volume expects"),
        ({"volumes": "pvc:data:/d:rx"}, "must be ro or rw"),
        (
            {"volumes": "pvc:d:/a/../etc"},
            "--volume pvc:d:/a/../etc: mount path '/a/../etc' has a '..' part: give the "
            "absolute path it means, without '..' (e.g. /data)",
        ),
        ({"volumes": "emptydir:/x/.."}, "mount path '/x/..' has a '..' part"),
        ({"volumes": "configmap:c:/../x:ro"}, "mount path '/../x' has a '..' part"),
        ({"volumes": "emptydir:/d:lots"}, "not a Kubernetes quantity"),
        ({"volumes": ["pvc:a:/d", "pvc:b:/d"]}, "two volumes are mounted at /d"),
        ({"shm_size": "8 GB"}, "not a Kubernetes quantity"),
        ({"shm_size": "0"}, "more than 0"),
        ({"service_account": "Bad_SA"}, "--service-account"),
        ({"node_selector": ["pool"]}, "expects KEY=VALUE"),
        ({"node_selector": {"pool": "a b"}}, "label value"),
        ({"tolerations": "gpu=true:NoScheduled"}, "effect 'NoScheduled' is unknown"),
        ({"tolerations": "gpu"}, "KEY[=VALUE]:EFFECT"),
        ({"tolerations": "bad key!:NoSchedule"}, "label key"),
        ({"image_pull_secrets": "Reg_Cred"}, "--image-pull-secret"),
        ({"labels": {"-x": "1"}}, "label key"),
        ({"annotations": ["noequals"]}, "--annotation expects KEY=VALUE"),
        ({"env_from": "vault:x"}, "--env-from expects secret:NAME or configmap:NAME"),
        ({"env_from": "secret:Bad"}, "not a valid Kubernetes name"),
        ({"pod_patch": {"kind": "Deployment", "replicas": 2}}, "is not a pod template"),
        ({"pod_patch": {"spec": {}, "replicas": 2}}, "unexpected top-level key"),
        ({"pod_patch": {"metadata": {"name": "x"}}}, "metadata.name cannot be patched"),
    ],
)
def test_bad_values_are_one_line(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        build_shaping(**kwargs)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_pod_patch_file(tmp_path: Path) -> None:
    good = tmp_path / "patch.yaml"
    good.write_text("spec:\n  containers:\n  - name: node\n    securityContext: {runAsUser: 0}\n")
    shaping = build_shaping(pod_patch=str(good))
    assert shaping.pod_patch == {
        "spec": {"containers": [{"name": "node", "securityContext": {"runAsUser": 0}}]}
    }
    bare = tmp_path / "bare.yaml"
    bare.write_text("nodeSelector: {pool: a}\n")  # a bare pod spec is the spec
    assert build_shaping(pod_patch=str(bare)).pod_patch == {"spec": {"nodeSelector": {"pool": "a"}}}
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed\n")
    with pytest.raises(InvalidInputError, match="is not valid YAML"):
        build_shaping(pod_patch=str(broken))
    with pytest.raises(InvalidInputError, match="cannot read the file"):
        build_shaping(pod_patch=str(tmp_path / "missing.yaml"))
