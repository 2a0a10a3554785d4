"""The controller-manager parts behind the pods' volumes and identity.

- **ServiceAccounts** (kubernetes ``pkg/controller/serviceaccount/serviceaccounts_controller.go``):
  every namespace gets a ServiceAccount ``default``.
- **A local provisioner and the PV binder** (``pkg/controller/volume/persistentvolume/
  pv_controller.go`` with an external provisioner, as kind's ``local-path`` does, but with
  Immediate binding): a PersistentVolumeClaim without ``spec.volumeName`` gets a
  PersistentVolume ``pvc-<uid>`` whose data is the directory ``<root>/volumes/pvc-<uid>``;
  both become ``Bound``. Deleting the claim deletes the volume and its directory (reclaim
  policy ``Delete``). The directory outlives every pod that mounts it.
- **PVC protection** (``pkg/controller/volume/pvcprotection/pvc_protection_controller.go``,
  the ``StorageObjectInUseProtection`` admission plugin): a claim carries the finalizer
  ``kubernetes.io/pvc-protection``; deleted while a pod that has not finished uses it, it stays
  ``Terminating`` (and its data stays) until no such pod is left.
- **Admission and defaulting** of these kinds (``admit``): a Secret's ``stringData`` goes into
  ``data`` base64-encoded (``pkg/apis/core/v1/conversion.go``), ``type`` defaults to
  ``Opaque``; a claim gets ``volumeMode: Filesystem``, the default StorageClass
  (``plugin/pkg/admission/storage/storageclass/setdefault``) and ``status.phase: Pending``,
  and is checked as ``ValidatePersistentVolumeClaimSpec`` checks access modes and size.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import shutil
from pathlib import Path
from typing import Any

from ..core.apierror import ApiError, invalid
from ..core.resources import (
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    PVC_PROTECTION,
    SECRETS,
    SERVICE_ACCOUNTS,
    Kind,
)
from ..core.store import Event, Store

DEFAULT_SERVICE_ACCOUNT = "default"
STORAGE_CLASS = "standard"  # kind's and minikube's default class name
PROVISIONER = "trainjob-magics.local/hostpath"
_ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")


def volumes_root(root: Path) -> Path:
    """Where the provisioner keeps the volumes' data."""
    return Path(root) / "volumes"


def volume_dir(root: Path, pv_name: str) -> Path:
    return volumes_root(root) / pv_name


# -- admission -------------------------------------------------------------------------------


