"""Where the real stack keeps its builds (by version) and the state of a running cluster."""

from __future__ import annotations

import os
from pathlib import Path

ENV_CACHE = "TRAINJOB_MAGICS_REALSTACK_CACHE"
ENV_RUN = "TRAINJOB_MAGICS_REALSTACK_DIR"


def cache_root() -> Path:
    """``$TRAINJOB_MAGICS_REALSTACK_CACHE`` or ``~/.cache/trainjob-magics/realstack``."""
    env = os.environ.get(ENV_CACHE)
    return Path(env) if env else Path.home() / ".cache" / "trainjob-magics" / "realstack"


def bin_dir(component: str, version: str) -> Path:
    """The binaries of one component at one version, e.g. ``bin/kueue-v0.19.2``."""
    return cache_root() / "bin" / f"{component}-{version}"


def src_dir(component: str, version: str) -> Path:
    """A generated wrapper module (Kubernetes only) for one version."""
    return cache_root() / "src" / f"{component}-{version}"


def run_dir() -> Path:
    """The running cluster's state: pki, kubeconfigs, logs, pids, etcd data, pod dirs."""
    env = os.environ.get(ENV_RUN)
    return Path(env) if env else cache_root() / "run" / "default"
