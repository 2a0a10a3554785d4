"""Before creating: GET every object a session's options name (PVCs, ConfigMaps, Secrets, the
service account) in its namespace, so a missing one is one line at once instead of a pod that
waits. A 403 skips that check (the Events tell it later: ``readiness.py``); the keys of an
``--env-from`` Secret/ConfigMap are read here too (the TrainJob takes them one by one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client import ApiClient

from ..errors import InvalidInputError, NotFoundError, PermissionDeniedError, TrainJobError
from ..kube.requests import request
from ..validation import ENV_NAME
from .overrides import env_from_entries
from .shaping import PodShaping

KIND = {
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "configmaps": "ConfigMap",
    "secrets": "Secret",
    "serviceaccounts": "ServiceAccount",
}
OPTION = {
    "persistentvolumeclaims": "--volume pvc:{name}:...",
    "configmaps": "--volume configmap:{name}:... / --env-from configmap:{name}",
    "secrets": "--volume secret:{name}:... / --env-from secret:{name}",
    "serviceaccounts": "--service-account {name}",
}


def _get(api: ApiClient, namespace: str, resource: str, name: str) -> Mapping[str, Any]:
    return request(
        api,
        "GET",
        f"/api/v1/namespaces/{namespace}/{resource}/{name}",
        verb="get",
        resource=resource,
        namespace=namespace,
        name=name,
        timeout=15.0,
    )


def missing_line(resource: str, name: str, namespace: str) -> str:
    """``PersistentVolumeClaim "data" not found in namespace ns: create it or fix --volume ...``."""
    return (
        f'{KIND[resource]} "{name}" not found in namespace {namespace}: create it first or fix '
        f"{OPTION[resource].format(name=name)}"
    )


def precheck(api: ApiClient, namespace: str, shaping: PodShaping) -> dict[tuple[str, str], Any]:
    """Raise InvalidInputError for a named object that does not exist; return the objects read
    (``(resource, name)`` -> its data keys, None where not readable)."""
    found: dict[tuple[str, str], Any] = {}
    for resource, name in shaping.named_objects():
        try:
            obj = _get(api, namespace, resource, name)
        except NotFoundError:
            raise InvalidInputError(
                missing_line(resource, name, namespace), status=404, reason="NotFound"
            ) from None
        except (PermissionDeniedError, TrainJobError):
            found[(resource, name)] = None  # not readable: the Events will tell
            continue
        # Only the key names are kept: a Secret's values never leave this function.
        found[(resource, name)] = sorted(
            (obj.get("data") or {}) if isinstance(obj, Mapping) else {}
        )
    return found


def env_from_env(
    shaping: PodShaping, objects: Mapping[tuple[str, str], Any]
) -> list[dict[str, Any]]:
    """``spec.trainer.env`` entries of every ``--env-from`` (each key as a key reference)."""
    out: list[dict[str, Any]] = []
    for ref in shaping.env_from:
        resource = "secrets" if ref.kind == "secret" else "configmaps"
        keys = objects.get((resource, ref.name))
        if keys is None:
            raise InvalidInputError(
                f"--env-from {ref.kind}:{ref.name}: cannot read the {KIND[resource]} to list its "
                f"keys (ask for 'get' on {resource}, see docs/rbac.md), or mount it with "
                f"--volume {ref.kind}:{ref.name}:/path",
                reason="Forbidden",
            )
        # envFrom's rule: keys that are not valid variable names are skipped
        out += env_from_entries(ref.kind, ref.name, [k for k in keys if ENV_NAME.match(k)])
    return out


__all__ = ["env_from_env", "missing_line", "precheck"]