def admit(kind: Kind, op: str, obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
    """Defaulting and validation of Secrets and PersistentVolumeClaims (an admission hook)."""
    if kind.key == SECRETS.key:
        _admit_secret(obj)
    elif kind.key == PERSISTENT_VOLUME_CLAIMS.key:
        _admit_claim(obj, old)
    return []


def _admit_secret(obj: dict[str, Any]) -> None:
    data = obj.get("data") or {}
    for key, value in data.items():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            # the JSON decoder of []byte fields (encoding/json: base64.StdEncoding)
            raise ApiError(
                400,
                'Secret in version "v1" cannot be handled as a Secret: '
                f"illegal base64 data at input byte {_bad_byte(str(value))}",
                "BadRequest",
            ) from None
        if not key:
            raise invalid("Secret", "", _name(obj), [_cause("data[]", "Required value")])
    string_data = obj.pop("stringData", None) or {}
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    if data:
        obj["data"] = data
    obj.setdefault("type", "Opaque")


def _bad_byte(text: str) -> int:
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    return next((i for i, ch in enumerate(text) if ch not in alphabet), len(text))


def _admit_claim(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    spec = obj.setdefault("spec", {})
    if old is not None:
        # Bound claims are immutable but for resources and metadata (ValidatePersistentVolume
        # ClaimUpdate); keep what the binder wrote.
        old_spec = old.get("spec") or {}
        for key in ("volumeName", "storageClassName", "volumeMode", "accessModes"):
            if key in old_spec and spec.get(key) != old_spec[key]:
                if spec.get(key) is None:
                    spec[key] = old_spec[key]
                    continue
                raise invalid(
                    "PersistentVolumeClaim",
                    "",
                    _name(obj),
                    [
                        _cause(
                            "spec",
                            "Forbidden: spec is immutable after creation except "
                            "resources.requests and volumeAttributesClassName for bound claims",
                            "FieldValueForbidden",
                        )
                    ],
                )
        obj.setdefault("status", old.get("status") or {})
        return
    causes = []
    modes = spec.get("accessModes") or []
    if not modes:
        causes.append(
            _cause(
                "spec.accessModes",
                "Required value: at least 1 access mode is required",
                "FieldValueRequired",
            )
        )
    for mode in modes:
        if mode not in _ACCESS_MODES:
            supported = ", ".join(f'"{m}"' for m in _ACCESS_MODES)
            causes.append(
                _cause(
                    "spec.accessModes",
                    f'Unsupported value: "{mode}": supported values: {supported}',
                    "FieldValueNotSupported",
                )
            )
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage in (None, ""):
        causes.append(_cause("spec.resources[storage]", "Required value", "FieldValueRequired"))
    if causes:
        raise invalid("PersistentVolumeClaim", "", _name(obj), causes)
    spec.setdefault("volumeMode", "Filesystem")
    finalizers = obj.setdefault("metadata", {}).setdefault("finalizers", [])
    if PVC_PROTECTION not in finalizers:
        finalizers.append(PVC_PROTECTION)
    if "storageClassName" not in spec and not spec.get("volumeName"):
        spec["storageClassName"] = STORAGE_CLASS
    obj["status"] = {"phase": "Pending"}


def _cause(field: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    return {"field": field, "message": message, "reason": reason}


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


# -- controllers -----------------------------------------------------------------------------


class CoreObjects:
    """The ServiceAccount controller and the local provisioner (see the module doc)."""

    def __init__(self, store: Store, root: Path) -> None:
        self.store = store
        self.root = Path(root)

    def sync_all(self) -> None:
        """Bring every namespace and claim up to date (at start)."""
        for ns in self.store.list(NAMESPACES)[0]:
            self._ensure_default_sa(ns)
        for claim in self.store.list(PERSISTENT_VOLUME_CLAIMS)[0]:
            self._bind(claim)

    def handle(self, ev: Event) -> None:
        """React to one store event (on the controller's loop, in store order)."""
        if ev.kind_key == NAMESPACES.key and ev.type != "DELETED":
            self._ensure_default_sa(ev.obj)
        elif ev.kind_key == SERVICE_ACCOUNTS.key and ev.type == "DELETED":
            ns = self.store.try_get(NAMESPACES, None, ev.obj["metadata"].get("namespace", ""))
            if ns is not None and ev.obj["metadata"].get("name") == DEFAULT_SERVICE_ACCOUNT:
                self._ensure_default_sa(ns)  # the controller recreates a deleted default
        elif ev.kind_key == PERSISTENT_VOLUME_CLAIMS.key:
            if ev.type == "DELETED":
                self._release(ev.obj)
            elif ev.obj["metadata"].get("deletionTimestamp"):
                self._unprotect(ev.obj["metadata"].get("namespace", ""))
            else:
                self._bind(ev.obj)
        elif ev.kind_key == PODS.key:
            phase = (ev.obj.get("status") or {}).get("phase")
            if ev.type == "DELETED" or phase in ("Succeeded", "Failed"):
                self._unprotect(ev.obj["metadata"].get("namespace", ""))

    def _unprotect(self, namespace: str) -> None:
        """Remove the claims of ``namespace`` deleted meanwhile that no running pod uses."""
        claims = [
            c
            for c in self.store.list(PERSISTENT_VOLUME_CLAIMS, namespace)[0]
            if c["metadata"].get("deletionTimestamp")
        ]
        if not claims:
            return
        used: set[str] = set()
        for pod in self.store.list(PODS, namespace)[0]:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for volume in (pod.get("spec") or {}).get("volumes") or []:
                source = volume.get("persistentVolumeClaim") or {}
                if source.get("claimName"):
                    used.add(source["claimName"])
        for claim in claims:
            name = claim["metadata"]["name"]
            protected = PVC_PROTECTION in (claim["metadata"].get("finalizers") or [])
            if name in used and protected:
                continue
            with contextlib.suppress(ApiError):
                self.store.remove(PERSISTENT_VOLUME_CLAIMS, namespace, name)

    def _ensure_default_sa(self, ns: dict[str, Any]) -> None:
        meta = ns.get("metadata") or {}
        name = meta.get("name", "")
        if meta.get("deletionTimestamp") or (ns.get("status") or {}).get("phase") == "Terminating":
            return
        if self.store.try_get(SERVICE_ACCOUNTS, name, DEFAULT_SERVICE_ACCOUNT) is None:
            with contextlib.suppress(ApiError):
                self.store.create(
                    SERVICE_ACCOUNTS,
                    {"metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": name}},
                    name,
                )

    def _bind(self, claim: dict[str, Any]) -> None:
        meta = claim.get("metadata") or {}
        spec = claim.get("spec") or {}
        if meta.get("deletionTimestamp") or spec.get("volumeName"):
            return
        ns, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        pv_name = f"pvc-{uid}"
        path = volume_dir(self.root, pv_name)
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)  # local-path's mode: any pod user may write
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        modes = list(spec.get("accessModes") or ["ReadWriteOnce"])
        pv = {
            "metadata": {
                "name": pv_name,
                "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
                "finalizers": ["kubernetes.io/pv-protection"],
            },
            "spec": {
                "capacity": {"storage": size},
                "accessModes": modes,
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": spec.get("storageClassName", STORAGE_CLASS),
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "name": name,
                    "namespace": ns,
                    "uid": uid,
                },
            },
            "status": {"phase": "Bound"},
        }
        with contextlib.suppress(ApiError):
            self.store.create(PERSISTENT_VOLUMES, pv)

        def bound(o: dict[str, Any]) -> None:
            o["spec"]["volumeName"] = pv_name
            annotations = o["metadata"].setdefault("annotations", {})
            annotations.update(
                {
                    "pv.kubernetes.io/bind-completed": "yes",
                    "pv.kubernetes.io/bound-by-controller": "yes",
                    "volume.beta.kubernetes.io/storage-provisioner": PROVISIONER,
                    "volume.kubernetes.io/storage-provisioner": PROVISIONER,
                }
            )
            o["status"] = {
                "phase": "Bound",
                "accessModes": modes,
                "capacity": {"storage": size},
            }

        with contextlib.suppress(ApiError):
            self.store.mutate(PERSISTENT_VOLUME_CLAIMS, ns, name, bound)

    def _release(self, claim: dict[str, Any]) -> None:
        pv_name = (claim.get("spec") or {}).get("volumeName") or ""
        pv = self.store.try_get(PERSISTENT_VOLUMES, None, pv_name) if pv_name else None
        if pv is None:
            return
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if ref.get("uid") != claim["metadata"].get("uid"):
            return
        if (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy") == "Delete":
            with contextlib.suppress(ApiError):
                self.store.remove(PERSISTENT_VOLUMES, None, pv_name)
            path = volume_dir(self.root, pv_name)
            if path.is_relative_to(volumes_root(self.root)):
                shutil.rmtree(path, ignore_errors=True)
        else:

            def released(o: dict[str, Any]) -> None:
                o["status"] = {"phase": "Released"}

            with contextlib.suppress(ApiError):
                self.store.mutate(PERSISTENT_VOLUMES, None, pv_name, released)


__all__ = ["CoreObjects", "admit", "volume_dir", "volumes_root"]
