"""The kubelet's volume manager for one pod: each volume of the pod spec becomes a directory on
this machine, and each volumeMount of the running container a mount of it (``Mount``) that
``kubelet/mount_namespace.py`` makes in the pod's own mount namespace.

Per volume type, as the kubelet's plugins set them up (kubernetes ``pkg/volume/*``):

- ``persistentVolumeClaim``: the bound PersistentVolume's directory (the local provisioner's
  ``hostPath``, ``controller/core_objects.py``), bind-mounted; read-only when the claim or the
  mount says so.
- ``configMap`` / ``secret`` (``pkg/volume/configmap``, ``pkg/volume/secret``): the keys (or
  the ``items``) as files, Secret data base64-decoded, with ``defaultMode`` (0644) or the
  item's ``mode``, written as ``pkg/volume/util/atomic_writer.go`` does (a timestamped
  directory, ``..data`` pointing at it, one symlink per top-level name); mounted read-only.
  A missing object (not ``optional``) fails the mount with the plugin's error.
- ``projected``: ``serviceAccountToken`` (a token the local API server accepts),
  ``configMap`` (``kube-root-ca.crt`` is the cluster's CA), ``secret``, ``downwardAPI``.
- ``emptyDir``: a directory of the pod; ``medium: Memory`` is a tmpfs of ``sizeLimit``
  (``pkg/volume/emptydir/empty_dir.go``: the pod's memory limit, else the node's, when unset).
- ``hostPath``: that path.

Errors are worded as the kubelet's FailedMount Event words them
(``pkg/volume/util/operationexecutor``: ``MountVolume.SetUp failed for volume "v" : <err>``).
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.resources import CONFIGMAPS, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, SECRETS
from ..core.store import Store

DEFAULT_MODE = 0o644  # SecretVolumeSourceDefaultMode, ConfigMapVolumeSourceDefaultMode
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


class VolumeError(Exception):
    """A volume cannot be set up: ``str()`` is the FailedMount Event's message."""

    def __init__(self, volume: str, error: str) -> None:
        super().__init__(f'MountVolume.SetUp failed for volume "{volume}" : {error}')
        self.volume = volume
        self.error = error


@dataclass(frozen=True)
class Mount:
    """One mount in the pod's namespace: ``source`` onto ``target`` (a tmpfs of
    ``tmpfs_size`` bytes when ``tmpfs`` is set)."""

    target: str
    source: str = ""
    read_only: bool = False
    tmpfs: bool = False
    tmpfs_size: int | None = None
    file: bool = False  # subPath naming a file

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "source": self.source,
            "read_only": self.read_only,
            "tmpfs": self.tmpfs,
            "tmpfs_size": self.tmpfs_size,
            "file": self.file,
        }


@dataclass
class PodIdentity:
    """What a pod's service-account volume needs from the cluster: a token for
    ``(namespace, service account)`` that the API server accepts, a way to refuse it again,
    the CA, and the API server's ``host:port``."""

    mint_token: Callable[[str, str], str]
    revoke_token: Callable[[str], None]
    ca_pem: bytes
    address: Callable[[], str] | None = None


def _b64(value: Any) -> bytes:
    try:
        return base64.b64decode(str(value))
    except (ValueError, TypeError):
        return b""


def _configmap_files(cm: dict[str, Any]) -> dict[str, bytes]:
    files = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
    files.update({k: _b64(v) for k, v in (cm.get("binaryData") or {}).items()})
    return files


def _secret_files(secret: dict[str, Any]) -> dict[str, bytes]:
    return {k: _b64(v) for k, v in (secret.get("data") or {}).items()}


def _select(
    files: dict[str, bytes],
    items: list[dict[str, Any]] | None,
    default_mode: int,
    missing: Callable[[str], str],
    optional: bool,
) -> dict[str, tuple[bytes, int]]:
    """``items`` (key -> path, mode) or every key; ``missing(key)`` words an unknown key."""
    if not items:
        return {k: (v, default_mode) for k, v in files.items()}
    out: dict[str, tuple[bytes, int]] = {}
    for item in items:
        key = item.get("key", "")
        if key not in files:
            if optional:
                continue
            raise ValueError(missing(key))
        mode = item.get("mode")
        out[item.get("path") or key] = (files[key], default_mode if mode is None else int(mode))
    return out


