"""A local cluster at the real stack's versions, with the stack's fixtures applied through its
API (devtools/realstack/fixtures.py: the same objects, built by the same functions)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from devtools.realstack import fixtures
from devtools.realstack.context import NodeShape
from tests.differential.targets import Target, local_kueue_version
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.kueue import KueueConfig


def _times(quantity: str, n: int) -> str:
    return fixtures._times(quantity, n)


@contextmanager
def local_target(
    root: Path,
    trainer: str,
    kueue: str,
    nodes: NodeShape | None = None,
    runtimes: list[dict] | None = None,
) -> Iterator[tuple[Target, LocalCluster]]:
    """A started LocalCluster imitating Trainer ``trainer`` ("2.2") and Kueue ``kueue``
    ("0.19.2"), with the stack's namespaces, queues, quota and priority classes. Its one node
    holds what the stack's nodes hold together (the local cluster has one node). ``runtimes``
    (ClusterTrainingRuntimes as the stack serves them) replace the built-in ones of the same
    name, so that both clusters start from the same runtime."""
    nodes = nodes or NodeShape()
    version = local_kueue_version(kueue)
    config = KueueConfig(version=version, local_queue=None)
    cluster = LocalCluster(
        root_dir=root,
        kueue=config,
        trainer_version=trainer,
        bookmark_interval=0.5,
        cpus=_times(nodes.cpus, nodes.count),
        memory=_times(nodes.memory, nodes.count),
        gpus=nodes.gpus * nodes.count,
    )
    with cluster as c:
        target = Target(
            name="local",
            kubeconfig=str(c.kubeconfig_path),
            admin_kubeconfig=str(c.kubeconfig_path),
            trainer=trainer,
            kueue=version,
            node_cpus=str(nodes.cpus),
            node_count=nodes.count,
        )
        api = json.loads(target.kubectl("get", "--raw", "/apis/kueue.x-k8s.io").stdout)
        api_version = api["preferredVersion"]["groupVersion"]
        objs = fixtures.namespaces() + fixtures.kueue_objects(
            SimpleNamespace(nodes=nodes), api_version
        )
        for obj in objs:
            target.kubectl("create", "-f", "-", stdin=json.dumps(obj), check=True)
        for rt in runtimes or []:
            target.kubectl("delete", "clustertrainingruntime", rt["metadata"]["name"])
            target.kubectl("create", "-f", "-", stdin=json.dumps(rt), check=True)
        yield target, c
