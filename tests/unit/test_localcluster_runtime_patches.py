"""How each Trainer version merges a TrainJob's runtimePatches into the runtime's JobSet spec
(kubeflow/trainer pkg/runtime/core/trainingruntime.go mergeRuntimePatches at v2.2.1 and
v2.3.0), as the local cluster's controller builds it."""

from __future__ import annotations

from typing import Any

from trainjob_magics.localcluster.controller.podspec import apply_trainjob_patches


def _rjob(name: str, image: str) -> dict[str, Any]:
    return {
        "name": name,
        "template": {
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": image}]}}}
        },
    }


RUNTIME_SPEC = {
    "network": {"publishNotReadyAddresses": True},
    "replicatedJobs": [_rjob("launcher", "a"), _rjob("node", "b")],
}


def _trainjob(*patch_specs: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": {
            "runtimePatches": [
                {"manager": f"m{i}", "trainingRuntimeSpec": {"template": {"spec": spec}}}
                for i, spec in enumerate(patch_specs)
            ]
        }
    }


VOLUME_PATCH = {
    "replicatedJobs": [
        {
            "name": "node",
            "template": {
                "spec": {
                    "template": {
                        "spec": {
                            "volumes": [
                                {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}
                            ],
                            "containers": [
                                {
                                    "name": "node",
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                }
                            ],
                        }
                    }
                }
            },
        },
        _rjob("extra", "c"),
    ]
}


def _pod(spec: dict[str, Any], name: str) -> dict[str, Any]:
    rjob = next(r for r in spec["replicatedJobs"] if r["name"] == name)
    return rjob["template"]["spec"]["template"]["spec"]


def test_v22_merges_each_replicated_job_by_name_and_ignores_unknown_names() -> None:
    spec = apply_trainjob_patches(RUNTIME_SPEC, _trainjob(VOLUME_PATCH), "2.2")
    assert [r["name"] for r in spec["replicatedJobs"]] == ["launcher", "node"]
    node = _pod(spec, "node")
    assert node["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]
    assert node["containers"] == [
        {"name": "node", "image": "b", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    ]
    assert "volumes" not in _pod(spec, "launcher")


def test_v22_uses_only_the_replicated_jobs_of_a_patch() -> None:
    patch = {"network": {"publishNotReadyAddresses": False}, "replicatedJobs": []}
    spec = apply_trainjob_patches(RUNTIME_SPEC, _trainjob(patch), "2.2")
    assert spec["network"] == {"publishNotReadyAddresses": True}


def test_v23_merges_into_the_whole_jobset_spec_then_restores_the_order() -> None:
    patch = {**VOLUME_PATCH, "network": {"publishNotReadyAddresses": False}}
    spec = apply_trainjob_patches(RUNTIME_SPEC, _trainjob(patch), "2.3")
    assert spec["network"] == {"publishNotReadyAddresses": False}
    # a name the runtime lacks is added; Go's zero value sorts it with index 0 (stable)
    names = [r["name"] for r in spec["replicatedJobs"]]
    assert names.index("launcher") < names.index("node")
    assert set(names) == {"launcher", "node", "extra"}
    assert names[-1] == "node"
    assert _pod(spec, "node")["volumes"][0]["name"] == "data"


def test_patches_apply_in_order_later_wins() -> None:
    first = {
        "replicatedJobs": [
            {
                "name": "node",
                "template": {"spec": {"template": {"spec": {"nodeSelector": {"a": "1"}}}}},
            }
        ]
    }
    second = {
        "replicatedJobs": [
            {
                "name": "node",
                "template": {
                    "spec": {"template": {"spec": {"nodeSelector": {"a": "2", "b": "3"}}}}
                },
            }
        ]
    }
    for version in ("2.2", "2.3"):
        spec = apply_trainjob_patches(RUNTIME_SPEC, _trainjob(first, second), version)
        assert _pod(spec, "node")["nodeSelector"] == {"a": "2", "b": "3"}, version
