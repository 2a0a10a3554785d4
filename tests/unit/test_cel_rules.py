"""Every CEL rule of every upstream CRD runs in the oracle (tests/crd_schema.py), and known-bad
objects are rejected with the rule's own message, on every release that has the rule."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.crd_schema import (
    _index,
    cel_errors,
    check,
    crd_index,
    field_path,
    load_crd_schema,
    releases_with,
    rules_of,
    served_versions,
)
from tests.helpers.cel import CelCompileError, CelEvalError, compile_rule
from tests.helpers.k8s_data import have_k8s_data, k8s_data_dir, require_k8s_data


def _crd_versions() -> list[Any]:
    """(release, plural, version) of every served CRD version in the k8s data."""
    if not have_k8s_data():
        return [pytest.param(None, None, None, id="no-k8s-data")]
    out = []
    for release, crds in _index(k8s_data_dir()).items():
        for plural in crds:
            for version in served_versions(plural, release):
                out.append(
                    pytest.param(release, plural, version, id=f"{release}-{plural}-{version}")
                )
    return out


CRD_VERSIONS = _crd_versions()


# --- every rule compiles and evaluates ----------------------------------------------------


def _sample(schema: dict, depth: int = 0) -> Any:
    """A value of every property (to a depth), for rules to evaluate against."""
    if "default" in schema:
        return copy.deepcopy(schema["default"])
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("x-kubernetes-int-or-string"):
        return 1
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        out = {
            key: _sample(sub, depth + 1) for key, sub in (schema.get("properties") or {}).items()
        }
        if depth > 8:
            out = {k: v for k, v in out.items() if k in schema.get("required", [])}
        if isinstance(schema.get("additionalProperties"), dict):
            out["key"] = _sample(schema["additionalProperties"], depth + 1)
        return out
    if kind == "array":
        items = schema.get("items") or {}
        return [_sample(items, depth + 1)] if depth <= 8 else []
    if kind == "string":
        return "a" * max(int(schema.get("minLength", 1)), 1)
    if kind == "integer":
        return max(int(schema.get("minimum", 1)), 1)
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return False
    return {}


@pytest.mark.parametrize(("release", "plural", "version"), CRD_VERSIONS)
def test_every_rule_compiles_and_evaluates(release: str, plural: str, version: str) -> None:
    """No rule is left out: each one compiles, and evaluates to a bool against a value of
    its node (with itself as oldSelf), none skipped."""
    require_k8s_data()
    schema = load_crd_schema(plural, version, release)
    rules = list(rules_of(schema))
    failures = []
    for path, node, rule in rules:
        value = _sample(node)
        if path == "":
            value["metadata"] = {"name": "a"}
        try:
            result = compile_rule(rule).evaluate(value, copy.deepcopy(value))
        except Exception as err:
            failures.append(f"{path or '<root>'}: {rule['rule']}: {err}")
        else:
            assert isinstance(result, bool)
    assert failures == [], "\n".join(failures)


def test_rule_counts() -> None:
    """The rules the issue counted are all there and all run (none silently skipped)."""
    require_k8s_data()
    counts = {
        (release, plural, version): len(list(rules_of(load_crd_schema(plural, version, release))))
        for release, crds in crd_index().items()
        for plural in crds
        for version in served_versions(plural, release)
    }
    # kueue-main (from ../shared/k8s; the Go module proxy does not serve it), else v0.19.2.
    kueue = releases_with("workloads")[-1]
    assert counts[(kueue, "workloads", "v1beta2")] == 23
    assert counts[(kueue, "clusterqueues", "v1beta2")] == 4
    assert counts[("trainer-v2.3.0", "clustertrainingruntimes", "v1alpha1")] == 11
    old_self = [
        r["rule"]
        for _, _, r in rules_of(load_crd_schema("trainjobs", release="trainer-v2.3.0"))
        if r["rule"] == "self == oldSelf"
    ]
    assert len(old_self) == 13
    assert sum(counts.values()) >= (344 if kueue == "kueue-main" else 281)  # main has 63


def test_a_rule_outside_the_library_fails_loudly() -> None:
    """Kubernetes' own CEL libraries (quantity, url, ...) are not in cel-expr-python: such a
    rule raises instead of being skipped."""
    with pytest.raises(CelCompileError, match="quantity"):
        compile_rule({"rule": "quantity(self).isGreaterThan(quantity('1'))"})
    with pytest.raises(CelCompileError, match="fieldPath"):
        compile_rule({"rule": "true", "fieldPath": ".a"})
    assert compile_rule({"rule": "self.lowerAscii() == 'a' && self.?x.orValue(1) == 1"})


def test_messages_and_errors_like_the_apiserver() -> None:
    rule = compile_rule({"rule": "self > 1", "messageExpression": "'got ' + string(self)"})
    assert rule.evaluate(2) is True and rule.evaluate(0) is False
    assert rule.failure_message(0) == "got 0"
    assert compile_rule({"rule": "self > 1"}).failure_message(0) == "failed rule: self > 1"
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "x-kubernetes-validations": [{"rule": "self.b"}]}},
    }
    [error] = cel_errors(schema, {"a": {}})
    assert field_path(error) == "a"
    assert error.message.endswith("evaluating rule: self.b") and "b" in error.message
    # int-or-string: CEL's || absorbs the error of the branch that does not apply
    either = compile_rule({"rule": "self > 0 || self in ['auto', 'cpu', 'gpu']"})
    assert either.evaluate("auto") and either.evaluate(2) and not either.evaluate(0)
    with pytest.raises(CelEvalError, match="No matching overloads"):
        either.evaluate("tpu")  # an error || false is an error: the server rejects it too


# --- transition rules: every `self == oldSelf` of every CRD --------------------------------


def _immutable_nodes(schema: dict) -> Iterator[tuple[list[tuple[str, Any]], dict, dict]]:
    """(steps to the node, node, rule) for every ``self == oldSelf`` rule; a step is
    ("key", name) or ("item", the list's schema)."""

    def walk(node: dict, steps: list) -> Iterator:
        for rule in node.get("x-kubernetes-validations") or []:
            if rule["rule"].replace(" ", "") == "self==oldSelf":
                yield steps, node, rule
        for key, sub in (node.get("properties") or {}).items():
            yield from walk(sub, [*steps, ("key", key)])
        if isinstance(node.get("items"), dict):
            yield from walk(node["items"], [*steps, ("item", node)])

    yield from walk(schema, [])


def _changed(schema: dict, value: Any) -> Any:
    """A different value of the same type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        enum = [e for e in schema.get("enum") or [] if e != value]
        return enum[0] if enum else value + "x"
    if isinstance(value, list):
        items = schema.get("items") or {}
        extra = _sample(items)
        for key in schema.get("x-kubernetes-list-map-keys") or []:
            if isinstance(extra, dict):
                extra[key] = _changed(items["properties"][key], extra[key])
        return [*value, extra]
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        if props:
            key = next(iter(props))
            return {**value, key: _changed(props[key], value.get(key, _sample(props[key])))}
        return {**value, "changed": "x"}
    return value


def _place(steps: list, value: Any) -> Any:
    """An object that holds ``value`` at the end of ``steps`` (map-list items keep the same
    keys, so old and new items correlate)."""
    if not steps:
        return value
    (kind, what), rest = steps[0], steps[1:]
    if kind == "key":
        return {what: _place(rest, value)}
    item = _place(rest, value)
    if isinstance(item, dict):
        for key in what.get("x-kubernetes-list-map-keys") or []:
            item.setdefault(key, _sample(what["items"]["properties"][key]))
    return [item]


def _path(steps: list) -> str:
    out = ""
    for kind, what in steps:
        out += "[0]" if kind == "item" else (f".{what}" if out else what)
    return out or "<nil>"


@pytest.mark.parametrize(("release", "plural", "version"), CRD_VERSIONS)
def test_every_immutable_field_is_enforced_on_update(
    release: str, plural: str, version: str
) -> None:
    """For each ``self == oldSelf`` rule: changing the field is rejected with the rule's
    message; an unchanged update, and a create, pass it."""
    require_k8s_data()
    schema = load_crd_schema(plural, version, release)
    for steps, node, rule in _immutable_nodes(schema):
        value = _sample(node)
        old = _place(steps, value)
        new = _place(steps, _changed(node, copy.deepcopy(value)))
        assert old != new

        def hits(obj: Any, old_obj: Any, rule: dict = rule, steps: list = steps) -> list[str]:
            errors = (
                cel_errors(schema, obj) if old_obj is None else cel_errors(schema, obj, old_obj)
            )
            return [
                e.message
                for e in errors
                if e.validator_value is rule and field_path(e) == _path(steps)
            ]

        if _is_map_key(steps):
            # A list-map key (runtimePatches[].manager): a changed key is another item, which
            # never correlates with the old one, so the rule cannot fire (as on a real server).
            assert hits(new, old) == [], _path(steps)
        else:
            assert hits(new, old) == [rule["message"]], _path(steps)
        assert hits(copy.deepcopy(old), old) == [], _path(steps)
        assert hits(new, None) == [], _path(steps)  # a create: transition rules do not run


def _is_map_key(steps: list) -> bool:
    return (
        len(steps) >= 2
        and steps[-1][0] == "key"
        and steps[-2][0] == "item"
        and steps[-1][1] in (steps[-2][1].get("x-kubernetes-list-map-keys") or [])
    )


# --- known-bad objects, one or more per kind ------------------------------------------------


def workload(**spec: Any) -> dict:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "trainjob-a-12345", "namespace": "default"},
        "spec": {
            "queueName": "user-queue",
            "podSets": [
                {
                    "name": "node",
                    "count": 2,
                    "template": {"spec": {"containers": [{"name": "node", "image": "i"}]}},
                }
            ],
        },
    }
    body["spec"].update(spec)
    return body


def _condition(kind: str) -> dict:
    return {
        "type": kind,
        "status": "True",
        "reason": kind,
        "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def reserved(body: dict, assignments: int = 1) -> dict:
    """``body`` with quota reserved in cluster-queue."""
    body = copy.deepcopy(body)
    body["status"] = {
        "conditions": [_condition("QuotaReserved")],
        "admission": {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [
                {"name": "node", "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "2"}, "count": 2}
            ][:assignments],
        },
    }
    return body


def cluster_queue(**spec: Any) -> dict:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cluster-queue"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "4"}]}],
                }
            ],
        },
    }
    body["spec"].update(spec)
    return body


def local_queue(cluster_queue: str = "cluster-queue") -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "user-queue", "namespace": "default"},
        "spec": {"clusterQueue": cluster_queue},
    }


def resource_flavor(**spec: Any) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
        "spec": spec,
    }


def trainjob(name: str = "a", **spec: Any) -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
    }


def runtime(
    kind: str = "ClusterTrainingRuntime", policy: dict | None = None, **jobset: Any
) -> dict:
    job = {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": "i"}]}}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": {
            "name": "rt",
            **({"namespace": "default"} if kind == "TrainingRuntime" else {}),
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, **(policy or {"torch": {}})},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": "node", "template": job},
                        {"name": "launcher", "template": job},
                    ],
                    **jobset,
                }
            },
        },
    }


def _with(body: dict, fn: Callable[[dict], Any]) -> dict:
    body = copy.deepcopy(body)
    fn(body)
    return body


# (id, plural, good object, bad object, old object for an update or None, path, message)
BAD: list[tuple[str, str, dict, dict, dict | None, str, str]] = [
    (
        "workload-minCount",
        "workloads",
        workload(),
        _with(workload(), lambda b: b["spec"]["podSets"][0].update(minCount=3)),
        None,
        "spec.podSets[0]",
        "minCount should be positive and less or equal to count",
    ),
    (
        "workload-priorityClassRef-kind",
        "workloads",
        workload(
            priority=1,
            priorityClassRef={
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": "p",
            },
        ),
        workload(
            priority=1,
            priorityClassRef={"group": "kueue.x-k8s.io", "kind": "PriorityClass", "name": "p"},
        ),
        None,
        "spec.priorityClassRef",
        "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
    ),
    (
        "workload-podSetAssignments",
        "workloads",
        reserved(workload()),
        reserved(workload(), assignments=0),
        None,
        "<nil>",
        "podSetAssignments must have the same number of podSets as the spec",
    ),
    (
        "workload-queueName-while-reserved",
        "workloads",
        reserved(workload()),
        reserved(workload(queueName="other")),
        reserved(workload()),
        "<nil>",
        "queueName is immutable while workload quota reserved",
    ),
    (
        "clusterqueue-borrowingLimit-without-cohort",
        "clusterqueues",
        cluster_queue(),
        _with(
            cluster_queue(),
            lambda b: b["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(
                borrowingLimit="1"
            ),
        ),
        None,
        "spec",
        "borrowingLimit must be nil when cohort is empty",
    ),
    (
        "clusterqueue-flavor-resources",
        "clusterqueues",
        cluster_queue(),
        _with(
            cluster_queue(),
            lambda b: b["spec"]["resourceGroups"][0].update(coveredResources=["cpu", "memory"]),
        ),
        None,
        "spec.resourceGroups[0]",
        "flavors must have the same number of resources as the coveredResources",
    ),
    (
        "localqueue-clusterQueue-immutable",
        "localqueues",
        local_queue(),
        local_queue("other"),
        local_queue(),
        "spec.clusterQueue",
        "field is immutable",
    ),
    (
        "resourceflavor-toleration-value",
        "resourceflavors",
        resource_flavor(tolerations=[{"key": "k", "operator": "Exists"}]),
        resource_flavor(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
        None,
        "spec.tolerations",
        "a value must be empty when 'operator' is 'Exists'",
    ),
    (
        "trainjob-name",
        "trainjobs",
        trainjob(),
        trainjob("1job"),
        None,
        "<nil>",
        "metadata.name must match RFC 1035 DNS label format",
    ),
    (
        "trainjob-trainer-immutable",
        "trainjobs",
        trainjob(trainer={"numNodes": 2}),
        trainjob(trainer={"numNodes": 3}),
        trainjob(trainer={"numNodes": 2}),
        "spec.trainer",
        "field is immutable",
    ),
    (
        "clustertrainingruntime-two-policies",
        "clustertrainingruntimes",
        runtime(),
        runtime(policy={"torch": {}, "mpi": {}}),
        None,
        "spec.mlPolicy",
        "Only one of the policy can be configured",
    ),
    (
        "trainingruntime-dependsOn-immutable",
        "trainingruntimes",
        runtime("TrainingRuntime"),
        _with(
            runtime("TrainingRuntime"),
            lambda b: b["spec"]["template"]["spec"]["replicatedJobs"][1].update(
                dependsOn=[{"name": "node", "status": "Ready"}]
            ),
        ),
        _with(
            runtime("TrainingRuntime"),
            lambda b: b["spec"]["template"]["spec"]["replicatedJobs"][1].update(
                dependsOn=[{"name": "node", "status": "Complete"}]
            ),
        ),
        "spec.template.spec.replicatedJobs[1].dependsOn",
        "Value is immutable",
    ),
]


def _has_rule(plural: str, version: str, release: str, message: str) -> bool:
    schema = load_crd_schema(plural, version, release)
    return any(rule.get("message") == message for _, _, rule in rules_of(schema))


@pytest.mark.parametrize(
    ("plural", "good", "bad", "old", "path", "message"),
    [b[1:] for b in BAD],
    ids=[b[0] for b in BAD],
)
def test_known_bad_objects_are_rejected_with_the_rules_message(
    plural: str, good: dict, bad: dict, old: dict | None, path: str, message: str
) -> None:
    """On every release whose CRD has the rule: the good object (or update) passes, the bad
    one fails with exactly that rule's message at that path."""
    require_k8s_data()
    checked = []
    for release in releases_with(plural):
        version, _, _ = check(plural, good, old, release)
        if not _has_rule(plural, version, release, message):
            continue
        assert check(plural, good, old, release)[1:] == ([], []), release
        assert check(plural, bad, old, release)[1:] == ([], [(path, message)]), release
        if old is not None:  # a transition rule: not run on a create
            assert (path, message) not in check(plural, bad, None, release)[2]
        checked.append(release)
    assert checked, f"no release has the rule {message!r}"
