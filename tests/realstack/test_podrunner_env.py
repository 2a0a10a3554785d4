"""The pod runner's env, as the kubelet computes it (no stack needed)."""

from __future__ import annotations

import pytest

from devtools.realstack.podrunner import (
    NO_COMMAND,
    EnvError,
    container_argv,
    container_env,
    expand,
    quantity,
)

POD = {
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {"a": "1", "b": "2"},
        "annotations": {"x/y": "z"},
    },
    "spec": {
        "nodeName": "node-0",
        "serviceAccountName": "sa",
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "2"}},
            }
        ],
    },
}


class FakeLookups:
    def __init__(self, objs: dict) -> None:
        self.objs = objs

    def data(self, kind: str, name: str, optional: bool):
        if (kind, name) not in self.objs:
            if optional:
                return None
            raise EnvError(f"{kind} {name} not found")
        return self.objs[(kind, name)]


def env_of(container: dict, lookups=None) -> dict[str, str]:
    return container_env(
        POD,
        {"name": "c", **container},
        lookups or FakeLookups({}),
        base={"HOSTNAME": "p"},
        allocatable={"cpu": "32", "memory": "128Gi"},
    )


def test_field_refs() -> None:
    refs = {
        "N": "metadata.name",
        "NS": "metadata.namespace",
        "UID": "metadata.uid",
        "A": "metadata.labels['a']",
        "X": "metadata.annotations['x/y']",
        "L": "metadata.labels",
        "NODE": "spec.nodeName",
        "SA": "spec.serviceAccountName",
        "IP": "status.podIP",
        "HIP": "status.hostIP",
    }
    env = env_of(
        {"env": [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in refs.items()]}
    )
    assert env["N"] == "p" and env["NS"] == "ns" and env["UID"] == "u-1"
    assert env["A"] == "1" and env["X"] == "z" and env["L"] == 'a="1"\nb="2"'
    assert env["NODE"] == "node-0" and env["SA"] == "sa"
    assert env["IP"] == env["HIP"] == "127.0.0.1"


def test_resource_field_refs() -> None:
    def ref(resource: str, divisor: str | None = None) -> dict:
        r = {"resource": resource}
        if divisor is not None:
            r["divisor"] = divisor
        return {"valueFrom": {"resourceFieldRef": r}}

    env = env_of(
        {
            "env": [
                {"name": "LC", **ref("limits.cpu")},
                {"name": "RC", **ref("requests.cpu", "1m")},
                {"name": "RC0", **ref("requests.cpu", "0")},
                {"name": "LM", **ref("limits.memory", "1Mi")},
                {"name": "RM", **ref("requests.memory")},
            ],
            "resources": POD["spec"]["containers"][0]["resources"],
        }
    )
    # limits.memory unset: the node's allocatable, as the kubelet does
    assert env == {
        **env,
        "LC": "2",
        "RC": "250",
        "RC0": "1",
        "LM": str(128 * 1024),
        "RM": str(2**30),
    }


def test_config_maps_secrets_env_from_and_expansion() -> None:
    lookups = FakeLookups(
        {
            ("ConfigMap", "cm"): {"k": "v", "bad key": "x", "K2": "w"},
            ("Secret", "s"): {"pw": "secret"},
        }
    )
    env = env_of(
        {
            "envFrom": [
                {"configMapRef": {"name": "cm"}, "prefix": "CM_"},
                {"secretRef": {"name": "nope", "optional": True}},
            ],
            "env": [
                {"name": "A", "value": "a"},
                {"name": "B", "value": "$(A)-$(MISSING)-$$(A)"},
                {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
                {"name": "D", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
                {
                    "name": "E",
                    "valueFrom": {"secretKeyRef": {"name": "gone", "key": "x", "optional": True}},
                },
            ],
        },
        lookups,
    )
    assert env["CM_k"] == "v" and env["CM_K2"] == "w" and "CM_bad key" not in env
    assert env["B"] == "a-$(MISSING)-$(A)" and env["C"] == "v" and env["D"] == "secret"
    assert "E" not in env and env["HOSTNAME"] == "p"
    with pytest.raises(EnvError):
        env_of(
            {"env": [{"name": "F", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]}
        )


def test_argv() -> None:
    env = {"X": "1"}
    assert container_argv({"command": ["sh", "-c"], "args": ["echo $(X) $X"]}, env) == [
        "sh",
        "-c",
        "echo 1 $X",
    ]
    assert container_argv({"args": ["--flag"]}, env) == NO_COMMAND
    sshd = {"command": ["/usr/sbin/sshd"], "args": ["-De", "-f", "/home/mpiuser/.sshd_config"]}
    assert container_argv(sshd, env) == NO_COMMAND  # an MPI worker: kept alive, no ssh
    assert expand("$(X)$(X)", env) == "11"


def test_quantity() -> None:
    assert quantity("500m") == 0.5 and quantity("1Gi") == 2**30 and quantity("2k") == 2000
    assert quantity(3) == 3
