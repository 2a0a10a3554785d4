"""The kinds the local cluster serves (GVK, plural, scope, verbs) and their Registry."""

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
    # DELETE answers the deleted object, not a Status (the storage's ReturnDeletedObject,
    # kubernetes pkg/registry/core/*/storage/storage.go)
    returns_deleted: bool = False

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
# Pods list every verb in discovery, as kube-apiserver's pods storage does (create, delete,
# deletecollection, get, list, patch, update, watch). What the local cluster accepts: updates
# and patches of metadata (labels, annotations, ...) as pkg/apis/core/validation
# ValidatePodUpdate allows; a create is refused with 403 (only the Job controller makes pods).
PODS = Kind(
    "",
    "v1",
    "Pod",
    "pods",
    verbs=tuple(ALL_VERBS),
    singular="pod",
    short_names=("po",),
    categories=("all",),
    subresources=("status", "log", "exec", "portforward", "eviction"),
    has_generation=False,
)
EVENTS = Kind(
    "",
    "v1",
    "Event",
    "events",
    verbs=tuple(ALL_VERBS),
    singular="event",
    short_names=("ev",),
    has_generation=False,
)
# events.k8s.io/v1 Events: a second view of the core/v1 Event objects (one storage, converted
# as pkg/apis/events/v1/conversion.go does); served by the API server, not stored twice.
EVENTS_V1 = Kind(
    "events.k8s.io",
    "v1",
    "Event",
    "events",
    verbs=tuple(ALL_VERBS),
    singular="event",
    short_names=("ev",),
    has_generation=False,
)
# Groups kube-apiserver serves itself, and the groups of aggregated API servers (Kueue's
# visibility API); every other group is a CustomResourceDefinition's (apiextensions-apiserver),
# which answers unknown paths, scopes and versions with the plain-text `404 page not found`.
NATIVE_GROUPS = frozenset({"", "events.k8s.io"})
AGGREGATED_GROUPS = frozenset({"visibility.kueue.x-k8s.io"})


def is_custom_resource(kind: Kind) -> bool:
    return kind.group not in NATIVE_GROUPS and kind.group not in AGGREGATED_GROUPS


# Trainer v2.3 keeps each TrainJob's runtime snapshot in one (pkg/runtime/core/snapshot.go).
CONFIGMAPS = Kind(
    "",
    "v1",
    "ConfigMap",
    "configmaps",
    verbs=tuple(ALL_VERBS),
    singular="configmap",
    short_names=("cm",),
    has_generation=False,
)
# Served for the pods' volumes, env and identity (docs/local-cluster.md, "Volumes, secrets and
# service accounts"): core/v1 as kube-apiserver registers them (pkg/registry/core/*/storage).
SECRETS = Kind(
    "",
    "v1",
    "Secret",
    "secrets",
    verbs=tuple(ALL_VERBS),
    singular="secret",
    has_generation=False,
)
SERVICE_ACCOUNTS = Kind(
    "",
    "v1",
    "ServiceAccount",
    "serviceaccounts",
    verbs=tuple(ALL_VERBS),
    singular="serviceaccount",
    short_names=("sa",),
    has_generation=False,
    returns_deleted=True,
)
PERSISTENT_VOLUME_CLAIMS = Kind(
    "",
    "v1",
    "PersistentVolumeClaim",
    "persistentvolumeclaims",
    verbs=tuple(ALL_VERBS),
    singular="persistentvolumeclaim",
    short_names=("pvc",),
    subresources=("status",),
    has_generation=False,
    returns_deleted=True,
)
# The finalizer the StorageObjectInUseProtection admission plugin puts on every claim.
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PERSISTENT_VOLUMES = Kind(
    "",
    "v1",
    "PersistentVolume",
    "persistentvolumes",
    namespaced=False,
    verbs=tuple(ALL_VERBS),
    singular="persistentvolume",
    short_names=("pv",),
    subresources=("status",),
    has_generation=False,
    returns_deleted=True,
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
    for k in (
        NAMESPACES,
        PODS,
        EVENTS,
        EVENTS_V1,
        CONFIGMAPS,
        SECRETS,
        SERVICE_ACCOUNTS,
        PERSISTENT_VOLUME_CLAIMS,
        PERSISTENT_VOLUMES,
        TRAINJOBS,
        CLUSTER_TRAINING_RUNTIMES,
        TRAINING_RUNTIMES,
        JOBSETS,
    ):
        reg.register(k)
    return reg
