"""Pod target specs: trainer, all, roles, role-N, pod names, lists."""

from __future__ import annotations

from typing import Any

import pytest

from trainjob_magics.engine.errors import InvalidInputError
from trainjob_magics.engine.trainjob.targets import names_one_pod, pod_refs, resolve, split_spec


def pod(name: str, role: str, job_index: int, completion: int, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {
            "jobset.sigs.k8s.io/replicatedjob-name": role,
            "jobset.sigs.k8s.io/job-index": str(job_index),
            "batch.kubernetes.io/job-completion-index": str(completion),
        },
    }
    meta.update(extra)
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "sidecar"}, {"name": "node"}]},
        "status": {"phase": "Running"},
    }


MPI = [
    pod("j-node-0-2-ccc", "node", 0, 2),
    pod("j-node-0-10-ddd", "node", 0, 10),
    pod("j-launcher-0-0-aaa", "launcher", 0, 0),
    pod("j-node-0-0-bbb", "node", 0, 0),
    pod("j-node-0-1-gone", "node", 0, 1, deletionTimestamp="2026-01-01T00:00:00Z"),
]


def names(refs: list[Any]) -> list[str]:
    return [r.name for r in refs]


def test_refs_order_roles_indexes_and_containers() -> None:
    refs = pod_refs(MPI)
    assert [(r.label, r.name) for r in refs] == [
        ("launcher-0", "j-launcher-0-0-aaa"),
        ("node-0", "j-node-0-0-bbb"),
        ("node-1", "j-node-0-2-ccc"),  # terminating pod left out; numeric, not string, order
        ("node-2", "j-node-0-10-ddd"),
    ]
    assert {r.container for r in refs} == {"node"}


def test_resolve_forms() -> None:
    refs = pod_refs(MPI)
    trainer = "j-launcher-0-0-aaa"
    assert names(resolve(None, refs, trainer)) == [trainer]
    assert names(resolve("trainer", refs, trainer)) == [trainer]
    assert names(resolve("all", refs, trainer)) == names(refs)
    assert names(resolve("node", refs, trainer)) == names(refs)[1:]
    assert names(resolve("node-2", refs, trainer)) == ["j-node-0-10-ddd"]
    assert names(resolve("launcher", refs, trainer)) == [trainer]
    assert names(resolve("j-node-0-2-ccc", refs, trainer)) == ["j-node-0-2-ccc"]
    # lists and comma lists, duplicates dropped, order kept
    assert names(resolve("node-1, launcher-0,node-1", refs, trainer)) == [
        "j-node-0-2-ccc",
        trainer,
    ]
    assert names(resolve(["trainer", "node-0"], refs, trainer)) == [trainer, "j-node-0-0-bbb"]


def test_unknown_target_lists_the_choices() -> None:
    refs = pod_refs(MPI)
    with pytest.raises(InvalidInputError, match=r"node-7.*launcher-0, node \(node-0\.\.node-2\)"):
        resolve("node-7", refs, None)
    with pytest.raises(InvalidInputError, match="'worker'"):
        resolve("worker", refs, None)
    with pytest.raises(InvalidInputError, match="empty pod target"):
        split_spec(" , ")
    with pytest.raises(InvalidInputError, match="no trainer pod"):
        resolve("trainer", refs, None)


def test_names_one_pod() -> None:
    refs = pod_refs(MPI)
    assert names_one_pod(None, refs)
    assert names_one_pod("node-1", refs)
    assert names_one_pod("j-node-0-2-ccc", refs)
    assert not names_one_pod("all", refs)
    assert not names_one_pod("launcher", refs)  # a role: a group, even of one pod
    assert not names_one_pod("node-0,node-1", refs)
