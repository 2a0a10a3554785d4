"""Write a kubeconfig pointing at the local cluster (CA data + one user's credentials)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "trainjob-local"


def token_user(token: str) -> dict[str, Any]:
    return {"token": token}


def cert_user(cert_pem: bytes, key_pem: bytes) -> dict[str, Any]:
    """A user that authenticates with a client certificate (kind's, kubeadm's admin.conf)."""
    return {
        "client-certificate-data": base64.b64encode(cert_pem).decode(),
        "client-key-data": base64.b64encode(key_pem).decode(),
    }


def exec_user(command: str, args: list[str]) -> dict[str, Any]:
    """A user whose token comes from an exec credential plugin (as on EKS and GKE)."""
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": command,
            "args": args,
            "interactiveMode": "Never",
            "provideClusterInfo": False,
        }
    }


def kubeconfig_dict(
    url: str,
    ca_pem: bytes,
    token: str | None = None,
    user: str = "local-admin",
    namespace: str = "default",
    *,
    credentials: dict[str, Any] | None = None,
    proxy_url: str | None = None,
) -> dict:
    """The kubeconfig; ``credentials`` is a user entry (default: the bearer ``token``)."""
    cluster: dict[str, Any] = {
        "server": url,
        "certificate-authority-data": base64.b64encode(ca_pem).decode(),
    }
    if proxy_url:
        cluster["proxy-url"] = proxy_url
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": user, "user": credentials or token_user(token or "")}],
        "contexts": [
            {"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user, "namespace": namespace}}
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path,
    url: str,
    ca_pem: bytes,
    token: str | None = None,
    user: str = "local-admin",
    namespace: str = "default",
    *,
    credentials: dict[str, Any] | None = None,
    proxy_url: str | None = None,
) -> Path:
    """Write the kubeconfig with mode 0600 (it holds a credential)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = kubeconfig_dict(
        url, ca_pem, token, user, namespace, credentials=credentials, proxy_url=proxy_url
    )
    text = yaml.safe_dump(data, sort_keys=False)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)
    return path
