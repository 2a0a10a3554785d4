"""Load Kubernetes client configuration without touching the global default.

Order: ``config_file`` argument, ``$KUBECONFIG`` (read at call time), ``~/.kube/config``, then the
in-cluster service account (its mount is ``$TRAINJOB_MAGICS_SERVICE_ACCOUNT_DIR``, default
``/var/run/secrets/kubernetes.io/serviceaccount``). The user's token comes through a
:class:`~.credentials.Credential`: exec plugins and token files are fetched again when they
expire or are refused (``credentials.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.config.kube_config import ConfigNode, KubeConfigLoader, KubeConfigMerger

from ..errors import ConfigError
from . import credentials

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICE_ACCOUNT_ENV = "TRAINJOB_MAGICS_SERVICE_ACCOUNT_DIR"


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


def service_account_dir() -> Path:
    """Where the pod's service account is mounted."""
    return Path(os.environ.get(SERVICE_ACCOUNT_ENV) or SERVICE_ACCOUNT_DIR)


def _in_cluster() -> tuple[k8s_client.ApiClient, str] | None:
    """Service-account configuration when running inside a pod, else None."""
    mount = service_account_dir()
    token = mount / "token"
    if not os.environ.get("KUBERNETES_SERVICE_HOST") or not token.is_file():
        return None
    configuration = k8s_client.Configuration()
    try:
        InClusterConfigLoader(
            token_filename=str(token), cert_filename=str(mount / "ca.crt"), try_refresh_token=False
        ).load_and_set(configuration)
    except ConfigException as exc:
        raise ConfigError(f"in-cluster configuration is unusable ({exc}); set KUBECONFIG") from exc
    credentials.install(
        configuration, credentials.TokenFile(token, "the pod's service account", in_cluster=True)
    )
    try:
        namespace = (mount / "namespace").read_text().strip() or "default"
    except OSError:
        namespace = "default"
    return k8s_client.ApiClient(configuration=configuration), namespace


def _entry(config: ConfigNode, section: str, name: str) -> ConfigNode | None:
    """The named entry of ``clusters``/``contexts``/``users`` (it knows its file's path)."""
    if section not in config or not name:
        return None
    return config[section].get_with_name(name, safe=True)


def _from_kubeconfig(paths: str, context: str | None) -> k8s_client.ApiClient:
    """The client for the chosen context. An exec plugin is taken out of the stock loader's
    hands (it would run the plugin at once, only log its failures, and refresh it 5 minutes
    before every expiry) and run by our :class:`~.credentials.ExecPlugin` at the first
    request."""
    config = KubeConfigMerger(paths).config
    if config is None:
        raise ConfigException("Invalid kube-config file. No configuration found.")
    chosen = _entry(config, "contexts", context or config.value.get("current-context") or "")
    context_value = (chosen.value.get("context") if chosen is not None else None) or {}
    user_name = str(context_value.get("user") or "")
    user_entry = _entry(config, "users", user_name)
    user = dict((user_entry.value.get("user") if user_entry is not None else None) or {})
    plugin = user.pop("exec", None)
    if plugin is not None:
        # the stock loader reads the rest of this user (certificates, ...) without the plugin
        config.value["users"] = [
            ConfigNode(u.name, {**u.value, "user": user}, u.path) if u["name"] == user_name else u
            for u in config.value["users"]
        ]
    configuration = k8s_client.Configuration()
    KubeConfigLoader(
        config_dict=config, config_base_path=None, active_context=context
    ).load_and_set(configuration)
    path = user_entry.path if user_entry is not None else None
    base = os.path.dirname(os.path.abspath(path)) if path else ""
    who = f"kubeconfig user {user_name}"
    credential = credentials.Credential(who)
    if plugin is not None:
        cluster = _entry(config, "clusters", str(context_value.get("cluster") or ""))
        credential = credentials.ExecPlugin(
            user_name,
            dict(plugin),
            base_path=base,
            cluster=dict((cluster.value.get("cluster") if cluster is not None else None) or {}),
        )
    elif user.get("tokenFile") and not user.get("token"):
        credential = credentials.TokenFile(Path(base) / str(user["tokenFile"]), who)
    credentials.install(configuration, credential)
    return k8s_client.ApiClient(configuration=configuration)


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
        api_client = _from_kubeconfig(paths, context)
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
