"""What a session's pods get beyond the runtime: volumes, ``/dev/shm``, service account,
placement, pull secrets, labels, annotations, env from Secrets/ConfigMaps and a pod-template
patch (:class:`PodShaping`), parsed and validated before anything is sent.

Every parser takes the text a user types (``pvc:data:/data:ro``, ``gpu=true:NoSchedule``) and
raises :class:`InvalidInputError` with one line naming the option and what to fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ..validation import DNS1123_SUBDOMAIN, validate_labels, validate_quantity

VOLUME_KINDS = ("pvc", "configmap", "secret", "emptydir")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
ENV_FROM_KINDS = ("secret", "configmap")
SHM_PATH = "/dev/shm"
_POD_PATCH_KEYS = ("metadata", "spec")
_VOLUME_FORMS = (
    "pvc:NAME:/path[:ro], configmap:NAME:/path, secret:NAME:/path or emptydir:/path[:SIZE]"
)


@dataclass(frozen=True)
class Volume:
    """One ``--volume``: ``kind`` is pvc/configmap/secret/emptydir, ``source`` the object's
    name ('' for emptydir), ``size`` an emptyDir's sizeLimit."""

    kind: str
    source: str
    path: str
    read_only: bool = False
    size: str | None = None

    def describe(self) -> str:
        """``pvc data -> /data (ro)`` as the status shows it."""
        what = f"{self.kind} {self.source}" if self.source else self.kind
        extra = " (ro)" if self.read_only else ""
        extra += f" ({self.size})" if self.size else ""
        return f"{what} -> {self.path}{extra}"


@dataclass(frozen=True)
class Toleration:
    """One ``--toleration K[=V]:EFFECT`` (operator Equal with a value, else Exists)."""

    key: str
    effect: str
    value: str | None = None

    def as_dict(self) -> dict[str, str]:
        out = {"key": self.key, "operator": "Equal" if self.value is not None else "Exists"}
        if self.value is not None:
            out["value"] = self.value
        out["effect"] = self.effect
        return out

    def describe(self) -> str:
        return f"{self.key}{'=' + self.value if self.value is not None else ''}:{self.effect}"


@dataclass(frozen=True)
class EnvFrom:
    """One ``--env-from secret:NAME`` / ``configmap:NAME``."""

    kind: str
    name: str


@dataclass(frozen=True)
class PodShaping:
    """Everything a session adds to its pods; empty by default (the runtime as it is)."""

    volumes: tuple[Volume, ...] = ()
    shm_size: str | None = None
    service_account: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)  # TrainJob and pods
    annotations: Mapping[str, str] = field(default_factory=dict)  # TrainJob and pods
    env_from: tuple[EnvFrom, ...] = ()
    pod_patch: Mapping[str, Any] | None = None  # a pod-template fragment (metadata, spec)
    pod_patch_source: str = ""  # the file it came from, for messages

    @property
    def touches_pods(self) -> bool:
        """True when the pod template needs a patch (labels alone still label the pods)."""
        return bool(
            self.volumes
            or self.shm_size
            or self.service_account
            or self.node_selector
            or self.tolerations
            or self.image_pull_secrets
            or self.labels
            or self.annotations
            or self.pod_patch
        )

    @property
    def immutable_pod_fields(self) -> bool:
        """True when the patch carries pod-spec fields Trainer 2.3 makes immutable (CEL
        ``self == oldSelf``: volumes, containers, serviceAccountName, imagePullSecrets, ...)."""
        spec = (self.pod_patch or {}).get("spec") or {}
        return bool(
            self.volumes
            or self.shm_size
            or self.service_account
            or self.image_pull_secrets
            or any(
                k in spec
                for k in (
                    "volumes",
                    "containers",
                    "initContainers",
                    "serviceAccountName",
                    "imagePullSecrets",
                    "securityContext",
                    "terminationGracePeriodSeconds",
                )
            )
        )

    def named_objects(self) -> list[tuple[str, str]]:
        """``(resource, name)`` of every object the pods need to exist: PVCs, ConfigMaps,
        Secrets (mounted or as env), the service account and pull secrets (not checked: a
        missing pull secret is only a warning upstream)."""
        resource = {"pvc": "persistentvolumeclaims", "configmap": "configmaps", "secret": "secrets"}
        found: list[tuple[str, str]] = []
        for vol in self.volumes:
            if vol.kind in resource:
                found.append((resource[vol.kind], vol.source))
        for env in self.env_from:
            found.append((resource[env.kind], env.name))
        if self.service_account:
            found.append(("serviceaccounts", self.service_account))
        unique: list[tuple[str, str]] = []
        for item in found:
            if item not in unique:
                unique.append(item)
        return unique

    def summary(self) -> dict[str, Any]:
        """What the status view shows: volumes, service account, placement."""
        return {
            "volumes": [v.describe() for v in self.volumes]
            + ([f"shm {self.shm_size} -> {SHM_PATH}"] if self.shm_size else []),
            "service_account": self.service_account or "",
            "node_selector": dict(self.node_selector),
            "tolerations": [t.describe() for t in self.tolerations],
            "image_pull_secrets": list(self.image_pull_secrets),
            "env_from": [f"{e.kind} {e.name}" for e in self.env_from],
        }


