"""CoreDNS (built from its Go module) as the cluster DNS: it runs beside the control plane on
the node's address, and the ``kube-dns`` Service in ``kube-system`` (ClusterIP
``host.CLUSTER_DNS``, the kubelet's ``clusterDNS``) points at it through an EndpointSlice, as a
Service of an out-of-cluster backend does. It answers ``cluster.local`` from the API
(Services, headless pod records: the MPI hostfile's names) and refuses every other name: no
query leaves the machine."""

from __future__ import annotations

import json
from pathlib import Path

from devtools.realstack import procs
from devtools.realstack.context import StackContext
from devtools.realstack.control_plane import kubeconfig
from devtools.realstack.controllers import kubectl
from devtools.realstack.realnode import host
from devtools.realstack.realnode.kubelet import relay_url

USER = "system:coredns"


HEALTH_PORT = 8080


def corefile(kcfg: Path, health: str) -> str:
    return f"""cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {host.POD_GATEWAY}
    errors
    health {health}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kcfg}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
.:53 {{
    bind {host.POD_GATEWAY}
    errors
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def objects() -> list[dict]:
    """RBAC for CoreDNS's user (as kubeadm's addon grants its ServiceAccount), and the
    ``kube-dns`` Service with its EndpointSlice."""
    ports = [
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
    ]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kube-dns",
                "namespace": "kube-system",
                "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
            },
            "spec": {"clusterIP": host.CLUSTER_DNS, "ports": [dict(p) for p in ports]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kube-dns-realstack",
                "namespace": "kube-system",
                "labels": {
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": "realstack.trainjob-magics",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host.POD_GATEWAY], "conditions": {"ready": True}}],
            "ports": [dict(p) for p in ports],
        },
    ]


def start(ctx: StackContext, binaries: Path) -> None:
    base = ctx.run / "node" / "coredns"
    base.mkdir(parents=True, exist_ok=True)
    pair = ctx.pki.issue("coredns", USER, client=True)
    kcfg = kubeconfig(ctx, base / "coredns.kubeconfig", USER, pair, server=relay_url(ctx))
    listing = {"apiVersion": "v1", "kind": "List", "items": objects()}
    kubectl(ctx, "apply", "-f", "-", input=json.dumps(listing))
    health = f"{host.node_ip(ctx.node_slot)}:{HEALTH_PORT}"
    (base / "Corefile").write_text(corefile(kcfg, health))
    argv = [str(binaries / "coredns"), "-conf", str(base / "Corefile")]
    procs.start(ctx.run, "coredns", host.in_node(ctx.node_slot, argv), cwd=base)
    procs.wait_for(
        "CoreDNS /health",
        lambda: procs.http_ok(f"http://{health}/health"),
        timeout=60,
        run=ctx.run,
        name="coredns",
    )


def stop(ctx: StackContext) -> None:
    procs.stop(ctx.run, "coredns")
