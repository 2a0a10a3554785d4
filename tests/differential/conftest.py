"""Fixtures of the differential suite: the real stack (found through
TRAINJOB_MAGICS_REALSTACK_DIR; skipped naming what is missing, failed under
TRAINJOB_MAGICS_REQUIRE_REALSTACK=1) and a local cluster at the stack's versions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.differential.local import local_target
from tests.differential.scenarios import RUNTIMES
from tests.differential.targets import REQUIRE, Target, real_stack, real_target


@pytest.fixture(scope="session")
def real() -> Target:
    ctx, why = real_stack()
    if ctx is None:
        if REQUIRE:
            pytest.fail(f"{why}; TRAINJOB_MAGICS_REQUIRE_REALSTACK=1 is set", pytrace=False)
        pytest.skip(why)
    target = real_target(ctx)
    target.extra["nodes"] = ctx.nodes
    return target


@pytest.fixture(scope="session")
def local(real: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """The local cluster, started at the real stack's Trainer and Kueue versions."""
    root = tmp_path_factory.mktemp("differential-local")
    runtimes = [clean(rt) for rt in real_runtimes(real)]
    with local_target(root, real.trainer, real.kueue, real.extra["nodes"], runtimes) as (
        target,
        _c,
    ):
        yield target


def real_runtimes(real: Target) -> list[dict]:
    """The stack's ClusterTrainingRuntimes that the scenarios use."""
    out = []
    for name in RUNTIMES:
        rt = real.get_json("clustertrainingruntimes.trainer.kubeflow.org", name)
        if rt is None:
            pytest.fail(f"the real stack has no ClusterTrainingRuntime {name}", pytrace=False)
        out.append(rt)
    return out


def clean(obj: dict) -> dict:
    """``obj`` without what the server set (to create it elsewhere)."""
    meta = obj["metadata"]
    keep = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
    keep.get("annotations", {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": keep,
        "spec": obj["spec"],
    }
