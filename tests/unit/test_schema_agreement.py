"""The local cluster's TrainJob validator agrees with the real CRD schema (read at test time)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.crd_schema import crd_validator, error_paths, field_path, load_crd_schema, prune
from trainjob_magics.localcluster.apiserver.trainjob_schema import (
    API_VERSION,
    SchemaError,
    validate_trainjob,
    validate_trainjob_update,
)

BLOCKED = "some validation rules were not checked"


def trainjob(name: str = "t0123456789a", **spec: Any) -> dict:
    """A minimal valid TrainJob with ``spec`` fields merged in."""
    body = {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    body["spec"].update(spec)
    return body


def with_trainer(**trainer: Any) -> dict:
    return trainjob(trainer=trainer)


def edit(fn: Callable[[dict], None], body: dict | None = None) -> dict:
    body = copy.deepcopy(body or trainjob())
    fn(body)
    return body


def patches(n: int) -> list[dict]:
    return [{"manager": f"example.com/m{i}"} for i in range(n)]


FULL = with_trainer(
    image="docker.io/library/python:3.12",
    command=["sleep", "infinity"],
    args=["--x", "1"],
    env=[{"name": "A", "value": "1"}, {"name": "B", "value": ""}],
    numNodes=4,
    numProcPerNode=2,
    resourcesPerNode={
        "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
        "requests": {"cpu": "500m", "memory": "1.5Gi", "ephemeral-storage": "1e3"},
    },
)

# (id, body, valid?, warnings a valid body must produce)
ROWS: list[tuple[str, dict, bool, list[str]]] = [
    ("minimal", trainjob(), True, []),
    ("full-engine-like", FULL, True, []),
    ("no-spec", edit(lambda b: b.pop("spec")), True, []),
    ("removed-spec-labels", trainjob(labels={"a": "b"}), True, ['unknown field "spec.labels"']),
    (
        "removed-pod-template-overrides",
        trainjob(podTemplateOverrides=[{"targetJobs": [{"name": "node"}]}]),
        True,
        ['unknown field "spec.podTemplateOverrides"'],
    ),
    (
        "removed-annotations-and-podspec",
        trainjob(annotations={"a": "b"}, podSpecOverrides=[]),
        True,
        ['unknown field "spec.annotations"', 'unknown field "spec.podSpecOverrides"'],
    ),
    (
        "unknown-in-trainer-and-env",
        with_trainer(foo=1, env=[{"name": "A", "bar": "x"}]),
        True,
        ['unknown field "spec.trainer.foo"', 'unknown field "spec.trainer.env[0].bar"'],
    ),
    ("unknown-top-level", edit(lambda b: b.update(extra=1)), True, ['unknown field "extra"']),
    ("numNodes-0-has-no-crd-minimum", with_trainer(numNodes=0), True, []),
    ("numNodes-float-integral", with_trainer(numNodes=2.0), True, []),
    ("suspend-and-deadline", trainjob(suspend=True, activeDeadlineSeconds=1), True, []),
    ("managedBy-multikueue", trainjob(managedBy="kueue.x-k8s.io/multikueue"), True, []),
    ("16-runtimePatches", trainjob(runtimePatches=patches(16)), True, []),
    (
        "runtimePatch-time-and-spec",
        trainjob(
            runtimePatches=[
                {
                    "manager": "trainer.kubeflow.org/kubeflow-sdk",
                    "time": "2026-01-02T03:04:05Z",
                    "trainingRuntimeSpec": {},
                }
            ]
        ),
        True,
        [],
    ),
    ("suspend-null-dropped", trainjob(suspend=None), True, []),
    ("name-63-chars", trainjob(name="a" * 63), True, []),
    (
        "env-valueFrom",
        with_trainer(env=[{"name": "S", "valueFrom": {"secretKeyRef": {"key": "k"}}}]),
        True,
        [],
    ),
    (
        "initializer-storageUris",
        trainjob(
            initializer={"model": {"storageUri": "hf://org/m"}, "dataset": {"storageUri": ""}}
        ),
        True,
        [],
    ),
    (
        "runtimeRef-TrainingRuntime",
        trainjob(runtimeRef={"name": "mine", "kind": "TrainingRuntime"}),
        True,
        [],
    ),
    ("numNodes-string", with_trainer(numNodes="string"), False, []),
    ("numNodes-bool", with_trainer(numNodes=True), False, []),
    ("numNodes-fraction", with_trainer(numNodes=1.5), False, []),
    ("numProcPerNode-auto-v22", with_trainer(numProcPerNode="auto"), False, []),
    ("activeDeadlineSeconds-0", trainjob(activeDeadlineSeconds=0), False, []),
    ("runtimeRef-missing", edit(lambda b: b["spec"].pop("runtimeRef")), False, []),
    ("runtimeRef-name-missing", trainjob(runtimeRef={"kind": "ClusterTrainingRuntime"}), False, []),
    ("runtimeRef-name-empty", trainjob(runtimeRef={"name": ""}), False, []),
    ("runtimeRef-kind-int", trainjob(runtimeRef={"name": "x", "kind": 123}), False, []),
    ("name-uppercase", trainjob(name="MyJob"), False, []),
    ("name-leading-digit", trainjob(name="1job"), False, []),
    ("name-64-chars", trainjob(name="a" * 64), False, []),
    ("name-with-dot", trainjob(name="a.b"), False, []),
    ("name-trailing-dash", trainjob(name="job-"), False, []),
    ("17-runtimePatches", trainjob(runtimePatches=patches(17)), False, []),
    ("runtimePatch-no-manager", trainjob(runtimePatches=[{"time": None}, {}]), False, []),
    ("runtimePatch-empty-manager", trainjob(runtimePatches=[{"manager": ""}]), False, []),
    ("runtimePatch-duplicate", trainjob(runtimePatches=patches(2) + patches(1)), False, []),
    (
        "runtimePatch-bad-time",
        trainjob(runtimePatches=[{"manager": "m", "time": "now"}]),
        False,
        [],
    ),
    ("env-name-missing", with_trainer(env=[{"value": "1"}]), False, []),
    ("env-duplicate", with_trainer(env=[{"name": "A"}, {"name": "A", "value": "2"}]), False, []),
    (
        "env-secretKeyRef-no-key",
        with_trainer(env=[{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
        False,
        [],
    ),
    ("command-string", with_trainer(command="sleep infinity"), False, []),
    ("command-int-item", with_trainer(command=["sleep", 5]), False, []),
    ("args-129-items", with_trainer(args=["x"] * 129), False, []),
    ("image-too-long", with_trainer(image="i" * 501), False, []),
    (
        "quantity-bad-string",
        with_trainer(resourcesPerNode={"limits": {"cpu": "2 cores"}}),
        False,
        [],
    ),
    ("quantity-float", with_trainer(resourcesPerNode={"requests": {"cpu": 1.5}}), False, []),
    (
        "quantity-bool",
        with_trainer(resourcesPerNode={"limits": {"nvidia.com/gpu": True}}),
        False,
        [],
    ),
    ("limits-not-map", with_trainer(resourcesPerNode={"limits": ["cpu"]}), False, []),
    ("suspend-string", trainjob(suspend="yes"), False, []),
    ("managedBy-other", trainjob(managedBy="example.com/mine"), False, []),
    ("initializer-string", trainjob(initializer="hf://x"), False, []),
    ("storageUri-not-uri", trainjob(initializer={"model": {"storageUri": "m"}}), False, []),
    ("trainer-list", trainjob(trainer=[]), False, []),
    ("spec-string", edit(lambda b: b.update(spec="x")), False, []),
]


def _mine(body: dict) -> tuple[dict | None, list[str], list[dict]]:
    try:
        out, warnings = validate_trainjob(body)
    except SchemaError as err:
        return None, [], err.causes
    return out, warnings, []


def _only_defaults_added(mine: Any, oracle: Any, schema: dict, path: str = "") -> None:
    """``mine`` equals ``oracle`` except for keys the CRD schema defaults."""
    if isinstance(oracle, dict) and isinstance(mine, dict):
        for key in mine.keys() - oracle.keys():
            sub = schema.get("properties", {}).get(key, {})
            assert "default" in sub, f"{path}.{key} added without a CRD default"
            assert mine[key] == sub["default"], f"{path}.{key}: wrong default"
        for key in oracle:
            assert key in mine, f"{path}.{key} dropped"
            sub = schema.get("properties", {}).get(key) or schema.get("additionalProperties")
            _only_defaults_added(mine[key], oracle[key], sub if isinstance(sub, dict) else {})
    elif isinstance(oracle, list) and isinstance(mine, list):
        assert len(mine) == len(oracle)
        for m, o in zip(mine, oracle, strict=True):
            _only_defaults_added(m, o, schema.get("items", {}), f"{path}[]")
    else:
        assert mine == oracle, path


def test_table_is_big_enough() -> None:
    assert len(ROWS) >= 30
    assert {valid for _, _, valid, _ in ROWS} == {True, False}


@pytest.mark.parametrize(("body", "valid"), [(r[1], r[2]) for r in ROWS], ids=[r[0] for r in ROWS])
def test_row_agrees_with_crd(body: dict, valid: bool) -> None:
    pruned, _ = prune(load_crd_schema("trainjobs"), body)
    crd_valid = crd_validator("trainjobs").is_valid(pruned)
    assert crd_valid is valid, (
        f"row expectation disagrees with the real CRD: {error_paths('trainjobs', body)}"
    )


@pytest.mark.parametrize(("body", "valid"), [(r[1], r[2]) for r in ROWS], ids=[r[0] for r in ROWS])
def test_local_cluster_agrees_with_row(body: dict, valid: bool) -> None:
    """Needs no k8s data: the rows' verdicts are checked against the CRD above."""
    out, _, causes = _mine(body)
    assert (out is not None) is valid, causes


