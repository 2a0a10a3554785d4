"""Load Kubernetes client configuration without touching the global default.

Order: ``config_file`` argument, ``$KUBECONFIG`` (read at call time), ``~/.kube/config``, then the
in-cluster service account.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from ..errors import ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


DEFAULT_KUBECONFIG = "~/.kube/config"


NO_CONFIG_MESSAGE = (
    "No Kubernetes configuration found: set KUBECONFIG, pass config_file=..., or run "
    "`trainjob-magics local-cluster` to try the local cluster"
)


def _kubeconfig_paths(config_file: str | os.PathLike[str] | None) -> str | None:
    """Return the kubeconfig path(s) to use (``os.pathsep``-joined), or None when there is none."""
    if config_file is not None:
        path = Path(config_file).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"kubeconfig file {str(path)!r} does not exist: pass an existing config_file"
            )
        return str(path)
    env = os.environ.get("KUBECONFIG", "")
    existing = [p for p in env.split(os.pathsep) if p and Path(p).expanduser().is_file()]
    if env and not existing:
        raise ConfigError(
            f"KUBECONFIG={env!r} names no existing file: fix KUBECONFIG or pass config_file=..."
        )
    if existing:
        return os.pathsep.join(str(Path(p).expanduser()) for p in existing)
    default = Path(DEFAULT_KUBECONFIG).expanduser()
    return str(default) if default.is_file() else None


def _context_namespace(paths: str, context: str | None) -> str:
    """Namespace of the named (or current) context, else ``default``."""
    contexts, current = k8s_config.list_kube_config_contexts(config_file=paths)
    chosen = current
    if context is not None:
        chosen = next((c for c in contexts if c.get("name") == context), None)
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return namespace or "default"


def _in_cluster() -> tuple[k8s_client.ApiClient, str] | None:
    """Service-account configuration when running inside a pod, else None."""
    token = SERVICE_ACCOUNT_DIR / "token"
    if not os.environ.get("KUBERNETES_SERVICE_HOST") or not token.is_file():
        return None
    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        raise ConfigError(f"in-cluster configuration is unusable ({exc}); set KUBECONFIG") from exc
    try:
        namespace = (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or "default"
    except OSError:
        namespace = "default"
    return k8s_client.ApiClient(configuration=configuration), namespace


def load(
    config_file: str | os.PathLike[str] | None = None, context: str | None = None
) -> tuple[k8s_client.ApiClient, str]:
    """Return ``(ApiClient, namespace)`` from a kubeconfig or the in-cluster service account."""
    paths = _kubeconfig_paths(config_file)
    if paths is None:
        if context is not None:
            raise ConfigError(
                f"context {context!r} requested but no kubeconfig found: set KUBECONFIG or "
                "pass config_file=..."
            )
        found = _in_cluster()
        if found is None:
            raise ConfigError(NO_CONFIG_MESSAGE)
        return found
    try:
        configuration = k8s_client.Configuration()
        api_client = k8s_config.new_client_from_config(
            config_file=paths, context=context, client_configuration=configuration
        )
        namespace = _context_namespace(paths, context)
    except ConfigException as exc:
        raise ConfigError(
            f"cannot use kubeconfig {paths}: {exc}; check the file or pass context=..."
        ) from exc
    except Exception as exc:  # malformed YAML, unreadable files, bad exec plugins
        raise ConfigError(
            f"cannot read kubeconfig {paths} ({type(exc).__name__}); check the file"
        ) from exc
    return api_client, namespace
