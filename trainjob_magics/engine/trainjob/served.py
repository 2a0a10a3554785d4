"""Which TrainJob fields the cluster's Trainer serves, from the TrainJob schema the API server
publishes (``/openapi/v3/apis/trainer.kubeflow.org/v1alpha1``, readable by any authenticated
user), read once per API server for ``SERVER_TTL`` seconds (as ``kueue/discovery.py`` does).

- Trainer 2.0 (``spec.podSpecOverrides``), 2.1 (``spec.podTemplateOverrides``), 2.2 and 2.3
  (``spec.runtimePatches``; 2.3's pod-spec patch has ``terminationGracePeriodSeconds``), from
  kubeflow/trainer ``pkg/apis/trainer/v1alpha1/trainjob_types.go`` at each tag.
- Not readable (an old server, a proxy that hides it): the CRD itself, when the user may read
  it, else the newest (``runtimePatches``, ``known=False``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient

from ..errors import TrainJobError
from ..kube.names import GROUP, VERSION
from ..kube.requests import request
from ..kube.server_cache import ServerCache

SPEC_OVERRIDES = "podSpecOverrides"  # Trainer 2.0
TEMPLATE_OVERRIDES = "podTemplateOverrides"  # Trainer 2.1
RUNTIME_PATCHES = "runtimePatches"  # Trainer 2.2, 2.3
SCHEMA_NAME = "org.kubeflow.trainer.v1alpha1.TrainJob"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainjobs.{GROUP}"
SERVER_TTL = 300.0


@dataclass(frozen=True)
class TrainerAPI:
    """The pod-shaping field the cluster's TrainJob has; ``release`` is 2.0, 2.1, 2.2, 2.3 or
    2.2+ (runtimePatches whose release the schema does not tell); ``known`` False: assumed."""

    field: str
    release: str
    known: bool = True

    @property
    def cel_immutable_patches(self) -> bool:
        """Trainer 2.3: runtimePatches pod-spec fields are CEL ``self == oldSelf`` (Kueue <= 0.19's
        full-object update on unsuspend then fails, trainer#3888)."""
        return self.release == "2.3"


ASSUMED = TrainerAPI(RUNTIME_PATCHES, "2.2+", known=False)

_CACHE: ServerCache[TrainerAPI] = ServerCache(SERVER_TTL)


def _dig(schema: Mapping[str, Any] | None, *keys: str) -> Mapping[str, Any]:
    node: Any = schema or {}
    for key in keys:
        if not isinstance(node, Mapping):
            return {}
        if key == "[]":
            node = node.get("items") or {}
        else:
            node = (node.get("properties") or {}).get(key) or {}
    return node if isinstance(node, Mapping) else {}


def from_spec_schema(spec: Mapping[str, Any]) -> TrainerAPI | None:
    """The API a TrainJob ``spec`` schema describes (None: none of the known fields)."""
    props = spec.get("properties") or {}
    if RUNTIME_PATCHES in props:
        pod_spec = _dig(
            props[RUNTIME_PATCHES],
            "[]",
            "trainingRuntimeSpec",
            "template",
            "spec",
            "replicatedJobs",
            "[]",
            "template",
            "spec",
            "template",
            "spec",
        )
        fields = pod_spec.get("properties") or {}
        if "terminationGracePeriodSeconds" in fields:
            return TrainerAPI(RUNTIME_PATCHES, "2.3")
        return TrainerAPI(RUNTIME_PATCHES, "2.2" if fields else "2.2+")
    if TEMPLATE_OVERRIDES in props:
        return TrainerAPI(TEMPLATE_OVERRIDES, "2.1")
    if SPEC_OVERRIDES in props:
        return TrainerAPI(SPEC_OVERRIDES, "2.0")
    return None


def _from_openapi(api: ApiClient) -> TrainerAPI | None:
    doc = request(
        api,
        "GET",
        f"/openapi/v3/apis/{GROUP}/{VERSION}",
        verb="get",
        resource="OpenAPI v3 schema",
        timeout=15.0,
    )
    schemas = ((doc or {}).get("components") or {}).get("schemas") or {}
    return from_spec_schema(_dig(schemas.get(SCHEMA_NAME), "spec"))


def _from_crd(api: ApiClient) -> TrainerAPI | None:
    crd = request(
        api,
        "GET",
        CRD_PATH,
        verb="get",
        resource="customresourcedefinitions.apiextensions.k8s.io",
        timeout=15.0,
    )
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") == VERSION:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            return from_spec_schema(_dig(schema, "spec"))
    return None


def trainer_api(api: ApiClient) -> TrainerAPI:
    """The TrainJob API of ``api``'s cluster (cached per server; ASSUMED when unreadable)."""
    found = _CACHE.get(api)
    if found is not None:
        return found
    for reader in (_from_openapi, _from_crd):
        try:
            found = reader(api)
        except TrainJobError:
            found = None
        if found is not None:
            break
    if found is None:
        return ASSUMED  # not cached: a later call may read it
    _CACHE.put(api, found)
    return found


def reset() -> None:
    """Forget every cached answer (tests that switch clusters on one URL)."""
    _CACHE.clear()


__all__ = [
    "ASSUMED",
    "RUNTIME_PATCHES",
    "SPEC_OVERRIDES",
    "TEMPLATE_OVERRIDES",
    "TrainerAPI",
    "from_spec_schema",
    "reset",
    "trainer_api",
]
