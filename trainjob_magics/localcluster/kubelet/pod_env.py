"""The container's environment as the kubelet makes it (kubernetes ``pkg/kubelet/kubelet_pods.go``
makeEnvironmentVariables): ``envFrom`` ConfigMaps and Secrets first (with their ``prefix``),
then ``env`` in order, each a ``value`` (``$(VAR)`` references expanded,
``third_party/forked/golang/expansion``) or a ``valueFrom``: ``configMapKeyRef``,
``secretKeyRef`` (data base64-decoded), ``fieldRef``. A missing object or key that is not
``optional`` is an error (``ContainerConfigError``) whose text is the kubelet's: the container
then waits with ``CreateContainerConfigError``.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from ..core.resources import CONFIGMAPS, SECRETS
from ..core.store import Store
from .volumes import field_value


class ContainerConfigError(Exception):
    """generateContainerConfig failed: ``str()`` is the container's waiting message."""


def _decode(value: Any) -> str:
    try:
        return base64.b64decode(str(value)).decode("utf-8", "replace")
    except (ValueError, TypeError):
        return ""


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """``$(VAR)`` -> its value when defined (kept as written otherwise); ``$$`` -> ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, value)


class _Lookup:
    def __init__(self, store: Store, namespace: str) -> None:
        self.store = store
        self.namespace = namespace

    def configmap(self, name: str, optional: bool) -> dict[str, str] | None:
        cm = self.store.try_get(CONFIGMAPS, self.namespace, name)
        if cm is None:
            if optional:
                return None
            # configmap_manager.go: apierrors.NewNotFound(corev1.Resource("configmap"), name)
            raise ContainerConfigError(f'configmap "{name}" not found')
        return {k: str(v) for k, v in (cm.get("data") or {}).items()}

    def secret(self, name: str, optional: bool) -> dict[str, str] | None:
        secret = self.store.try_get(SECRETS, self.namespace, name)
        if secret is None:
            if optional:
                return None
            raise ContainerConfigError(f'secret "{name}" not found')  # secret_manager.go
        return {k: _decode(v) for k, v in (secret.get("data") or {}).items()}


def container_env(store: Store, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The environment of ``container`` (no service variables); ContainerConfigError when a
    reference cannot be resolved."""
    namespace = pod["metadata"].get("namespace", "")
    look = _Lookup(store, namespace)
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        if "configMapRef" in source:
            ref = source["configMapRef"] or {}
            data = look.configmap(ref.get("name", ""), bool(ref.get("optional")))
        elif "secretRef" in source:
            ref = source["secretRef"] or {}
            data = look.secret(ref.get("name", ""), bool(ref.get("optional")))
        else:
            continue
        for k, v in (data or {}).items():
            env[prefix + k] = v
    for var in container.get("env") or []:
        name = var.get("name", "")
        value = var.get("value")
        if value not in (None, "") or not var.get("valueFrom"):
            env[name] = expand(str(value or ""), env)
            continue
        src = var["valueFrom"] or {}
        key_ref = next(
            (
                (src[field] or {}, kind, read)
                for field, kind, read in (
                    ("configMapKeyRef", "ConfigMap", look.configmap),
                    ("secretKeyRef", "Secret", look.secret),
                )
                if field in src
            ),
            None,
        )
        if key_ref is not None:
            ref, kind, read = key_ref
            optional = bool(ref.get("optional"))
            data = read(ref.get("name", ""), optional)
            if data is None:
                continue
            if ref.get("key") not in data:
                if optional:
                    continue
                raise ContainerConfigError(
                    f"couldn't find key {ref.get('key')} in {kind} {namespace}/{ref.get('name')}"
                )
            env[name] = data[ref["key"]]
        elif "fieldRef" in src:
            env[name] = field_value(pod, (src["fieldRef"] or {}).get("fieldPath", ""))
    return env


def uses_references(container: dict[str, Any]) -> bool:
    """Whether the container's env needs the API objects (else the plain values suffice)."""
    return bool(container.get("envFrom")) or any(
        e.get("valueFrom") for e in container.get("env") or []
    )


__all__ = ["ContainerConfigError", "container_env", "expand", "uses_references"]
