"""The real stack's hub for the tests of tests/realstack that use it."""

from __future__ import annotations

import os

import pytest

from devtools.realstack import paths, procs
from devtools.realstack.context import StackContext
from devtools.realstack.jupyterhub import Hub

REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"


def _missing(why: str) -> None:
    if REQUIRE:
        pytest.fail(f"real stack required (TRAINJOB_MAGICS_REQUIRE_REALSTACK=1): {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def hub() -> Hub:
    run = paths.run_dir()
    if not (run / "state.json").exists():
        _missing(f"no real stack at {run} (python -m devtools.realstack up --jupyterhub)")
    h = Hub(StackContext.load(run))
    if not h.enabled or procs.pid_of(run, "jupyterhub") is None:
        _missing(
            f"the real stack at {run} runs no hub (python -m devtools.realstack up --jupyterhub)"
        )
    return h


@pytest.fixture(scope="module")
def real_stack() -> StackContext:
    """The running real stack (``python -m devtools.realstack up``)."""
    run = paths.run_dir()
    if not (run / "state.json").exists():
        _missing(f"no real stack at {run} (python -m devtools.realstack up)")
    ctx = StackContext.load(run)
    if not ctx.admin_kubeconfig.exists():
        _missing(f"the real stack at {run} has no admin kubeconfig (control plane not up)")
    return ctx
