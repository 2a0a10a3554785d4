"""The kinds the local cluster serves, and the legacy discovery documents built from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

READ_VERBS = ["get", "list", "watch"]
ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Kind:
    """One served resource (GVK + plural + scope + verbs)."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    verbs: tuple[str, ...] = tuple(ALL_VERBS)
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # e.g. ("status",)
    has_generation: bool = True  # CRs track metadata.generation
    printer_columns: tuple[dict[str, Any], ...] = ()  # CRD additionalPrinterColumns

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Store key: `pods`, `trainjobs.trainer.kubeflow.org`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


@dataclass
class Registry:
    """Kinds by (group, version, plural); other modules may register more kinds."""

    kinds: dict[tuple[str, str, str], Kind] = field(default_factory=dict)

    def register(self, kind: Kind) -> Kind:
        self.kinds[(kind.group, kind.version, kind.plural)] = kind
        return kind

    def lookup(self, group: str, version: str, plural: str) -> Kind | None:
        return self.kinds.get((group, version, plural))

    def by_key(self, key: str) -> list[Kind]:
        return [k for k in self.kinds.values() if k.key == key]

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions (core group "" included)."""
        out: dict[str, list[str]] = {}
        for k in self.kinds.values():
            versions = out.setdefault(k.group, [])
            if k.version not in versions:
                versions.append(k.version)
        return out


# -- built-in kinds -------------------------------------------------------------------------

NAMESPACES = Kind(
    "",
    "v1",
    "Namespace",
    "namespaces",
    namespaced=False,
    verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    singular="namespace",
    short_names=("ns",),
    subresources=("status",),
    has_generation=False,
)
PODS = Kind(
    "",
    "v1",
    "Pod",
    "pods",
    verbs=("delete", "deletecollection", "get", "list", "watch"),
    singular="pod",
    short_names=("po",),
    categories=("all",),
    subresources=("status", "log", "exec"),
    has_generation=False,
)
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINJOBS = Kind(
    TRAINER_GROUP,
    "v1alpha1",
    "TrainJob",
    "trainjobs",
    singular="trainjob",
    subresources=("status",),
    printer_columns=(
        {"jsonPath": ".status.conditions[-1:].type", "name": "State", "type": "string"},
        {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
    ),
)
CLUSTER_TRAINING_RUNTIMES = Kind(
    TRAINER_GROUP,
    "v1alpha1",
    "ClusterTrainingRuntime",
    "clustertrainingruntimes",
    namespaced=False,
    singular="clustertrainingruntime",
)
TRAINING_RUNTIMES = Kind(
    TRAINER_GROUP,
    "v1alpha1",
    "TrainingRuntime",
    "trainingruntimes",
    singular="trainingruntime",
)
JOBSETS = Kind(
    "jobset.x-k8s.io",
    "v1alpha2",
    "JobSet",
    "jobsets",
    singular="jobset",
    subresources=("status",),
)


def default_registry() -> Registry:
    reg = Registry()
    for k in (NAMESPACES, PODS, TRAINJOBS, CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES, JOBSETS):
        reg.register(k)
    return reg


# -- discovery documents (legacy, what kubectl falls back to) ---------------------------------


def api_versions(server_address: str) -> dict[str, Any]:
    """GET /api."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_doc(group: str, versions: list[str]) -> dict[str, Any]:
    gv = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gv, "preferredVersion": gv[-1]}


def api_group(reg: Registry, group: str) -> dict[str, Any] | None:
    """GET /apis/GROUP."""
    versions = reg.groups().get(group)
    if not group or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, versions)}


def api_group_list(reg: Registry) -> dict[str, Any]:
    """GET /apis."""
    groups = [_group_doc(g, v) for g, v in sorted(reg.groups().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(reg: Registry, group: str, version: str) -> dict[str, Any] | None:
    """GET /api/v1 or /apis/GROUP/VERSION."""
    kinds = [k for k in reg.kinds.values() if k.group == group and k.version == version]
    if not kinds:
        return None
    resources: list[dict[str, Any]] = []
    for k in sorted(kinds, key=lambda k: k.plural):
        entry: dict[str, Any] = {
            "name": k.plural,
            "singularName": k.singular or k.kind.lower(),
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": list(k.verbs),
        }
        if k.short_names:
            entry["shortNames"] = list(k.short_names)
        if k.categories:
            entry["categories"] = list(k.categories)
        resources.append(entry)
        for sub in k.subresources:
            verbs = {
                "status": ["get", "patch", "update"],
                "log": ["get"],
                "exec": ["create", "get"],
            }
            sub_kind = {"log": "Pod", "exec": "PodExecOptions"}.get(sub, k.kind)
            resources.append(
                {
                    "name": f"{k.plural}/{sub}",
                    "singularName": "",
                    "namespaced": k.namespaced,
                    "kind": sub_kind,
                    "verbs": verbs.get(sub, ["get"]),
                }
            )
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }
