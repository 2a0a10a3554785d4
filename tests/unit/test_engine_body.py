"""TrainJob bodies: valid for every Trainer release's CRD (v2.0.1 ... v2.3.0, schema and CEL
rules, no field the server would drop), labelled, keep-alive injected."""

from __future__ import annotations

import os
import re

import pytest

from tests.crd_schema import problems
from tests.helpers.k8s_data import release_params, require_k8s_data
from trainjob_magics.engine.kube.names import trainjob_path
from trainjob_magics.engine.trainjob.body import (
    KEEP_ALIVE_COMMAND,
    build_trainjob,
    generate_name,
    runtime_ref,
)


@pytest.fixture(scope="module", params=release_params("trainer"))
def trainer_release(request: pytest.FixtureRequest) -> str:
    require_k8s_data()
    return request.param


def _errors(release: str, body: dict) -> list[str]:
    return problems("trainjobs", body, release=release)


def test_default_body_injects_keep_alive_and_labels(trainer_release: str) -> None:
    body = build_trainjob("abc", "default", "mpi-interactive")
    assert body["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert body["kind"] == "TrainJob"
    assert body["spec"]["trainer"]["command"] == KEEP_ALIVE_COMMAND
    assert KEEP_ALIVE_COMMAND[:2] == ["sh", "-c"]  # the idle watchdog (engine/remote.py)
    assert body["metadata"]["annotations"]["trainjob-magics/idle-timeout"] == "1800"
    off = build_trainjob("abc", "default", "mpi-interactive", idle_timeout=None)
    assert off["spec"]["trainer"]["command"] == ["sleep", "infinity"]
    assert "trainjob-magics/idle-timeout" not in off["metadata"]["annotations"]
    assert body["spec"]["runtimeRef"] == {
        "name": "mpi-interactive",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    labels = body["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "trainjob-magics"
    assert labels["trainjob-magics/session"] == "true"
    ann = body["metadata"]["annotations"]
    assert ann["trainjob-magics/owner-pid"] == str(os.getpid())
    assert ann["trainjob-magics/owner-host"]
    assert ann["trainjob-magics/created-by"]
    assert _errors(trainer_release, body) == []


def test_keep_alive_is_a_copy() -> None:
    body = build_trainjob("abc", "default", "torch-distributed")
    before = list(KEEP_ALIVE_COMMAND)
    body["spec"]["trainer"]["command"].append("x")
    assert before == KEEP_ALIVE_COMMAND


def test_full_body_validates(trainer_release: str) -> None:
    body = build_trainjob(
        "full-job",
        "team-a",
        "torch-distributed",
        runtime_kind="TrainingRuntime",
        image="pytorch/pytorch:2",
        num_nodes=4,
        command=["python", "-c", "print(1)"],
        args=["--x"],
        cpu="4",
        memory="16Gi",
        gpu="8",
        env={"A": "1", "B": "two"},
        labels={"kueue.x-k8s.io/queue-name": "user-queue"},
    )
    trainer = body["spec"]["trainer"]
    # The caller's command is used, nothing injected.
    assert trainer["command"] == ["python", "-c", "print(1)"]
    assert trainer["numNodes"] == 4
    assert trainer["image"] == "pytorch/pytorch:2"
    assert trainer["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "two"}]
    res = trainer["resourcesPerNode"]
    assert res["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8"}
    assert res["requests"] == res["limits"]
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"
    assert body["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"
    assert _errors(trainer_release, body) == []


def test_no_removed_fields() -> None:
    body = build_trainjob("abc", "default", "x", env={"A": "1"}, cpu="1")
    for removed in ("labels", "annotations", "podSpecOverrides", "podTemplateOverrides"):
        assert removed not in body["spec"]


def test_validator_would_catch_a_bad_body(trainer_release: str) -> None:
    """The CRD check is real: a removed v2.1 field or a bad name type fails it."""
    body = build_trainjob("abc", "default", "x")
    body["spec"]["trainer"]["numNodes"] = "four"
    assert _errors(trainer_release, body)


def test_generated_names_look_like_the_sdk() -> None:
    names = {generate_name() for _ in range(200)}
    assert len(names) == 200
    for name in names:
        assert re.fullmatch(r"[a-z][0-9a-f]{11}", name)


def test_runtime_ref_defaults() -> None:
    assert runtime_ref({"spec": {"runtimeRef": {"name": "r"}}}) == (
        "r",
        "ClusterTrainingRuntime",
    )
    assert (
        trainjob_path("ns", "j") == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/j"
    )
