"""What kube-apiserver's ServiceAccount admission plugin does to a pod the Job controller creates
(kubernetes ``plugin/pkg/admission/serviceaccount/admission.go``), and the Job controller's
Event when the creation is refused (``pkg/controller/controller_utils.go`` CreatePods:
``FailedCreate`` ``Error creating: <err>``).

- The pod's ServiceAccount must exist: otherwise the create is Forbidden,
  ``pods "<generateName>" is forbidden: error looking up service account NS/SA: serviceaccount
  "SA" not found`` (the name is the generateName: admission runs before the name is generated,
  ``k8s.io/apiserver/pkg/admission/errors.go`` extractResourceName).
- Unless ``automountServiceAccountToken`` is false (the pod's, else the ServiceAccount's), the
  pod gets the projected volume ``kube-api-access-<5 random>`` (token, ``kube-root-ca.crt``'s
  ``ca.crt``, the namespace) mounted read-only at ``/var/run/secrets/kubernetes.io/serviceaccount``
  in every container without a mount there (``mountServiceAccountToken``).
"""

from __future__ import annotations

from typing import Any

from ..core.resources import SERVICE_ACCOUNTS
from ..core.store import Store, random_suffix

TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME_PREFIX = "kube-api-access-"
TOKEN_EXPIRATION_SECONDS = 3607  # serviceaccount.WarnOnlyBoundTokenExpirationSeconds
JOB_CONTROLLER = "job-controller"


class PodForbidden(Exception):
    """The API server refused the pod (its Status message)."""


def token_volume_source() -> dict[str, Any]:
    """``TokenVolumeSource()``: the projected sources of ``kube-api-access-*``."""
    return {
        "defaultMode": 420,
        "sources": [
            {
                "serviceAccountToken": {
                    "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                    "path": "token",
                }
            },
            {
                "configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
    }


def admit_pod(store: Store, pod: dict[str, Any]) -> None:
    """Apply the ServiceAccount plugin to ``pod`` (in place); PodForbidden when refused."""
    meta = pod["metadata"]
    spec = pod.setdefault("spec", {})
    namespace = meta.get("namespace", "")
    sa_name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = sa_name
    sa = store.try_get(SERVICE_ACCOUNTS, namespace, sa_name)
    if sa is None:
        # the Job controller creates with generateName: the name is made after admission
        name = meta.get("generateName") or meta.get("name") or "Unknown"
        raise PodForbidden(
            f'pods "{name}" is forbidden: error looking up service account '
            f'{namespace}/{sa_name}: serviceaccount "{sa_name}" not found'
        )
    if should_automount(sa, pod):
        mount_token(pod)


def should_automount(sa: dict[str, Any], pod: dict[str, Any]) -> bool:
    """``shouldAutomount``: the pod's preference, then the ServiceAccount's, else true."""
    pod_pref = (pod.get("spec") or {}).get("automountServiceAccountToken")
    if pod_pref is not None:
        return bool(pod_pref)
    sa_pref = sa.get("automountServiceAccountToken")
    return True if sa_pref is None else bool(sa_pref)


def mount_token(pod: dict[str, Any]) -> None:
    """``mountServiceAccountToken``: the volume and a read-only mount in every container."""
    spec = pod["spec"]
    volumes = spec.get("volumes") or []
    existing = next(
        (v["name"] for v in volumes if str(v.get("name", "")).startswith(TOKEN_VOLUME_PREFIX)),
        None,
    )
    name = existing or TOKEN_VOLUME_PREFIX + random_suffix()
    needs = False
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            mounts = c.get("volumeMounts") or []
            if any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                continue
            c["volumeMounts"] = [
                *mounts,
                {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH},
            ]
            needs = True
    if existing is None and needs:
        spec["volumes"] = [*volumes, {"name": name, "projected": token_volume_source()}]


def is_token_volume(volume: dict[str, Any]) -> bool:
    """The volume the ServiceAccount plugin added (name and sources as it writes them)."""
    return str(volume.get("name", "")).startswith(TOKEN_VOLUME_PREFIX) and bool(
        volume.get("projected")
    )


def job_reference(namespace: str, job_name: str, job_uid: str) -> dict[str, Any]:
    """The Job an Event of the Job controller is about (no Job objects are served)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name, "namespace": namespace, "uid": job_uid},
    }


__all__ = [
    "JOB_CONTROLLER",
    "TOKEN_MOUNT_PATH",
    "PodForbidden",
    "admit_pod",
    "is_token_volume",
    "job_reference",
    "mount_token",
    "should_automount",
    "token_volume_source",
]