def write_atomic(directory: Path, files: dict[str, tuple[bytes, int]]) -> None:
    """``atomic_writer.go``: the files in ``..<timestamp>/``, ``..data`` -> it, and a symlink
    ``name -> ..data/name`` per top-level name; an older payload is removed."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o777)
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()) + str(time.time_ns() % 10**9)
    payload = directory / stamp
    payload.mkdir()
    for rel, (data, mode) in files.items():
        path = payload / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chmod(path, mode & 0o7777)
    os.chmod(payload, 0o755)
    tmp_link = directory / "..data_tmp"
    if tmp_link.is_symlink():
        tmp_link.unlink()
    os.symlink(stamp, tmp_link)
    old = os.readlink(directory / "..data") if (directory / "..data").is_symlink() else None
    os.replace(tmp_link, directory / "..data")
    tops = {rel.split("/", 1)[0] for rel in files}
    for top in tops:
        link = directory / top
        if not link.is_symlink():
            os.symlink(f"..data/{top}", link)
    for entry in directory.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in tops:
            entry.unlink()
    if old and old != stamp:
        shutil.rmtree(directory / old, ignore_errors=True)


class PodVolumes:
    """Sets up the volumes of one pod under ``<pod dir>/volumes`` (as the kubelet's
    ``/var/lib/kubelet/pods/<uid>/volumes/<plugin>/<name>``)."""

    def __init__(
        self,
        store: Store,
        pod: dict[str, Any],
        pod_dir: Path,
        identity: PodIdentity | None,
        node_memory: int,
    ) -> None:
        self.store = store
        self.pod = pod
        self.namespace = pod["metadata"].get("namespace", "")
        self.dir = Path(pod_dir) / "volumes"
        self.identity = identity
        self.node_memory = node_memory
        self._token: str | None = None

    @property
    def token(self) -> str | None:
        """The service-account token written for this pod (to revoke it when it goes)."""
        return self._token

    def set_up(self, container: dict[str, Any]) -> list[Mount]:
        """Every volume the pod has, then the mounts of ``container``; VolumeError on the first
        volume that cannot be set up (in the pod's volume order, as the kubelet reports)."""
        spec = self.pod.get("spec") or {}
        paths: dict[str, tuple[str, bool, bool]] = {}  # name -> (dir, read-only, tmpfs)
        for volume in spec.get("volumes") or []:
            name = volume.get("name", "")
            try:
                paths[name] = self._set_up(volume)
            except ValueError as exc:
                raise VolumeError(name, str(exc)) from None
        mounts: list[Mount] = []
        for vm in container.get("volumeMounts") or []:
            name = vm.get("name", "")
            if name not in paths:
                continue  # the API server refuses such pods; nothing to mount
            source, read_only, tmpfs = paths[name]
            read_only = read_only or bool(vm.get("readOnly"))
            sub = str(vm.get("subPath") or "")
            if tmpfs:
                mounts.append(Mount(vm["mountPath"], tmpfs=True, tmpfs_size=self._shm_size(name)))
                continue
            if sub:
                src = Path(source) / sub
                if not src.exists():
                    src.mkdir(parents=True, exist_ok=True)
                mounts.append(Mount(vm["mountPath"], str(src), read_only, file=not src.is_dir()))
                continue
            mounts.append(Mount(vm["mountPath"], source, read_only))
        return sorted(mounts, key=lambda m: m.target.rstrip("/").count("/"))

    def refresh(self, kind: str, name: str) -> None:
        """Write again the ConfigMap (``kind`` "configmap") or Secret ("secret") volumes and
        projections of ``name``, as the kubelet's periodic sync does; a source that is gone or
        broken leaves what was written (the kubelet keeps the last payload)."""
        for volume in (self.pod.get("spec") or {}).get("volumes") or []:
            if _uses(volume, kind, name):
                try:
                    self._set_up(volume)
                except (ValueError, OSError):
                    continue

    def _shm_size(self, name: str) -> int | None:
        volume = next(
            v for v in (self.pod.get("spec") or {}).get("volumes") or [] if v.get("name") == name
        )
        limit = ((volume.get("emptyDir") or {}).get("sizeLimit")) or None
        from ..core.quantity import parse_quantity

        if limit is not None:
            return int(parse_quantity(limit))
        memory = 0
        for c in (self.pod.get("spec") or {}).get("containers") or []:
            lim = ((c.get("resources") or {}).get("limits") or {}).get("memory")
            if lim is None:
                return self.node_memory or None
            memory += int(parse_quantity(lim))
        return memory or self.node_memory or None

    def _set_up(self, volume: dict[str, Any]) -> tuple[str, bool, bool]:
        name = volume.get("name", "")
        if "persistentVolumeClaim" in volume:
            src = volume["persistentVolumeClaim"] or {}
            return self._claim(src.get("claimName", "")), bool(src.get("readOnly")), False
        if "configMap" in volume:
            src = volume["configMap"] or {}
            target = self.dir / "kubernetes.io~configmap" / name
            write_atomic(target, self._configmap(src))
            return str(target), True, False
        if "secret" in volume:
            src = volume["secret"] or {}
            target = self.dir / "kubernetes.io~secret" / name
            write_atomic(target, self._secret(src))
            return str(target), True, False
        if "projected" in volume:
            target = self.dir / "kubernetes.io~projected" / name
            write_atomic(target, self._projected(volume["projected"] or {}))
            return str(target), True, False
        if "emptyDir" in volume:
            src = volume["emptyDir"] or {}
            if src.get("medium") == "Memory":
                return "", False, True
            target = self.dir / "kubernetes.io~empty-dir" / name
            target.mkdir(parents=True, exist_ok=True)
            os.chmod(target, 0o777)
            return str(target), False, False
        if "hostPath" in volume:
            path = str((volume["hostPath"] or {}).get("path", ""))
            kind = (volume["hostPath"] or {}).get("type") or ""
            if kind in ("DirectoryOrCreate",):
                Path(path).mkdir(parents=True, exist_ok=True)
            elif not os.path.exists(path):
                raise ValueError(f"hostPath type check failed: {path} is not a directory")
            return path, False, False
        kinds = sorted(k for k in volume if k != "name")
        raise ValueError(
            f"the local cluster does not support volumes of type {', '.join(kinds) or '(none)'}"
        )

    # -- sources ---------------------------------------------------------------------------

    def _claim(self, claim_name: str) -> str:
        claim = self.store.try_get(PERSISTENT_VOLUME_CLAIMS, self.namespace, claim_name)
        if claim is None:
            raise ValueError(f'persistentvolumeclaim "{claim_name}" not found')
        pv_name = (claim.get("spec") or {}).get("volumeName") or ""
        pv = self.store.try_get(PERSISTENT_VOLUMES, None, pv_name) if pv_name else None
        path = ((pv or {}).get("spec") or {}).get("hostPath", {}).get("path")
        if not path:
            raise ValueError(f'persistentvolumeclaim "{claim_name}" is not bound')
        Path(path).mkdir(parents=True, exist_ok=True)
        return str(path)

    def _configmap(self, src: dict[str, Any]) -> dict[str, tuple[bytes, int]]:
        name = src.get("name", "")
        optional = bool(src.get("optional"))
        mode = int(src.get("defaultMode", DEFAULT_MODE))
        cm = self.store.try_get(CONFIGMAPS, self.namespace, name)
        if cm is None:
            if optional:
                return {}
            raise ValueError(f'configmap "{name}" not found')
        return _select(
            _configmap_files(cm),
            src.get("items"),
            mode,
            lambda k: f"configmap references non-existent config key: {k}",
            optional,
        )

    def _secret(self, src: dict[str, Any]) -> dict[str, tuple[bytes, int]]:
        name = src.get("secretName", "")
        optional = bool(src.get("optional"))
        mode = int(src.get("defaultMode", DEFAULT_MODE))
        secret = self.store.try_get(SECRETS, self.namespace, name)
        if secret is None:
            if optional:
                return {}
            raise ValueError(f'secret "{name}" not found')
        return _select(
            _secret_files(secret),
            src.get("items"),
            mode,
            lambda k: f"references non-existent secret key: {k}",
            optional,
        )

    def _projected(self, src: dict[str, Any]) -> dict[str, tuple[bytes, int]]:
        """``pkg/volume/projected/projected.go`` collectData."""
        mode = int(src.get("defaultMode", DEFAULT_MODE))
        out: dict[str, tuple[bytes, int]] = {}
        for source in src.get("sources") or []:
            if "serviceAccountToken" in source:
                path = (source["serviceAccountToken"] or {}).get("path", "token")
                out[path] = (self._service_account_token().encode(), mode)
            elif "configMap" in source:
                cm = source["configMap"] or {}
                if cm.get("name") == "kube-root-ca.crt" and self.identity is not None:
                    files = {"ca.crt": self.identity.ca_pem}
                    cm_obj = self.store.try_get(CONFIGMAPS, self.namespace, "kube-root-ca.crt")
                    if cm_obj is not None:
                        files = _configmap_files(cm_obj)
                    out.update(
                        _select(files, cm.get("items"), mode, lambda k: k, bool(cm.get("optional")))
                    )
                else:
                    out.update(self._configmap({**cm, "defaultMode": mode}))
            elif "secret" in source:
                sec = source["secret"] or {}
                out.update(
                    self._secret({**sec, "secretName": sec.get("name", ""), "defaultMode": mode})
                )
            elif "downwardAPI" in source:
                for item in (source["downwardAPI"] or {}).get("items") or []:
                    field_path = (item.get("fieldRef") or {}).get("fieldPath", "")
                    value = field_value(self.pod, field_path)
                    out[item.get("path", "")] = (value.encode(), int(item.get("mode", mode)))
        return out

    def _service_account_token(self) -> str:
        if self.identity is None:
            raise ValueError("the local cluster cannot issue service account tokens")
        if self._token is None:
            sa = (self.pod.get("spec") or {}).get("serviceAccountName") or "default"
            self._token = self.identity.mint_token(self.namespace, sa)
        return self._token


def _uses(volume: dict[str, Any], kind: str, name: str) -> bool:
    if kind == "configmap" and (volume.get("configMap") or {}).get("name") == name:
        return True
    if kind == "secret" and (volume.get("secret") or {}).get("secretName") == name:
        return True
    for source in (volume.get("projected") or {}).get("sources") or []:
        key = "configMap" if kind == "configmap" else "secret"
        if (source.get(key) or {}).get("name") == name:
            return True
    return False


def field_value(pod: dict[str, Any], field_path: str) -> str:
    """The downward API's value of ``field_path`` (``pkg/fieldpath/fieldpath.go``)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if field_path.startswith(prefix + "['") and field_path.endswith("']"):
            key = field_path[len(prefix) + 2 : -2]
            return str((meta.get(source) or {}).get(key, ""))
        if field_path == prefix:
            items = sorted((meta.get(source) or {}).items())
            return "\n".join(f'{k}="{v}"' for k, v in items)
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
    }
    return str(simple.get(field_path) or "")


def is_token_mount(pod: dict[str, Any], mount: dict[str, Any]) -> bool:
    """Whether ``mount`` is of the token volume the ServiceAccount admission plugin adds."""
    return any(
        v.get("name") == mount.get("name")
        and str(v.get("name", "")).startswith("kube-api-access-")
        and v.get("projected")
        for v in (pod.get("spec") or {}).get("volumes") or []
    )


def needs_mount_namespace(pod: dict[str, Any], container: dict[str, Any]) -> bool:
    """Whether ``container`` needs mounts of its own: a volume mount other than the token the
    ServiceAccount plugin adds, or a service account other than ``default`` (so its token is at
    the well-known path). Other pods run as before, without a mount namespace."""
    spec = pod.get("spec") or {}
    token_volumes = {
        v.get("name")
        for v in spec.get("volumes") or []
        if str(v.get("name", "")).startswith("kube-api-access-") and v.get("projected")
    }
    for vm in container.get("volumeMounts") or []:
        if vm.get("name") not in token_volumes:
            return True
    return bool(token_volumes) and (spec.get("serviceAccountName") or "default") != "default"


__all__ = [
    "Mount",
    "PodIdentity",
    "PodVolumes",
    "VolumeError",
    "field_value",
    "is_token_mount",
    "needs_mount_namespace",
    "write_atomic",
]
