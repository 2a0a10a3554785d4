"""Input validation: bad input raises InvalidInputError (a ValueError) before anything is sent."""

from __future__ import annotations

import pytest

from trainjob_magics.engine import validation as v
from trainjob_magics.engine.errors import InvalidInputError, TrainJobError


@pytest.mark.parametrize("name", ["a", "abc", "a-b-c", "a1", "x" * 63, "mpi-interactive"])
def test_valid_names(name: str) -> None:
    assert v.validate_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "A", "1abc", "-abc", "abc-", "a_b", "a.b", "x" * 64, "ab c", None, 3]
)
def test_invalid_names(name: object) -> None:
    with pytest.raises(InvalidInputError) as info:
        v.validate_name(name)
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)
    assert "\n" not in str(info.value)


def test_long_name_message_says_length() -> None:
    with pytest.raises(InvalidInputError, match=r"64 characters.*at most 63"):
        v.validate_name("a" * 64)


@pytest.mark.parametrize("nodes", [1, 4, 64])
def test_num_nodes_ok(nodes: int) -> None:
    assert v.validate_num_nodes(nodes) == nodes


@pytest.mark.parametrize("nodes", [0, -1, True, 2.0, "4"])
def test_num_nodes_bad(nodes: object) -> None:
    with pytest.raises(InvalidInputError, match="num_nodes"):
        v.validate_num_nodes(nodes)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2, "2"),
        ("500m", "500m"),
        ("16Gi", "16Gi"),
        ("1.5G", "1.5G"),
        (".5", ".5"),
        ("1e3", "1e3"),
        ("128974848", "128974848"),
        (0.5, "0.5"),
        ("+1Ki", "+1Ki"),
    ],
)
def test_quantities_ok(value: object, expected: str) -> None:
    assert v.validate_quantity(value, "memory") == expected


@pytest.mark.parametrize("value", ["", "abc", "16GB", "-1", "1.2.3", "Gi", "1 Gi", True, [1]])
def test_quantities_bad(value: object) -> None:
    with pytest.raises(InvalidInputError, match="memory"):
        v.validate_quantity(value, "memory")


def test_gpu() -> None:
    assert v.validate_gpu(8) == "8"
    assert v.validate_gpu("2") == "2"
    for bad in ("0.5", "1Gi", -1, True):
        with pytest.raises(InvalidInputError, match="gpu"):
            v.validate_gpu(bad)


def test_env() -> None:
    assert v.validate_env({"A_B": "1", "x.y-z": "2", "N": 3}) == {
        "A_B": "1",
        "x.y-z": "2",
        "N": "3",
    }
    for bad in ({"1A": "x"}, {"A B": "x"}, {"": "x"}, {"A": None}, ["A"]):
        with pytest.raises(InvalidInputError):
            v.validate_env(bad)


def test_labels() -> None:
    ok = {"team": "ml", "example.com/owner": "a-b_c.d", "empty": ""}
    assert v.validate_labels(ok) == ok
    for bad in ({"bad key": "x"}, {"k": "-x"}, {"k": "x" * 64}, {"Bad_Prefix/k": "v"}):
        with pytest.raises(InvalidInputError, match="label"):
            v.validate_labels(bad)


def test_command() -> None:
    assert v.validate_command("echo hi") == ["sh", "-c", "echo hi"]
    assert v.validate_command(["mpirun", "hostname"]) == ["mpirun", "hostname"]
    assert v.validate_command(None) is None
    for bad in ("", "   \n", [], [""], ["ls", 3], b"ls", "a\x00b", 5):
        with pytest.raises(InvalidInputError):
            v.validate_command(bad)


def test_runtime_and_namespace_names() -> None:
    assert v.validate_object_name("torch-distributed", "runtime name")
    with pytest.raises(InvalidInputError, match="runtime name"):
        v.validate_object_name("Torch_Distributed", "runtime name")
    assert v.validate_namespace("team-a") == "team-a"
    with pytest.raises(InvalidInputError, match="namespace"):
        v.validate_namespace("Team A")


def test_timeout() -> None:
    assert v.validate_timeout(None) is None
    assert v.validate_timeout(3) == 3.0
    for bad in (0, -1, float("nan"), "3", True):
        with pytest.raises(InvalidInputError):
            v.validate_timeout(bad)


def test_every_error_is_a_trainjob_error() -> None:
    assert issubclass(InvalidInputError, TrainJobError)
