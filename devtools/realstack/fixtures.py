"""What the tests need on top of the controllers: Kueue queues sized from the nodes, priority
classes, a namespace whose every TrainJob is queued, one that is not, the restricted user's
RBAC (read from docs/rbac.md and docs/kueue.md, so the docs and the stack cannot drift apart),
and a default StorageClass whose claims the pod runner's provisioner binds (provisioner.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from devtools.realstack import controllers, procs
from devtools.realstack.context import StackContext
from devtools.realstack.provisioner import PROVISIONER

QUEUED_NAMESPACE = "tjm-queued"  # LocalQueues `user-queue` and `default`: every TrainJob is queued
NAMESPACE = "tjm"  # no LocalQueue: sessions run unqueued
USER = "tjm-user"  # the restricted user's client certificate CN (made by the control plane)
FLAVOR = "default-flavor"
CLUSTER_QUEUE = "cluster-queue"
LOCAL_QUEUES = ("user-queue", "default")
PRIORITIES = {"low": 100, "high": 1000}
STORAGE_CLASS = "standard"  # the default class, as kind's and most clouds' are named

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _times(quantity: str | int, n: int) -> str:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(\D*)", str(quantity))
    if not m:
        raise ValueError(f"cannot scale quantity {quantity!r}")
    value = float(m[1]) * n
    return f"{int(value) if value.is_integer() else value}{m[2]}"


def kueue_objects(ctx: StackContext, api_version: str) -> list[dict]:
    nodes = ctx.nodes
    quota = [
        {"name": "cpu", "nominalQuota": _times(nodes.cpus, nodes.count)},
        {"name": "memory", "nominalQuota": _times(nodes.memory, nodes.count)},
        {"name": "nvidia.com/gpu", "nominalQuota": str(nodes.gpus * nodes.count)},
    ]
    objs: list[dict] = [
        {
            "apiVersion": api_version,
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
            "spec": {},
        },
        {
            "apiVersion": api_version,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [q["name"] for q in quota],
                        "flavors": [{"name": FLAVOR, "resources": quota}],
                    }
                ],
                # a higher-priority session preempts a lower one in the same queue
                "preemption": {"withinClusterQueue": "LowerPriority"},
            },
        },
    ]
    objs += [
        {
            "apiVersion": api_version,
            "kind": "LocalQueue",
            "metadata": {"name": lq, "namespace": QUEUED_NAMESPACE},
            "spec": {"clusterQueue": CLUSTER_QUEUE},
        }
        for lq in LOCAL_QUEUES
    ]
    objs += [
        {
            "apiVersion": api_version,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name},
            "value": value,
            "description": f"trainjob-magics realstack: {name}",
        }
        for name, value in PRIORITIES.items()
    ]
    return objs


def _yaml_blocks(doc: Path) -> list[dict]:
    text = doc.read_text()
    out: list[dict] = []
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        out += [d for d in yaml.safe_load_all(block) if isinstance(d, dict)]
    return out


def rbac_objects(
    namespaces: tuple[str, ...] = (NAMESPACE, QUEUED_NAMESPACE), user: str = USER
) -> list[dict]:
    """docs/rbac.md's Role/RoleBinding in each namespace and its ClusterRole(Binding), and
    docs/kueue.md's namespaced Role, all bound to ``user``."""
    base = _yaml_blocks(DOCS / "rbac.md")
    kueue = [d for d in _yaml_blocks(DOCS / "kueue.md") if d.get("kind") == "Role"]
    out: list[dict] = []
    for ns in namespaces:
        for d in base + kueue:
            if d["kind"] not in ("Role", "RoleBinding"):
                continue
            text = (
                json.dumps(d)
                .replace("NAMESPACE", ns)
                .replace("team-a", ns)
                .replace('"alice"', json.dumps(user))
            )
            out.append(json.loads(text))
        for role in kueue:
            name = role["metadata"]["name"]
            out.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": ns},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": name,
                    },
                    "subjects": [
                        {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}
                    ],
                }
            )
    for d in base:
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            text = json.dumps(d).replace("-alice", f"-{user}").replace('"alice"', json.dumps(user))
            out.append(json.loads(text))
    return out


def storage_objects() -> list[dict]:
    """The default StorageClass: a hostPath directory per claim, bound at once."""
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        }
    ]


def namespaces() -> list[dict]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"trainjob-magics.dev/realstack": "true"}},
        }
        for ns in (NAMESPACE, QUEUED_NAMESPACE)
    ]


def _local_queues_active(ctx: StackContext, api_version: str) -> bool:
    group_version = api_version
    out = controllers.kubectl(
        ctx,
        "get",
        f"localqueues.{group_version.split('/')[1]}.kueue.x-k8s.io",
        "-n",
        QUEUED_NAMESPACE,
        "-o",
        "json",
        check=False,
    )
    if out.returncode != 0:
        return False
    items = {i["metadata"]["name"]: i for i in json.loads(out.stdout)["items"]}
    return all(
        any(
            c["type"] == "Active" and c["status"] == "True"
            for c in items.get(lq, {}).get("status", {}).get("conditions", [])
        )
        for lq in LOCAL_QUEUES
    )


def apply(ctx: StackContext) -> None:
    """Namespaces, RBAC and (when Kueue runs) the queues; waits until the LocalQueues are Active."""
    controllers.apply(
        ctx, namespaces() + rbac_objects() + storage_objects(), "fixtures-namespaces-rbac"
    )
    if not ctx.versions.kueue:
        return
    api_version = controllers.kueue_api_version(ctx)
    controllers.apply(ctx, kueue_objects(ctx, api_version), "fixtures-kueue")
    procs.wait_for(
        "the LocalQueues active",
        lambda: _local_queues_active(ctx, api_version),
        timeout=60,
        run=ctx.run,
        name="kueue",
    )
