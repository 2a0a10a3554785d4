"""The stack's nodes: kwok keeps the Node objects, our node agent serves their kubelet API, and
the pod runner runs the pods' commands.

``start(ctx)``:
- builds kwok (``sigs.k8s.io/kwok`` at ``ctx.versions.kwok``) and reads its CRDs
  (``kustomize/crd/bases``) and node Stages (``kustomize/stage/node/fast/node-initialize.yaml``,
  ``kustomize/stage/node/heartbeat-with-lease/...``) from the module cache, and applies them;
- starts the node agent (``nodeagent.py``: exec, attach, logs and port-forward through the
  kubelet's own streaming code, SPDY and WebSocket, over TLS with a serving cert from
  ``ctx.pki``) and kwok (name ``kwok`` in procs) managing the Nodes annotated
  ``kwok.x-k8s.io/node=fake`` with node leases of 40 s; the nodes advertise the agent's port as
  ``daemonEndpoints.kubeletEndpoint`` (kwok's ``--node-port``). kwok's own kubelet server still
  listens on ``127.0.0.1:ctx.port("kwok")`` but nothing points at it: kwok v0.8.0's exec loses
  exit codes (nodeagent/main.go);
- creates ``ctx.nodes.count`` Nodes ``node-0``, ``node-1``, ... with capacity and allocatable
  cpu, memory, pods and ``nvidia.com/gpu``, InternalIP 127.0.0.1;
- starts the pod runner (``python -m devtools.realstack.podrunner --run RUN``, name
  ``podrunner``), which runs the pods' commands and sets their status (see podrunner.py).

No pod Stage is applied: kwok never touches a pod here; the pod runner is the pods' kubelet
(kwok's shipped ``pod-complete`` would turn every running Job pod Succeeded at once).

kwok runs with a minimal environment (``env -i``), so nothing of the caller's environment leaks
into it.

``stop(ctx)`` stops the pod runner, ends every process of every pod of this run (they carry
``TRAINJOB_REALSTACK_RUN=<run>``), then stops kwok and the node agent. Node objects stay in the
apiserver.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import yaml

from devtools.realstack import gobuild, nodeagent, procs
from devtools.realstack.context import StackContext
from devtools.realstack.podrunner import (
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_VALUE,
    POD_IP,
    STANDARD_PATH,
    ApiError,
    KubeApi,
    kill_all,
    shims_of,
    sweep,
)

NODE_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
)
ENABLE_CRDS = (
    "Stage",
    "Exec",
    "ClusterExec",
    "Logs",
    "ClusterLogs",
    "Attach",
    "ClusterAttach",
    "PortForward",
    "ClusterPortForward",
)
KWOK_MODULE = "sigs.k8s.io/kwok"
REPO_ROOT = Path(__file__).resolve().parents[2]


def node_names(ctx: StackContext) -> list[str]:
    return [f"node-{i}" for i in range(ctx.nodes.count)]


def _crd_path(crd: dict) -> str:
    return f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"


def apply_kwok_resources(api: KubeApi, module: Path) -> None:
    """kwok's CRDs and node Stages, as the module ships them (read-only in the module cache)."""
    crds = []
    for f in sorted((module / "kustomize/crd/bases").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                api.apply(_crd_path(doc), doc)
                crds.append(doc)

    def established() -> bool:
        for crd in crds:
            got = api.get(_crd_path(crd))
            conds = {c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])}
            if conds.get("Established") != "True":
                return False
        return True

    procs.wait_for("kwok's CRDs to be established", established, timeout=60)
    for rel in NODE_STAGES:
        for doc in yaml.safe_load_all((module / rel).read_text()):
            if doc:
                api.apply(f"/apis/kwok.x-k8s.io/v1alpha1/stages/{doc['metadata']['name']}", doc)


