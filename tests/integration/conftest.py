"""Fixtures of the integration tests: a real kernel, the IPython shell, the real kubectl."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.kernels import Kernel
from tests.helpers.shell import magics_shell
from trainjob_magics.localcluster import LocalCluster


@pytest.fixture
def kernel(cluster: LocalCluster) -> Iterator[Kernel]:
    """A real ipykernel (no extension loaded yet), shut down at teardown."""
    with Kernel() as k:
        yield k


@pytest.fixture
def shell(cluster: LocalCluster) -> Iterator[InteractiveShell]:
    """The IPython shell with the magics loaded against the session cluster, text output."""
    with magics_shell(cluster.kubeconfig_path, widgets="off") as sh:
        yield sh


@pytest.fixture
def kubectl(
    cluster: LocalCluster, tmp_path: Path
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real kubectl with the cluster's kubeconfig and an empty HOME / cache dir."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(cluster.kubeconfig_path)}

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--cache-dir", str(home / "cache"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