# -- parsers (one option value each) ---------------------------------------------------------


def _object_name(name: str, option: str, what: str) -> str:
    if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        raise InvalidInputError(
            f"{option}: {what} {name!r} is not a valid Kubernetes name: use lowercase letters, "
            "digits, '-' and '.', starting and ending with a letter or digit"
        )
    return name


def _mount_path(path: str, option: str) -> str:
    if not path.startswith("/"):
        raise InvalidInputError(f"{option}: mount path {path!r} must be absolute (start with /)")
    if any(part == ".." for part in path.split("/")):
        raise InvalidInputError(
            f"{option}: mount path {path!r} has a '..' part: give the absolute path it means, "
            "without '..' (e.g. /data)"
        )
    if ":" in path or "\x00" in path:
        raise InvalidInputError(f"{option}: mount path {path!r} must not contain ':' or NUL")
    return path.rstrip("/") or "/"


def parse_volume(text: str) -> Volume:
    """``pvc:NAME:/path[:ro]``, ``configmap:NAME:/path``, ``secret:NAME:/path``,
    ``emptydir:/path[:SIZE]``."""
    option = f"--volume {text}"
    if not isinstance(text, str) or ":" not in text:
        raise InvalidInputError(f"--volume expects {_VOLUME_FORMS}, got {text!r}")
    kind, _, rest = text.partition(":")
    kind = kind.lower()
    if kind not in VOLUME_KINDS:
        raise InvalidInputError(
            f"--volume kind {kind!r} is unknown: use {', '.join(VOLUME_KINDS)} ({_VOLUME_FORMS})"
        )
    if kind == "emptydir":
        path, _, size = rest.partition(":")
        if path == SHM_PATH:
            raise InvalidInputError(f"{option}: use --shm-size SIZE for {SHM_PATH}")
        quantity = validate_quantity(size, f"{option}: size") if size else None
        return Volume("emptydir", "", _mount_path(path, option), size=quantity)
    parts = rest.split(":")
    if len(parts) < 2 or len(parts) > 3 or not parts[1]:
        raise InvalidInputError(f"--volume expects {_VOLUME_FORMS}, got {text!r}")
    name, path = parts[0], parts[1]
    read_only = False
    if len(parts) == 3:
        if parts[2] not in ("ro", "rw"):
            raise InvalidInputError(f"{option}: the last part must be ro or rw, got {parts[2]!r}")
        read_only = parts[2] == "ro"
    what = {"pvc": "PVC name", "configmap": "ConfigMap name", "secret": "Secret name"}[kind]
    _object_name(name, option, what)
    if kind != "pvc":
        read_only = True  # ConfigMap and Secret volumes are read-only anyway
    return Volume(kind, name, _mount_path(path, option), read_only)


