"""Pods reach the API server as on any cluster: ``kubernetes.default.svc`` (ClusterIP
10.96.0.1:443, ``KUBERNETES_SERVICE_HOST`` in every pod) leads to it, so a client in a pod (the
notebook's kernel under JupyterHub) works with its ServiceAccount's projected token.

The API server listens on 127.0.0.1 only, so the ``kubernetes`` Service cannot point at it: it
runs with ``--endpoint-reconciler-type=none`` and the stack writes the Service's EndpointSlice
itself (as ``dns.py`` does for ``kube-dns``), naming the relay ``HOST_IP:6443`` that the node's
own processes use. Pod traffic to it leaves the node's namespace masqueraded as ``NODE_IP``
(one iptables rule there, gone with the namespace): the host has no route to the pods and
gets none."""

from __future__ import annotations

import json
import shutil
import subprocess

from devtools.realstack.context import StackContext
from devtools.realstack.procs import StackError
from devtools.realstack.realnode import host
from devtools.realstack.realnode.relay import PORT as RELAY_PORT

SLICE_NAME = "kubernetes-realstack"


def endpoint_slice(ctx: StackContext) -> dict:
    """The ``kubernetes`` Service's endpoint: the relay on the host's end of the veth."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": SLICE_NAME,
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "realstack.trainjob-magics",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [host.host_ip(ctx.node_slot)], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": RELAY_PORT, "protocol": "TCP"}],
    }


def masquerade_rule(ctx: StackContext) -> list[str]:
    """The POSTROUTING rule (without -A/-C) that masquerades pods leaving by ``eth0``."""
    return [
        "POSTROUTING",
        "-t",
        "nat",
        "-s",
        host.POD_CIDR,
        "-o",
        "eth0",
        "-d",
        f"{host.host_ip(ctx.node_slot)}/32",
        "-j",
        "MASQUERADE",
        "-m",
        "comment",
        "--comment",
        "trainjob-magics realstack: pods to the API server relay",
    ]


def start(ctx: StackContext) -> None:
    from devtools.realstack.controllers import kubectl

    iptables = shutil.which("iptables")
    if iptables is None:
        raise StackError("the real node needs iptables: apt-get install iptables")
    rule = masquerade_rule(ctx)
    check = host.in_node(ctx.node_slot, [iptables, "-C", *rule])
    if subprocess.run(check, capture_output=True).returncode != 0:
        add = subprocess.run(
            host.in_node(ctx.node_slot, [iptables, "-A", *rule]), capture_output=True, text=True
        )
        if add.returncode != 0:
            raise StackError(f"iptables in the node's namespace failed: {add.stderr.strip()}")
    kubectl(ctx, "apply", "-f", "-", input=json.dumps(endpoint_slice(ctx)))
