"""Trainer versions of the local cluster, without a cluster: the Kueue/Trainer pair check, the
served TrainJob schema of each version against its real CRD, and the JobSet each version builds
(resourcesPerNode, podSpecOverrides / podTemplateOverrides / runtimePatches)."""

from __future__ import annotations

import pytest

from trainjob_magics.localcluster.controller.versions import (
    TRAINER_VERSIONS,
    check_trainer_version,
    check_version_pair,
    kueue_patch_field,
)

# --- the Kueue / Trainer pair ---------------------------------------------------------------


def test_versions() -> None:
    assert TRAINER_VERSIONS == ("2.0", "2.1", "2.2", "2.3")
    assert check_trainer_version("2.1") == "2.1"
    with pytest.raises(ValueError, match=r"one of 2\.0, 2\.1, 2\.2, 2\.3, not '2\.4'"):
        check_trainer_version("2.4")


@pytest.mark.parametrize(
    ("kueue", "field"),
    [
        ("0.14", "podSpecOverrides"),
        ("0.14.0", "podSpecOverrides"),
        ("0.15", "podTemplateOverrides"),
        ("0.16", "podTemplateOverrides"),
        ("0.17", "runtimePatches"),
        ("0.19.2", "runtimePatches"),
        ("main", "runtimePatches"),
    ],
)
def test_what_each_kueue_writes(kueue: str, field: str) -> None:
    """kubernetes-sigs/kueue pkg/controller/jobs/trainjob/trainjob_controller.go at each tag."""
    assert kueue_patch_field(kueue) == field


@pytest.mark.parametrize(
    ("kueue", "trainer"),
    [
        ("0.14", "2.0"),
        ("0.15", "2.1"),
        ("0.17", "2.2"),
        ("0.17", "2.3"),
        ("0.19", "2.3"),
        ("main", "2.2"),
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
        ("main", "2.0", "2.2 or 2.3"),
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
    """Kueue 0.14 was built against Trainer v2.0.1: on 2.1 its podSpecOverrides are pruned."""
    [warning] = check_version_pair("0.14", "2.1")
    assert "spec.podSpecOverrides" in warning and "spec.podTemplateOverrides" in warning
    assert check_version_pair("0.15", "2.0") != []


def test_bad_versions_rejected() -> None:
    with pytest.raises(ValueError, match="not a Kueue version"):
        check_version_pair("1.0", "2.3")
    with pytest.raises(ValueError, match="trainer_version"):
        check_version_pair("main", "2.4")
