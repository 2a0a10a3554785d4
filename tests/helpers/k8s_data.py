"""Where the upstream CRDs and runtimes live, and what a test does when they are missing.

The data is a directory of releases, one folder each (``trainer-v2.3.0/crds/*.yaml``,
``trainer-v2.3.0/runtimes/*.yaml``, ``kueue-v0.19.2/crds/*.yaml``, ...), the releases of the
one table ``k8s_modules.RELEASES``. It is not part of the repository. In order:

1. ``$TRAINJOB_MAGICS_K8S_DATA``, when set;
2. with Go on PATH, the Go module cache: ``k8s_modules.build`` runs ``go mod download`` for each
   release (once; a no-op after) and links its files under
   ``~/.cache/trainjob-magics/k8s-data/<key>`` (``$XDG_CACHE_HOME``). Kueue main, which the
   proxy does not serve, is linked from ``../shared/k8s/kueue-main`` when that is there;
3. ``<repo>/../shared/k8s``;
4. nothing: a test that needs the data calls ``require_k8s_data()`` and skips with one line
   naming what is missing (no Go, or what the proxy said); with
   ``TRAINJOB_MAGICS_REQUIRE_K8S_DATA=1`` (set by ``.ci/run``) it fails instead, so CI can never
   pass by skipping them.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import k8s_modules

ENV_K8S_DATA = "TRAINJOB_MAGICS_K8S_DATA"
ENV_REQUIRE = "TRAINJOB_MAGICS_REQUIRE_K8S_DATA"
ENV_GO_TIMEOUT = "TRAINJOB_MAGICS_GO_TIMEOUT"  # seconds per `go mod download` (default 120)
UPSTREAM = (
    "kubeflow/trainer manifests/base/crds (and manifests/base/runtimes) at the release tags, "
    "kubernetes-sigs/kueue config/components/crd/bases or the release manifests.yaml"
)
NO_GO = (
    "Go not found: install Go to fetch the upstream CRDs from the module proxy, "
    f"or set {ENV_K8S_DATA}"
)


def shared_dir() -> Path:
    """``<repo>/../shared/k8s``."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "k8s"


def cache_dir() -> Path:
    """Where the release folders built from the Go module cache go (one subfolder a layout)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainjob-magics" / "k8s-data"


def _has_data(path: Path) -> bool:
    return any(path.glob("*/crds/*.yaml"))


@dataclass(frozen=True)
class Source:
    path: Path
    origin: str  # "module cache", "shared" or "missing"
    why: str = ""  # why the module cache was not used, or the releases it left out


def find_source() -> Source:
    """The default data dir (no ``$TRAINJOB_MAGICS_K8S_DATA``), building it if Go is there."""
    shared = shared_dir()
    have_shared = _has_data(shared)
    go = shutil.which("go")
    if not go:
        return Source(shared, "shared" if have_shared else "missing", NO_GO)
    timeout = float(os.environ.get(ENV_GO_TIMEOUT) or 120)
    try:
        root, _, notes = k8s_modules.build(
            cache_dir(), go, shared if have_shared else None, timeout
        )
    except (k8s_modules.ModuleError, OSError) as err:
        return Source(shared, "shared" if have_shared else "missing", str(err))
    return Source(root, "module cache", "; ".join(notes))


default_source = functools.cache(find_source)  # once per process


def k8s_data_dir() -> Path:
    """``$TRAINJOB_MAGICS_K8S_DATA``, or the module cache's folders, or ``../shared/k8s``."""
    env = os.environ.get(ENV_K8S_DATA)
    if env:
        return Path(env)
    return default_source().path


def have_k8s_data() -> bool:
    return _has_data(k8s_data_dir())


def missing_line(path: Path | None = None) -> str:
    """The one line a test skips (or fails) with when the data is missing."""
    default = None if os.environ.get(ENV_K8S_DATA) else default_source()
    path = path or k8s_data_dir()
    line = (
        f"upstream CRDs not found at {path} (set {ENV_K8S_DATA}; expected <release>/crds/*.yaml, "
        f"from {UPSTREAM})"
    )
    if default and default.origin == "missing" and path == default.path:
        line = f"{default.why}; {line}"  # no Go, or what the proxy said
    return line


def require_k8s_data() -> Path:
    """The data dir; skip the calling test when it is missing (fail under CI's switch)."""
    path = k8s_data_dir()
    if not _has_data(path):
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
