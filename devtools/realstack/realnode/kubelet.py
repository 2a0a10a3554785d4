"""The upstream kubelet (built from the same ``k8s.io/kubernetes`` module as the control plane)
on containerd: it registers the node, runs the pods, and serves exec, attach, logs and
port-forward to the API server itself.

Settings this kind of machine needs (``../shared/reference.md`` section 11): ``failCgroupV1:
false`` (cgroup v1 hosts), ``cgroupDriver: cgroupfs``, ``failSwapOn: false``,
``makeIPTablesUtilChains: false`` (kube-proxy owns the rules), a ``cgroupRoot`` below our own
cgroup (``host.cgroup_root``), and image garbage collection off: the images are built here and
could not be pulled back.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from devtools.realstack import gates, procs
from devtools.realstack.context import StackContext
from devtools.realstack.control_plane import kubeconfig
from devtools.realstack.realnode import host

NODE_NAME = "node-0"
PORT = 10250  # on host.NODE_IP, as on any node


def kubelet_config(ctx: StackContext, base: Path, cert: Path, key: Path, runtime: Path) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": host.node_ip(ctx.node_slot),
        "port": PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ctx.pki.ca.cert)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{runtime}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": host.cgroup_root(ctx.node_slot),
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failCgroupV1": False,
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "clusterDNS": [host.CLUSTER_DNS],
        "clusterDomain": "cluster.local",
        "resolvConf": str(_resolv_conf(base)),
        "podLogsDir": str(base / "pod-logs"),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "imageMinimumGCAge": "876000h",
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "evictionPressureTransitionPeriod": "10s",
        # emptyDir and log usage measured every 10 s (default 1 m): a pod over its limits is
        # evicted within seconds, as the tests expect of a loaded cluster's kubelet
        "volumeStatsAggPeriod": "10s",
        "maxPods": ctx.nodes.pods,
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "10s",
        "nodeStatusReportFrequency": "1m",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "protectKernelDefaults": False,
        "shutdownGracePeriod": "0s",
        "localStorageCapacityIsolation": True,
        "staticPodPath": "",
        "volumePluginDir": str(base / "volume-plugins"),
        "registerNode": True,
    }


def _resolv_conf(base: Path) -> Path:
    """What pods with ``dnsPolicy: Default`` get: nothing to reach off the machine."""
    path = base / "resolv.conf"
    path.write_text("# the real stack's node: no upstream resolver (traffic stays here)\n")
    return path


def start(ctx: StackContext, kube: Path, runtime: Path) -> None:
    """Start the kubelet and wait until its node is Ready."""
    base = ctx.run / "node" / "kubelet"
    base.mkdir(parents=True, exist_ok=True)
    (base / "pod-logs").mkdir(exist_ok=True)
    pki = ctx.pki
    ip = host.node_ip(ctx.node_slot)
    serving = pki.issue(
        "kubelet-serving", f"system:node:{NODE_NAME}", dns=(NODE_NAME,), ips=(ip,), server=True
    )
    client = pki.issue(
        "kubelet-client", f"system:node:{NODE_NAME}", orgs=("system:nodes",), client=True
    )
    kcfg = kubeconfig(
        ctx, base / "kubelet.kubeconfig", f"system:node:{NODE_NAME}", client, server=relay_url(ctx)
    )
    cfg = base / "config.yaml"
    cfg.write_text(yaml.safe_dump(kubelet_config(ctx, base, serving.cert, serving.key, runtime)))
    procs.start(
        ctx.run,
        "kubelet",
        host.in_node(
            ctx.node_slot,
            [
                str(kube / "kubelet"),
                f"--config={cfg}",
                f"--kubeconfig={kcfg}",
                f"--root-dir={base / 'root'}",
                f"--cert-dir={base / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={ip}",
                "--node-labels=node.kubernetes.io/instance-type=realstack,"
                "trainjob-magics.local/node=real",
                "--v=1",
                *gates.flags(ctx.feature_gates.get(gates.KUBELET, {})),
            ],
        ),
        cwd=base,
    )
    procs.wait_for(
        "the kubelet's node to be Ready",
        lambda: node_ready(ctx),
        timeout=120,
        run=ctx.run,
        name="kubelet",
    )


def relay_url(ctx: StackContext) -> str:
    """The API server as the node's processes reach it (``relay.py``)."""
    from devtools.realstack.realnode.relay import PORT as RELAY_PORT

    return f"https://{host.host_ip(ctx.node_slot)}:{RELAY_PORT}"


def node_ready(ctx: StackContext) -> bool:
    from devtools.realstack.controllers import kubectl

    out = kubectl(ctx, "get", "node", NODE_NAME, "-o", "json", check=False)
    if out.returncode != 0:
        return False
    node = json.loads(out.stdout)
    conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def restart(ctx: StackContext) -> None:
    """Stop and start the kubelet as it was started (its pods keep running meanwhile)."""
    procs.restart(ctx.run, "kubelet")


def stop(ctx: StackContext) -> None:
    procs.stop(ctx.run, "kubelet", timeout=10)