def parse_key_value(text: str, option: str) -> tuple[str, str]:
    """``K=V`` with a Kubernetes label key and value (node selectors, labels)."""
    key, sep, value = (text or "").partition("=")
    if not sep or not key:
        raise InvalidInputError(f"{option} expects KEY=VALUE, got {text!r}")
    try:
        validate_labels({key: value})
    except InvalidInputError as exc:
        raise InvalidInputError(f"{option} {text}: {exc}") from None
    return key, value


def parse_annotation(text: str) -> tuple[str, str]:
    """``K=V`` with a label-style key and any value."""
    key, sep, value = (text or "").partition("=")
    if not sep or not key:
        raise InvalidInputError(f"--annotation expects KEY=VALUE, got {text!r}")
    try:
        validate_labels({key: "x"})
    except InvalidInputError:
        raise InvalidInputError(
            f"--annotation key {key!r} is invalid: use [prefix/]name with a DNS prefix and a "
            "name of at most 63 letters, digits, '-', '_' or '.'"
        ) from None
    return key, value


def parse_toleration(text: str) -> Toleration:
    """``KEY[=VALUE]:EFFECT`` with EFFECT NoSchedule, PreferNoSchedule or NoExecute."""
    head, sep, effect = (text or "").rpartition(":")
    if not sep or not head:
        raise InvalidInputError(
            f"--toleration expects KEY[=VALUE]:EFFECT (EFFECT: {', '.join(EFFECTS)}), got {text!r}"
        )
    if effect not in EFFECTS:
        raise InvalidInputError(
            f"--toleration {text}: effect {effect!r} is unknown; use {', '.join(EFFECTS)}"
        )
    key, eq, value = head.partition("=")
    try:
        validate_labels({key: value if eq else ""})
    except InvalidInputError as exc:
        raise InvalidInputError(f"--toleration {text}: {exc}") from None
    return Toleration(key, effect, value if eq else None)


def parse_env_from(text: str) -> EnvFrom:
    """``secret:NAME`` or ``configmap:NAME``."""
    kind, sep, name = (text or "").partition(":")
    kind = kind.lower()
    if not sep or kind not in ENV_FROM_KINDS:
        raise InvalidInputError(f"--env-from expects secret:NAME or configmap:NAME, got {text!r}")
    what = "Secret name" if kind == "secret" else "ConfigMap name"
    return EnvFrom(kind, _object_name(name, f"--env-from {text}", what))


def load_pod_patch(source: str | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """A pod-template fragment from a YAML/JSON file (or a dict): ``{metadata, spec}``; a bare
    pod spec (``containers``, ``volumes``, ...) is taken as the ``spec``."""
    if isinstance(source, Mapping):
        doc: Any = dict(source)
        where = "pod_patch"
    else:
        where = f"--pod-patch {source}"
        path = Path(str(source)).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInputError(f"{where}: cannot read the file ({exc.strerror})") from None
        try:
            import yaml

            doc = yaml.safe_load(text)
        except Exception as exc:  # yaml.YAMLError and its position
            first = " ".join(str(exc).split())
            raise InvalidInputError(f"{where} is not valid YAML: {first}") from None
    if not isinstance(doc, Mapping) or not doc:
        raise InvalidInputError(f"{where} must be a mapping: a pod template (metadata, spec)")
    if "kind" in doc and doc["kind"] not in ("Pod", "PodTemplate"):
        raise InvalidInputError(
            f"{where}: kind {doc['kind']} is not a pod template: give metadata and spec of a pod"
        )
    if doc.get("kind") == "PodTemplate":
        doc = doc.get("template") or {}
    if doc.get("kind") == "Pod" or "apiVersion" in doc:
        doc = {k: v for k, v in doc.items() if k in _POD_PATCH_KEYS}
    if not any(k in doc for k in _POD_PATCH_KEYS):
        doc = {"spec": dict(doc)}
    extra = sorted(set(doc) - set(_POD_PATCH_KEYS))
    if extra:
        raise InvalidInputError(
            f"{where}: unexpected top-level key {extra[0]!r}; a pod template has metadata and spec"
        )
    meta = doc.get("metadata") or {}
    if not isinstance(meta, Mapping) or not isinstance(doc.get("spec") or {}, Mapping):
        raise InvalidInputError(f"{where}: metadata and spec must be mappings")
    bad_meta = sorted(set(meta) - {"labels", "annotations"})
    if bad_meta:
        raise InvalidInputError(
            f"{where}: metadata.{bad_meta[0]} cannot be patched; use labels and annotations"
        )
    if meta.get("labels"):
        validate_labels(meta["labels"])
    out: dict[str, Any] = {}
    if meta:
        out["metadata"] = {k: dict(v) for k, v in meta.items() if v}
    if doc.get("spec"):
        out["spec"] = dict(doc["spec"])
    return out, where


def _many(value: str | Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Sequence):
        raise InvalidInputError(f"{what} must be a string or a list of strings, got {value!r}")
    return [str(v) for v in value]


def _pairs(
    value: Mapping[str, str] | str | Sequence[str] | None, option: str
) -> list[tuple[str, str]]:
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [(str(k), str(v)) for k, v in value.items()]
    pairs = []
    for text in _many(value, option):
        key, sep, val = text.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"{option} expects KEY=VALUE, got {text!r}")
        pairs.append((key, val))
    return pairs