def node_object(ctx: StackContext, name: str, port: int) -> dict:
    shape = ctx.nodes
    resources = {
        "cpu": str(shape.cpus),
        "memory": str(shape.memory),
        "pods": str(shape.pods),
        "nvidia.com/gpu": str(shape.gpus),
        "ephemeral-storage": "1Ti",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "node.kubernetes.io/instance-type": "realstack",
            },
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [
                {"type": "InternalIP", "address": POD_IP},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def ensure_nodes(api: KubeApi, ctx: StackContext, port: int) -> None:
    for name in node_names(ctx):
        obj = node_object(ctx, name, port)
        try:
            api.request("POST", "/api/v1/nodes", obj)
        except ApiError as e:
            if e.status != 409:
                raise
            # an existing node (a restart of the stack): its shape and kubelet port may differ
            patch = {
                "status": {
                    k: obj["status"][k]
                    for k in ("capacity", "allocatable", "addresses", "daemonEndpoints")
                }
            }
            api.request(
                "PATCH",
                f"/api/v1/nodes/{name}/status",
                patch,
                content_type="application/merge-patch+json",
            )


def _nodes_ready(api: KubeApi, names: list[str]) -> bool:
    for name in names:
        node = api.get(f"/api/v1/nodes/{name}")
        conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        if conds.get("Ready") != "True":
            return False
    return True


def start(ctx: StackContext) -> None:
    run = ctx.run
    build_log = run / "logs" / "build-kwok.log"
    kwok_bin = gobuild.build("kwok", ctx.versions.kwok, build_log) / "kwok"
    module = gobuild.module_dir(KWOK_MODULE, ctx.versions.kwok, build_log)
    api = KubeApi(ctx.admin_kubeconfig)
    apply_kwok_resources(api, module)

    port = ctx.port("kwok")
    names = node_names(ctx)
    pair = ctx.pki.issue(
        "kwok-kubelet",
        "system:node:kwok",
        orgs=("system:nodes",),
        dns=("localhost", *names),
        ips=("127.0.0.1",),
        server=True,
    )
    home = run / "kwok"
    home.mkdir(parents=True, exist_ok=True)
    config = home / "kwok.yaml"
    config.write_text(
        "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"
        "  enableDebuggingHandlers: true\n  enableProfilingHandler: false\n"
        # a configuration file is not defaulted (v0.8.0): 0 would be refused
        "  nodeLeaseParallelism: 4\n  nodePlayStageParallelism: 4\n  podPlayStageParallelism: 4\n"
        "  podsOnNodeSyncParallelism: 1\n"
    )
    # The nodes advertise our node agent (the kubelet's protocol code, real exit codes), not
    # kwok's own server (see nodeagent.py): kwok's node stages write --node-port into
    # daemonEndpoints, and its own server listens on --server-address.
    agent_port = nodeagent.start(ctx, pair.cert, pair.key)
    argv = [
        "env",
        "-i",
        f"PATH={STANDARD_PATH}",
        f"HOME={home}",
        str(kwok_bin),
        "--config",
        str(config),
        "--kubeconfig",
        str(ctx.admin_kubeconfig),
        "--manage-nodes-with-annotation-selector",
        f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
        "--node-ip",
        POD_IP,
        "--node-port",
        str(agent_port),
        "--server-address",
        f"127.0.0.1:{port}",
        "--tls-cert-file",
        str(pair.cert),
        "--tls-private-key-file",
        str(pair.key),
        "--node-lease-duration-seconds",
        "40",
        "--enable-crds",
        ",".join(ENABLE_CRDS),
    ]
    procs.start(run, "kwok", argv, cwd=home)
    procs.wait_for(
        "kwok's kubelet server",
        lambda: procs.https_ok(f"https://127.0.0.1:{port}/healthz", ca=ctx.pki.ca.cert),
        timeout=60,
        run=run,
        name="kwok",
    )
    ensure_nodes(api, ctx, agent_port)
    start_podrunner(ctx)
    procs.wait_for(
        "the kwok nodes to be Ready",
        lambda: _nodes_ready(api, names),
        timeout=60,
        run=run,
        name="kwok",
    )


def start_podrunner(ctx: StackContext) -> None:
    run = ctx.run
    ready = run / "podrunner" / "ready"
    ready.unlink(missing_ok=True)
    env = {
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
    }
    procs.start(
        run,
        "podrunner",
        [sys.executable, "-m", "devtools.realstack.podrunner", "--run", str(run)],
        env=env,
        cwd=REPO_ROOT,
    )
    procs.wait_for(
        "the pod runner's first sync", ready.exists, timeout=60, run=run, name="podrunner"
    )


def stop_pods(ctx: StackContext) -> int:
    """End every process of every pod of this run (containers, exec'd processes, supervisors)."""
    n = sweep(ctx.run, None)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and shims_of(ctx.run, None):
        time.sleep(0.05)
    kill_all(shims_of(ctx.run, None), signal.SIGKILL)
    return n


def stop(ctx: StackContext) -> None:
    procs.stop(ctx.run, "podrunner")
    with contextlib.suppress(OSError):
        stop_pods(ctx)
    procs.stop(ctx.run, "kwok")
    nodeagent.stop(ctx)
