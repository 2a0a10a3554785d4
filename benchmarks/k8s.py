"""Plain kubernetes-client helpers the benchmarks use without going through the engine."""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client, config

TRAINJOB_GROUP = "trainer.kubeflow.org"
TRAINJOB_VERSION = "v1alpha1"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


@dataclass
class KubeTarget:
    """Server URL, bearer token or client certificate (files), and CA bytes from a kubeconfig."""

    server: str
    token: str
    ca_pem: bytes | None
    cert_file: str | None = None
    key_file: str | None = None


def _client_files(user: dict[str, Any]) -> tuple[str | None, str | None]:
    """Paths of the user's client certificate and key; inline ``-data`` is written to a private
    temporary folder (removed at exit), as ``ssl.load_cert_chain`` only takes files."""
    paths: list[str | None] = []
    folder = ""
    for kind in ("client-certificate", "client-key"):
        if user.get(kind):
            paths.append(user[kind])
        elif user.get(f"{kind}-data"):
            if not folder:
                folder = tempfile.mkdtemp(prefix="tjm-bench-cert-")
                atexit.register(shutil.rmtree, folder, True)
            path = os.path.join(folder, kind)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(base64.b64decode(user[f"{kind}-data"]))
            paths.append(path)
        else:
            paths.append(None)
    return paths[0], paths[1]


def read_kubeconfig(path: str) -> KubeTarget:
    """Read the current context's server, token and CA from a kubeconfig file."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    ctx_name = doc.get("current-context") or doc["contexts"][0]["name"]
    ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
    ca: bytes | None = None
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"])
    elif cluster.get("certificate-authority"):
        with open(cluster["certificate-authority"], "rb") as f:
            ca = f.read()
    cert, key = _client_files(user)
    return KubeTarget(
        server=cluster["server"],
        token=user.get("token", ""),
        ca_pem=ca,
        cert_file=cert,
        key_file=key,
    )


def core_api(kubeconfig: str) -> client.CoreV1Api:
    """A fresh CoreV1Api from the kubeconfig."""
    return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))


def custom_api(kubeconfig: str) -> client.CustomObjectsApi:
    """A fresh CustomObjectsApi from the kubeconfig."""
    return client.CustomObjectsApi(config.new_client_from_config(config_file=kubeconfig))


def trainjob_body(
    name: str, runtime: str = "torch-distributed", num_nodes: int = 1, cpu: str | None = None
) -> dict[str, Any]:
    """A minimal TrainJob whose pods sleep forever (``cpu``: each node's request and limit)."""
    trainer: dict[str, Any] = {"command": ["sleep", "infinity"], "numNodes": num_nodes}
    if cpu:
        trainer["resourcesPerNode"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    return {
        "apiVersion": f"{TRAINJOB_GROUP}/{TRAINJOB_VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"trainjob-magics/benchmark": "true"}},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer},
    }


def new_name(prefix: str = "bench") -> str:
    """A random DNS-1035 name."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_trainjob(
    kubeconfig: str,
    namespace: str,
    name: str,
    runtime: str = "torch-distributed",
    num_nodes: int = 1,
    cpu: str | None = None,
) -> None:
    """Create a TrainJob through CustomObjectsApi (as the Kubeflow SDK does)."""
    custom_api(kubeconfig).create_namespaced_custom_object(
        TRAINJOB_GROUP,
        TRAINJOB_VERSION,
        namespace,
        "trainjobs",
        trainjob_body(name, runtime, num_nodes, cpu),
    )


def delete_trainjob(kubeconfig: str, namespace: str, name: str) -> None:
    """Delete a TrainJob; ignore a 404."""
    try:
        custom_api(kubeconfig).delete_namespaced_custom_object(
            TRAINJOB_GROUP, TRAINJOB_VERSION, namespace, "trainjobs", name
        )
    except client.ApiException as e:
        if e.status != 404:
            raise


def running_pods(core: client.CoreV1Api, namespace: str, jobname: str) -> list[str]:
    """Names of the job's pods in phase Running, sorted."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{JOBSET_NAME_LABEL}={jobname}")
    return sorted(p.metadata.name for p in pods.items if p.status and p.status.phase == "Running")


def wait_pods_running(
    kubeconfig: str, namespace: str, jobname: str, count: int = 1, timeout: float = 60.0
) -> list[str]:
    """Poll quickly (20 ms) until `count` pods of the job are Running."""
    core = core_api(kubeconfig)
    deadline = time.monotonic() + timeout
    while True:
        names = running_pods(core, namespace, jobname)
        if len(names) >= count:
            return names
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods of {jobname} not Running after {timeout}s: {names}")
        time.sleep(0.02)


def wait_gone(kubeconfig: str, namespace: str, jobname: str, timeout: float = 30.0) -> None:
    """Wait until the job has no pods left."""
    core = core_api(kubeconfig)
    deadline = time.monotonic() + timeout
    sel = f"{JOBSET_NAME_LABEL}={jobname}"
    while core.list_namespaced_pod(namespace, label_selector=sel).items:
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