def build_shaping(
    *,
    volumes: str | Sequence[str] | None = None,
    shm_size: str | None = None,
    service_account: str | None = None,
    node_selector: Mapping[str, str] | Sequence[str] | None = None,
    tolerations: str | Sequence[str] | None = None,
    image_pull_secrets: str | Sequence[str] | None = None,
    labels: Mapping[str, str] | Sequence[str] | None = None,
    annotations: Mapping[str, str] | Sequence[str] | None = None,
    env_from: str | Sequence[str] | None = None,
    pod_patch: str | Mapping[str, Any] | None = None,
) -> PodShaping:
    """Validate every option (the forms of the magics' options, or dicts for K=V ones)."""
    vols = [parse_volume(v) for v in _many(volumes, "volumes")]
    paths = [v.path for v in vols] + ([SHM_PATH] if shm_size else [])
    dup = next((p for p in paths if paths.count(p) > 1), None)
    if dup:
        raise InvalidInputError(f"--volume: two volumes are mounted at {dup}; use one per path")
    shm = validate_quantity(shm_size, "--shm-size") if shm_size not in (None, "") else None
    if shm is not None and not re.search(r"[1-9]", shm):
        raise InvalidInputError(f"--shm-size must be more than 0, got {shm_size!r}")
    account = None
    if service_account:
        account = _object_name(str(service_account), "--service-account", "service account")
    selector: dict[str, str] = {}
    for key, value in _pairs(node_selector, "--node-selector"):
        k, v = parse_key_value(f"{key}={value}", "--node-selector")
        selector[k] = v
    tols = tuple(parse_toleration(t) for t in _many(tolerations, "tolerations"))
    secrets = tuple(
        _object_name(s, "--image-pull-secret", "Secret name")
        for s in _many(image_pull_secrets, "image_pull_secrets")
    )
    label_map: dict[str, str] = {}
    for key, value in _pairs(labels, "--label"):
        k, v = parse_key_value(f"{key}={value}", "--label")
        label_map[k] = v
    notes: dict[str, str] = {}
    for key, value in _pairs(annotations, "--annotation"):
        k, v = parse_annotation(f"{key}={value}")
        notes[k] = v
    envs = tuple(parse_env_from(e) for e in _many(env_from, "env_from"))
    patch, where = (None, "")
    if pod_patch is not None and pod_patch != "":
        patch, where = load_pod_patch(pod_patch)
    return PodShaping(
        volumes=tuple(vols),
        shm_size=shm,
        service_account=account,
        node_selector=selector,
        tolerations=tols,
        image_pull_secrets=tuple(dict.fromkeys(secrets)),
        labels=label_map,
        annotations=notes,
        env_from=tuple(dict.fromkeys(envs)),
        pod_patch=patch,
        pod_patch_source=where,
    )


__all__ = [
    "EFFECTS",
    "EnvFrom",
    "PodShaping",
    "Toleration",
    "Volume",
    "build_shaping",
    "load_pod_patch",
    "parse_env_from",
    "parse_key_value",
    "parse_toleration",
    "parse_volume",
]
