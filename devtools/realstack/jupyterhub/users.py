"""What each hub user gets before their server starts, as on a real hub with per-user
namespaces (Kubeflow's profiles work the same way): a namespace ``tjm-hub-USER``, a
ServiceAccount there bound to exactly the Role docs/rbac.md documents (and docs/kueue.md's), and
Kueue's LocalQueue. The hub's ``pre_spawn_hook`` applies these objects; the user's pod mounts the
ServiceAccount's projected token and has no kubeconfig file."""

from __future__ import annotations

import json

from devtools.realstack import fixtures

NAMESPACE_PREFIX = "tjm-hub-"
SERVICE_ACCOUNT = "trainjob-magics"
LOCAL_QUEUE = fixtures.LOCAL_QUEUES[0]
# placeholders the hook fills in (json-safe, never a valid name on their own)
NS_MARK = "@@NAMESPACE@@"


def namespace_template() -> str:
    """KubeSpawner's ``user_namespace_template``."""
    return NAMESPACE_PREFIX + "{username}"


def _to_service_account(obj: dict) -> dict:
    """A binding of docs/rbac.md (subject: a User) bound to the user's ServiceAccount instead."""
    if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
        obj = dict(obj)
        obj["subjects"] = [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NS_MARK}
        ]
        if obj["kind"] == "ClusterRoleBinding":
            meta = dict(obj["metadata"])
            meta["name"] = f"trainjob-magics-runtimes-reader-{NS_MARK}"
            obj["metadata"] = meta
    return obj


def user_objects(kueue_api_version: str | None) -> list[dict]:
    """The objects of one user, with ``NS_MARK`` where the namespace goes."""
    objs: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NS_MARK, "labels": {"trainjob-magics.dev/hub-user": "true"}},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": NS_MARK},
        },
    ]
    rbac = fixtures.rbac_objects(namespaces=(NS_MARK,), user="hub-user")
    objs += [_to_service_account(o) for o in rbac]
    if kueue_api_version:
        objs.append(
            {
                "apiVersion": kueue_api_version,
                "kind": "LocalQueue",
                "metadata": {"name": LOCAL_QUEUE, "namespace": NS_MARK},
                "spec": {"clusterQueue": fixtures.CLUSTER_QUEUE},
            }
        )
    return objs


def render(objs: list[dict], namespace: str) -> str:
    """``objs`` for one namespace, as a kubectl List."""
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
    return text.replace(NS_MARK, namespace)