@pytest.mark.parametrize(
    "body", [r[1] for r in ROWS if not r[2]], ids=[r[0] for r in ROWS if not r[2]]
)
def test_field_paths_agree(body: dict) -> None:
    _, _, causes = _mine(body)
    # The oracle also adds the server's "<nil>: some validation rules were not checked" when a
    # type, enum or format error blocks the CEL rules.
    mine = {c["field"] for c in causes}
    # ObjectMeta checks are apiserver built-ins, not part of the CRD schema.
    mine = {f for f in mine if not f.startswith("metadata.")}
    assert mine == error_paths("trainjobs", body)


@pytest.mark.parametrize(
    ("body", "warnings"),
    [(r[1], r[3]) for r in ROWS if r[2]],
    ids=[r[0] for r in ROWS if r[2]],
)
def test_pruning_matches_structural_schema(body: dict, warnings: list[str]) -> None:
    schema = load_crd_schema("trainjobs")
    oracle, oracle_warnings = prune(schema, body)
    out, mine_warnings, _ = _mine(body)
    assert sorted(mine_warnings) == sorted(oracle_warnings) == sorted(warnings)
    _only_defaults_added(out, oracle, schema)
    assert out is not body


def test_input_not_mutated_and_defaults_applied() -> None:
    body = trainjob(labels={"x": "y"})
    before = copy.deepcopy(body)
    out, warnings = validate_trainjob(body)
    assert body == before
    assert warnings == ['unknown field "spec.labels"']
    assert "labels" not in out["spec"]
    assert out["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "kind": "ClusterTrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    assert out["spec"]["suspend"] is False
    assert out["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"


def _causes(body: dict) -> list[dict]:
    with pytest.raises(SchemaError) as info:
        validate_trainjob(body)
    return info.value.causes


def test_messages_worded_like_apiserver() -> None:
    [type_cause, blocked] = _causes(with_trainer(numNodes="string"))
    assert type_cause == {
        "reason": "FieldValueTypeInvalid",
        "field": "spec.trainer.numNodes",
        "message": 'Invalid value: "string": spec.trainer.numNodes in body must be of type '
        'integer: "string"',
    }
    assert blocked["field"] == "<nil>" and BLOCKED in blocked["message"]
    [minimum] = _causes(trainjob(activeDeadlineSeconds=0))
    assert minimum["message"] == (
        "Invalid value: 0: spec.activeDeadlineSeconds in body should be greater than or equal to 1"
    )
    [required] = _causes(trainjob(runtimeRef={}))
    assert required == {
        "reason": "FieldValueRequired",
        "field": "spec.runtimeRef.name",
        "message": "Required value",
    }
    [too_many] = _causes(trainjob(runtimePatches=patches(17)))
    assert too_many["reason"] == "FieldValueTooMany"
    assert too_many["message"] == "Too many: 17: must have at most 16 items"
    [cel] = _causes(trainjob(name="1job"))
    assert cel == {
        "reason": "FieldValueInvalid",
        "field": "<nil>",
        "message": 'Invalid value: "object": metadata.name must match RFC 1035 DNS label format',
    }
    [managed] = _causes(trainjob(managedBy="x"))
    assert managed["field"] == "spec.managedBy"
    assert managed["message"].startswith('Invalid value: "string": ManagedBy must be')


def test_status_message() -> None:
    with pytest.raises(SchemaError) as info:
        validate_trainjob(trainjob(activeDeadlineSeconds=0))
    assert info.value.status_message("t0123456789a") == (
        'TrainJob.trainer.kubeflow.org "t0123456789a" is invalid: spec.activeDeadlineSeconds: '
        "Invalid value: 0: spec.activeDeadlineSeconds in body should be greater than or equal to 1"
    )


# --- apiserver built-ins (TypeMeta / ObjectMeta), not in the CRD schema -----------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (edit(lambda b: b.update(kind="Job")), "kind"),
        (edit(lambda b: b.update(apiVersion="trainer.kubeflow.org/v1")), "apiVersion"),
        (edit(lambda b: b["metadata"].pop("name")), "metadata.name"),
        (edit(lambda b: b["metadata"].update(labels={"a": "bad value"})), "metadata.labels"),
        (edit(lambda b: b["metadata"].update(labels={"-bad": "v"})), "metadata.labels"),
        (edit(lambda b: b["metadata"].update(labels={"a": "v" * 64})), "metadata.labels"),
        (edit(lambda b: b["metadata"].update(labels={"a": 1})), "metadata.labels.a"),
        (edit(lambda b: b["metadata"].update(annotations="x")), "metadata.annotations"),
        (edit(lambda b: b["metadata"].update(annotations={"a/b/c": "x"})), "metadata.annotations"),
    ],
)
def test_builtin_meta_checks(body: dict, field: str) -> None:
    assert field in {c["field"] for c in _causes(body)}


