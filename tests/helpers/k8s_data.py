"""Where the upstream CRDs and runtimes live, and what a test does when they are missing.

The data is a directory of releases, one folder each (``trainer-v2.3.0/crds/*.yaml``,
``trainer-v2.3.0/runtimes/*.yaml``, ``kueue-main/crds/*.yaml``, ...): by default
``<repo>/../shared/k8s``, or ``$TRAINJOB_MAGICS_K8S_DATA``. It is not part of the repository.

A test that needs it calls ``require_k8s_data()``. Where the data is missing the test skips
with one line that names the path and says where the manifests come from; with
``TRAINJOB_MAGICS_REQUIRE_K8S_DATA=1`` (set by ``.ci/run``) it fails instead, so CI can never
pass by skipping them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ENV_K8S_DATA = "TRAINJOB_MAGICS_K8S_DATA"
ENV_REQUIRE = "TRAINJOB_MAGICS_REQUIRE_K8S_DATA"
UPSTREAM = (
    "kubeflow/trainer manifests/base/crds (and manifests/base/runtimes) at the release tags, "
    "kubernetes-sigs/kueue config/components/crd/bases or the release manifests.yaml"
)


def k8s_data_dir() -> Path:
    """``$TRAINJOB_MAGICS_K8S_DATA``, or ``<repo>/../shared/k8s``."""
    env = os.environ.get(ENV_K8S_DATA)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "k8s"


def have_k8s_data() -> bool:
    return any(k8s_data_dir().glob("*/crds/*.yaml"))


def missing_line(path: Path | None = None) -> str:
    """The one line a test skips (or fails) with when the data is missing."""
    path = path or k8s_data_dir()
    return (
        f"upstream CRDs not found at {path} (set {ENV_K8S_DATA}; expected <release>/crds/*.yaml, "
        f"from {UPSTREAM})"
    )


def require_k8s_data() -> Path:
    """The data dir; skip the calling test when it is missing (fail under CI's switch)."""
    path = k8s_data_dir()
    if not any(path.glob("*/crds/*.yaml")):
        if os.environ.get(ENV_REQUIRE, "") not in ("", "0"):
            pytest.fail(f"{missing_line(path)}; {ENV_REQUIRE} is set", pytrace=False)
        pytest.skip(missing_line(path))
    return path


def release_key(name: str) -> tuple[str, tuple[int, ...], str]:
    """Sort releases by project, then version; ``main`` after every tag."""
    project, _, version = name.partition("-")
    if version == "main":
        return project, (1 << 30,), version
    numbers = tuple(int(n) for n in re.findall(r"\d+", version))
    return project, numbers, version


def releases(project: str) -> list[str]:
    """Release folders of ``project`` ("trainer" or "kueue"), oldest first; [] without data."""
    found = [p.parent.name for p in k8s_data_dir().glob(f"{project}-*/crds")]
    return sorted(found, key=release_key)


def release_params(project: str) -> list[str]:
    """Release names to parametrize over; one placeholder when the data is missing, so that
    the test still runs (and skips or fails through ``require_k8s_data``)."""
    return releases(project) or [f"{project}-(no data)"]
