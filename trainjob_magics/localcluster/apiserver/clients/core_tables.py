"""Table columns and cells of the core/v1 kinds behind pods' volumes and identity, as
kube-apiserver's printers make them (kubernetes ``pkg/printers/internalversion/printers.go``
at v1.36.3: printConfigMap, printSecret, printServiceAccount, printPersistentVolumeClaim,
printPersistentVolume). ``kubectl get pvc`` shows what a real cluster shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Columns = list[dict[str, Any]]
Cells = Callable[[dict[str, Any], Callable[[str | None], str]], list[Any]]

_MODES = (
    ("ReadWriteOnce", "RWO"),
    ("ReadOnlyMany", "ROX"),
    ("ReadWriteMany", "RWX"),
    ("ReadWriteOncePod", "RWOP"),
)


def _col(name: str, desc: str, priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "type": "string",
        "format": fmt,
        "description": desc,
        "priority": priority,
    }


_NAME = _col("Name", "Name must be unique within a namespace.", fmt="name")
_AGE = _col(
    "Age",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)


def access_modes(modes: list[str] | None) -> str:
    """``helper.GetAccessModesAsString``: RWO,ROX,RWX,RWOP in that order, once each."""
    have = set(modes or [])
    return ",".join(short for mode, short in _MODES if mode in have)


def _meta(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("metadata") or {}


def _claim(o: dict[str, Any], age: Callable[[str | None], str]) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    phase = "Terminating" if _meta(o).get("deletionTimestamp") else status.get("phase", "")
    bound = bool(spec.get("volumeName"))
    return [
        _meta(o).get("name", ""),
        phase,
        spec.get("volumeName", ""),
        str((status.get("capacity") or {}).get("storage", "")) if bound else "",
        access_modes(status.get("accessModes")) if bound else "",
        spec.get("storageClassName") or "",
        spec.get("volumeAttributesClassName") or "<unset>",
        age(_meta(o).get("creationTimestamp")),
        spec.get("volumeMode") or "<unset>",
    ]


def _volume(o: dict[str, Any], age: Callable[[str | None], str]) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    ref = spec.get("claimRef") or {}
    phase = "Terminating" if _meta(o).get("deletionTimestamp") else status.get("phase", "")
    return [
        _meta(o).get("name", ""),
        str((spec.get("capacity") or {}).get("storage", "")),
        access_modes(spec.get("accessModes")),
        spec.get("persistentVolumeReclaimPolicy", ""),
        phase,
        f"{ref.get('namespace', '')}/{ref.get('name', '')}" if ref else "",
        spec.get("storageClassName") or "",
        spec.get("volumeAttributesClassName") or "<unset>",
        status.get("reason", ""),
        age(_meta(o).get("creationTimestamp")),
        spec.get("volumeMode") or "<unset>",
    ]


def _configmap(o: dict[str, Any], age: Callable[[str | None], str]) -> list[Any]:
    count = len(o.get("data") or {}) + len(o.get("binaryData") or {})
    return [_meta(o).get("name", ""), count, age(_meta(o).get("creationTimestamp"))]


def _secret(o: dict[str, Any], age: Callable[[str | None], str]) -> list[Any]:
    return [
        _meta(o).get("name", ""),
        o.get("type", ""),
        len(o.get("data") or {}),
        age(_meta(o).get("creationTimestamp")),
    ]


def _service_account(o: dict[str, Any], age: Callable[[str | None], str]) -> list[Any]:
    return [_meta(o).get("name", ""), age(_meta(o).get("creationTimestamp"))]


PRINTERS: dict[str, tuple[Columns, Cells]] = {
    "persistentvolumeclaims": (
        [
            _NAME,
            _col("Status", "phase represents the current phase of PersistentVolumeClaim."),
            _col(
                "Volume",
                "volumeName is the binding reference to the PersistentVolume backing this claim.",
            ),
            _col("Capacity", "capacity represents the actual resources of the underlying volume."),
            _col(
                "Access Modes",
                "accessModes contains the actual access modes the volume backing the PVC has.",
            ),
            _col("StorageClass", "StorageClass of the pvc"),
            _col("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
            _AGE,
            _col(
                "VolumeMode", "volumeMode defines what type of volume is required by the claim.", 1
            ),
        ],
        _claim,
    ),
    "persistentvolumes": (
        [
            _NAME,
            _col(
                "Capacity",
                "capacity is the description of the persistent volume's resources and capacity.",
            ),
            _col("Access Modes", "accessModes contains all ways the volume can be mounted."),
            _col(
                "Reclaim Policy",
                "persistentVolumeReclaimPolicy defines what happens to a persistent volume when "
                "released from its claim.",
            ),
            _col(
                "Status",
                "phase indicates if a volume is available, bound to a claim, or released by a "
                "claim.",
            ),
            _col(
                "Claim",
                "claimRef is part of a bi-directional binding between PersistentVolume and "
                "PersistentVolumeClaim.",
            ),
            _col("StorageClass", "StorageClass of the pv"),
            _col("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
            _col("Reason", "reason is a brief CamelCase string that describes any failure."),
            _AGE,
            _col(
                "VolumeMode",
                "volumeMode defines if a volume is intended to be used with a formatted "
                "filesystem or to remain in raw block state.",
                1,
            ),
        ],
        _volume,
    ),
    "configmaps": (
        [_NAME, _col("Data", "Data contains the configuration data."), _AGE],
        _configmap,
    ),
    "secrets": (
        [
            _NAME,
            _col("Type", "Used to facilitate programmatic handling of secret data."),
            _col("Data", "Data contains the secret data."),
            _AGE,
        ],
        _secret,
    ),
    "serviceaccounts": ([_NAME, _AGE], _service_account),
}

__all__ = ["PRINTERS", "access_modes"]
