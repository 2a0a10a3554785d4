"""Which ``mpirun`` the local cluster's pods run, and how a test picks one.

The pods' ``mpirun`` shim runs the real Open MPI when it is installed (Debian's ``openmpi-bin``,
which ``scripts/setup.sh --browser`` installs), else the imitation; ``TRAINJOB_LOCAL_MPIRUN``
(``auto``, ``openmpi``, ``imitation``) chooses, per command or for a whole cluster. Tests that
must pass with both take the ``mpi_impl`` fixture (tests/conftest.py) and build their command
with :func:`mpirun_argv` or :func:`mpirun_sh`. A test of Open MPI's own behaviour calls
:func:`require_openmpi`: it skips where Open MPI is missing, and fails instead under
``TRAINJOB_MAGICS_REQUIRE_OPENMPI=1`` (set by ``.ci/run``), so CI never passes by skipping.
"""

from __future__ import annotations

import os
import shlex

import pytest

from trainjob_magics.localcluster.kubelet.mpirun import MODE_ENV, find_openmpi

ENV_REQUIRE = "TRAINJOB_MAGICS_REQUIRE_OPENMPI"
IMPLEMENTATIONS = ("openmpi", "imitation")


def real_mpirun() -> str | None:
    """Open MPI's mpirun on this machine's PATH (what the pods would find), or None."""
    return find_openmpi(os.environ.get("PATH", os.defpath))


def require_openmpi() -> str:
    path = real_mpirun()
    if path is None:
        line = "Open MPI (orterun) is not installed: apt-get install openmpi-bin"
        if os.environ.get(ENV_REQUIRE, "") not in ("", "0"):
            pytest.fail(f"{line}; {ENV_REQUIRE} is set", pytrace=False)
        pytest.skip(line)
    return path


def mpirun_argv(impl: str, *args: str) -> list[str]:
    """argv that runs the pod's ``mpirun`` shim with ``impl`` chosen."""
    return ["env", f"{MODE_ENV}={impl}", "mpirun", *args]


def mpirun_sh(impl: str, args: str) -> str:
    """The same as a shell command line (``args`` is shell text)."""
    return f"{MODE_ENV}={shlex.quote(impl)} mpirun {args}"


def mpirun_env(impl: str, env: dict[str, str]) -> dict[str, str]:
    return {**env, MODE_ENV: impl}
