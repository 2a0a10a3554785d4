"""Write a kubeconfig pointing at the local cluster (CA data + bearer token)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

CONTEXT = "trainjob-local"


def kubeconfig_dict(
    url: str, ca_pem: bytes, token: str, user: str = "local-admin", namespace: str = "default"
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {
                    "server": url,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
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
    token: str,
    user: str = "local-admin",
    namespace: str = "default",
) -> Path:
    """Write the kubeconfig with mode 0600 (it holds a token)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_dict(url, ca_pem, token, user, namespace), sort_keys=False)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)
    return path