def test_generate_name_and_good_labels_accepted() -> None:
    body = edit(lambda b: b["metadata"].update(name=None, generateName="job-"))
    body["metadata"].pop("name")
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq", "empty": ""}
    body["metadata"]["annotations"] = {"Example.com/Free-Text": "anything at all: {}"}
    out, _ = validate_trainjob(body)
    assert out["metadata"]["generateName"] == "job-"
    label_cause = _causes(edit(lambda b: b["metadata"].update(labels={"a": "bad value"})))[0]
    assert label_cause["message"].startswith(
        'Invalid value: "bad value": a valid label must be an empty string'
    )


# --- updates ----------------------------------------------------------------------------


def _patch(manager: str = "example.com/m", **pod_spec: Any) -> dict:
    """A runtimePatch for replicated job ``node`` setting ``pod_spec`` fields."""
    job = {"name": "node", "template": {"spec": {"template": {"spec": pod_spec}}}}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


def _pod_patch(body: dict) -> dict:
    return body["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"
    ][0]["template"]["spec"]["template"]["spec"]


STORED = trainjob(
    trainer={"numNodes": 2},
    activeDeadlineSeconds=10,
    initializer={"model": {"storageUri": "hf://a"}},
    runtimePatches=[
        _patch(
            containers=[{"name": "node", "env": [{"name": "A", "value": "1"}]}],
            initContainers=[{"name": "init"}],
            imagePullSecrets=[{"name": "pull"}],
            securityContext={"runAsUser": 1000},
            serviceAccountName="sa",
            terminationGracePeriodSeconds=30,
            volumes=[{"name": "v", "emptyDir": {}}],
            nodeSelector={"a": "b"},
        )
    ],
)
# (id, change, the field the real CRD rejects as immutable or None, marks)
UPDATES: list[tuple[str, Callable[[dict], None], str | None, tuple]] = [
    ("trainer", lambda b: b["spec"]["trainer"].update(numNodes=3), "spec.trainer", ()),
    ("runtimeRef", lambda b: b["spec"].update(runtimeRef={"name": "o"}), "spec.runtimeRef", ()),
    (
        "activeDeadlineSeconds",
        lambda b: b["spec"].update(activeDeadlineSeconds=99),
        "spec.activeDeadlineSeconds",
        (),
    ),
    (
        "managedBy",
        lambda b: b["spec"].update(managedBy="kueue.x-k8s.io/multikueue"),
        "spec.managedBy",
        (),
    ),
    (
        "initializer",
        lambda b: b["spec"].update(initializer={"model": {"storageUri": "hf://b"}}),
        "spec.initializer",
        (),
    ),
    *[
        (
            f"runtimePatch-{field}",
            change,
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
            f".template.spec.template.spec.{field}",
            (),
        )
        for field, change in [
            ("containers", lambda b: _pod_patch(b)["containers"][0]["env"][0].update(value="2")),
            ("initContainers", lambda b: _pod_patch(b).update(initContainers=[])),
            ("imagePullSecrets", lambda b: _pod_patch(b)["imagePullSecrets"].append({"name": "x"})),
            ("securityContext", lambda b: _pod_patch(b).update(securityContext={})),
            ("serviceAccountName", lambda b: _pod_patch(b).update(serviceAccountName="other")),
            (
                "terminationGracePeriodSeconds",
                lambda b: _pod_patch(b).update(terminationGracePeriodSeconds=5),
            ),
            (
                "volumes",
                lambda b: _pod_patch(b)["volumes"][0].update(emptyDir={"medium": "Memory"}),
            ),
        ]
    ],
    # mutable, or not a transition (a field absent on one side; a patch of another manager)
    ("suspend", lambda b: b["spec"].update(suspend=True), None, ()),
    ("labels", lambda b: b["metadata"].update(labels={"a": "b"}), None, ()),
    ("runtimePatch-nodeSelector", lambda b: _pod_patch(b).update(nodeSelector={}), None, ()),
    ("runtimePatch-added", lambda b: b["spec"]["runtimePatches"].append(_patch("x/y")), None, ()),
    (
        "runtimePatch-other-manager",
        lambda b: b["spec"].update(runtimePatches=[_patch("x/y", serviceAccountName="o")]),
        None,
        (),
    ),
    ("activeDeadlineSeconds-removed", lambda b: b["spec"].pop("activeDeadlineSeconds"), None, ()),
    ("unchanged", lambda b: None, None, ()),
]


