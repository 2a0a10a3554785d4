"""kube-proxy (same module and version as the control plane) in iptables mode: it turns
Services into the host's ``KUBE-*`` iptables chains, so the pods reach the cluster DNS at its
ClusterIP. Conntrack limits and localhost NodePorts are off so that it writes no sysctl it need
not; ``host.restore`` runs ``kube-proxy --cleanup`` on the way down."""

from __future__ import annotations

from pathlib import Path

import yaml

from devtools.realstack import procs
from devtools.realstack.context import StackContext
from devtools.realstack.control_plane import kubeconfig
from devtools.realstack.realnode import host
from devtools.realstack.realnode.kubelet import NODE_NAME, relay_url


def proxy_config(ctx: StackContext, kcfg: Path) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kcfg)},
        "mode": "iptables",
        "clusterCIDR": host.POD_CIDR,
        "hostnameOverride": NODE_NAME,
        "bindAddress": host.node_ip(ctx.node_slot),
        "healthzBindAddress": f"{host.node_ip(ctx.node_slot)}:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [f"{host.node_ip(ctx.node_slot)}/32"],
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
    }


def start(ctx: StackContext, kube: Path) -> None:
    base = ctx.run / "node" / "kube-proxy"
    base.mkdir(parents=True, exist_ok=True)
    pair = ctx.pki.issue("kube-proxy", "system:kube-proxy", client=True)
    kcfg = kubeconfig(
        ctx, base / "kube-proxy.kubeconfig", "system:kube-proxy", pair, server=relay_url(ctx)
    )
    cfg = base / "config.yaml"
    cfg.write_text(yaml.safe_dump(proxy_config(ctx, kcfg)))
    argv = [str(kube / "kube-proxy"), f"--config={cfg}", "--v=1"]
    procs.start(ctx.run, "kube-proxy", host.in_node(ctx.node_slot, argv), cwd=base)
    url = f"http://{host.node_ip(ctx.node_slot)}:10256/healthz"
    procs.wait_for(
        "kube-proxy /healthz",
        lambda: procs.http_ok(url),
        timeout=60,
        run=ctx.run,
        name="kube-proxy",
    )


def stop(ctx: StackContext) -> None:
    procs.stop(ctx.run, "kube-proxy")
