"""Shared fixtures: a session-wide LocalCluster and kubernetes clients bound to it."""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import realstack_pending
from tests.helpers.mpi import IMPLEMENTATIONS, require_openmpi
from trainjob_magics.localcluster import LocalCluster


def pytest_configure(config: pytest.Config) -> None:
    """A shell that starts the suite in the background (``cmd &``) starts it with SIGINT
    ignored, and so would every kernel and pod process it spawns: Ctrl-C and the interrupt
    tests would then see nothing. Restore Python's handler, which children inherit as default."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


REALCLUSTER = Path(__file__).resolve().parent / "realcluster"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/realcluster runs against the cluster ``TRAINJOB_MAGICS_E2E_KUBECONFIG`` names. The
    whole suite runs it through test_realcluster_suite.py (the local cluster) and
    test_realstack_suite.py (the real stack), so it is collected directly only with that
    variable set or when named on the command line (then it skips saying what to set)."""
    path = collection_path.resolve()
    if path != REALCLUSTER and REALCLUSTER not in path.parents:
        return None
    if os.environ.get("TRAINJOB_MAGICS_E2E_KUBECONFIG"):
        return None
    for arg in config.args:
        named = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if named == REALCLUSTER or REALCLUSTER in named.parents:
            return None
    return True


TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """What needs the real stack runs last: scripts/test.sh starts the stack in the background,
    and everything else runs while it builds (tests/helpers/realstack_pending.py)."""
    items.sort(key=lambda item: realstack_pending.needs_stack(item.path, TESTS))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if realstack_pending.needs_stack(item.path, TESTS):
        realstack_pending.wait_for_background_up()


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A started LocalCluster (ancestor-step label only on the Job templates)."""
    root = tmp_path_factory.mktemp("local-cluster")
    with LocalCluster(root_dir=root, bookmark_interval=0.5) as c:
        yield c


@pytest.fixture(scope="session")
def local_cluster_ancestor_on_pods(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalCluster]:
    """A second cluster that also puts trainjob-ancestor-step on the pods."""
    root = tmp_path_factory.mktemp("local-cluster-ancestor")
    with LocalCluster(root_dir=root, ancestor_label_on_pods=True, bookmark_interval=0.5) as c:
        yield c


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    """A local cluster of the test's own, so its TrainJob list is the test's alone."""
    with LocalCluster() as c:
        yield c


@pytest.fixture
def cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The session cluster with no faults active before and after the test."""
    local_cluster.faults.clear()
    yield local_cluster
    local_cluster.faults.clear()


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """Random DNS-1035 names, so tests sharing the session cluster never collide."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}{secrets.token_hex(5)}"

    return make


@pytest.fixture(params=IMPLEMENTATIONS)
def mpi_impl(request: pytest.FixtureRequest) -> str:
    """The pods' mpirun: the real Open MPI (skipped where it is missing) and the imitation."""
    if request.param == "openmpi":
        require_openmpi()
    return request.param