def _stored() -> dict:
    out, _ = validate_trainjob(STORED)
    return out


@pytest.mark.parametrize(
    ("change", "immutable"), [(u[1], u[2]) for u in UPDATES], ids=[u[0] for u in UPDATES]
)
def test_update_rows_agree_with_crd(change: Callable[[dict], None], immutable: str | None) -> None:
    """The real CRD's transition rules (self == oldSelf) reject exactly the listed field."""
    old = _stored()
    new = copy.deepcopy(old)
    change(new)
    errors = [
        (field_path(e), e.message) for e in crd_validator("trainjobs").iter_errors(new, old=old)
    ]
    assert errors == ([(immutable, "field is immutable")] if immutable else [])


@pytest.mark.parametrize(
    ("change", "immutable"),
    [pytest.param(u[1], u[2], marks=u[3]) for u in UPDATES],
    ids=[u[0] for u in UPDATES],
)
def test_update_immutable_fields(change: Callable[[dict], None], immutable: str | None) -> None:
    old = _stored()
    new = copy.deepcopy(old)
    change(new)
    if immutable is None:
        validate_trainjob_update(old, new)
        return
    with pytest.raises(SchemaError) as info:
        validate_trainjob_update(old, new)
    [cause] = info.value.causes
    assert cause["message"].endswith(": field is immutable")
    assert cause["field"] == immutable


def test_update_mutable_fields_and_defaults() -> None:
    old, _ = validate_trainjob(trainjob(trainer={"numNodes": 2}))
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = True
    new["spec"]["runtimePatches"] = [{"manager": "kueue.x-k8s.io/manager"}]
    new["metadata"]["labels"] = {"a": "b"}
    out, _ = validate_trainjob_update(old, new)
    assert out["spec"]["suspend"] is True
    # A body that omits defaulted fields gets them defaulted again: not a change.
    bare = trainjob(trainer={"numNodes": 2})
    validate_trainjob_update(old, bare)
    # Adding a field that was absent is not a transition (self == oldSelf needs both).
    validate_trainjob_update(old, edit(lambda b: b["spec"].update(activeDeadlineSeconds=5), bare))
    with pytest.raises(SchemaError):
        validate_trainjob_update(old, edit(lambda b: b["spec"].update(suspend="no"), bare))


def test_integral_float_stored_as_int() -> None:
    out, _ = validate_trainjob(with_trainer(numNodes=2.0))
    assert out["spec"]["trainer"]["numNodes"] == 2
    assert isinstance(out["spec"]["trainer"]["numNodes"], int)
