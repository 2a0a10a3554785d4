"""The real stack's node: upstream kubelet and kube-proxy, containerd with runc and the CNI
bridge, CoreDNS, in a network namespace of the stack's own (``host.py``), running images built
here from Debian packages (``devtools.realstack.images``).

``start(ctx)`` claims a slot on the host (clearing what a killed run left in it), records what it
will change, builds what is missing, and starts, in order: the node's namespace and bridge, the
relay to the API server, containerd (and imports the images), the kubelet (until its node is
Ready), kube-proxy and CoreDNS. ``stop(ctx)`` stops them and gives the host back as it was.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path

from devtools.realstack import gobuild, images, procs
from devtools.realstack.context import StackContext
from devtools.realstack.realnode import containerd, dns, host, incluster, kubelet, kubeproxy, relay

__all__ = ["COMPONENTS", "lose", "prepare", "revive", "start", "stop"]

COMPONENTS = ("apiserver-relay", "containerd", "kubelet", "kube-proxy", "coredns")


def prepare(ctx: StackContext) -> None:
    """Claim the node's slot before the control plane starts (its certificate names the
    slot's relay address)."""
    slot = host.claim_slot(ctx.run)
    ctx.ports["node-slot"] = slot
    ctx.save()
    host.record(slot, ctx.run)


def build(ctx: StackContext) -> dict[str, Path]:
    log = ctx.run / "logs" / "build.log"
    v = ctx.versions
    return {
        "kubernetes": gobuild.build("kubernetes", v.kubernetes, log),
        "containerd": gobuild.build("containerd", v.containerd, log),
        "coredns": gobuild.build("coredns", v.coredns, log),
    }


def _bridge(slot: int) -> None:
    """The pods' bridge, made before the first pod so CoreDNS can bind its address (the CNI
    bridge plugin adopts it as it is)."""
    ns = host.netns(slot)
    prefix = host.POD_CIDR.split("/")[1]
    host._run("ip", "-n", ns, "link", "add", host.BRIDGE, "type", "bridge")
    host._run("ip", "-n", ns, "addr", "add", f"{host.POD_GATEWAY}/{prefix}", "dev", host.BRIDGE)
    host._run("ip", "-n", ns, "link", "set", host.BRIDGE, "up")


def start(ctx: StackContext) -> None:
    bins = build(ctx)
    slot = ctx.node_slot
    host.make_cgroup_root(host.cgroup_root(slot))
    host.make_netns(slot)
    _bridge(slot)
    relay.start(ctx)
    tars = images.build_images([ctx.versions.trainer], ctx.run / "logs" / "images.log")
    sock = containerd.start(ctx, bins["containerd"], images.PAUSE_IMAGE)
    images.import_images(bins["containerd"] / "ctr", sock, tars, ctx.run / "logs" / "images.log")
    _kubelet_api_access(ctx)
    kubelet.start(ctx, bins["kubernetes"], sock)
    measure(ctx)
    kubeproxy.start(ctx, bins["kubernetes"])
    incluster.start(ctx)
    dns.start(ctx, bins["coredns"])


def measure(ctx: StackContext) -> None:
    """The stack's node shape becomes what the kubelet reports (one node, this machine's cpu and
    memory), plus the GPU stand-in: ``nvidia.com/gpu`` advertised on the node's status as the
    Kubernetes docs advertise any extended resource (no device plugin: no GPU here; pods that
    request it are admitted and get no device). Kueue's quota is sized from it."""
    from devtools.realstack.controllers import kubectl

    shape = ctx.nodes
    if shape.gpus:
        patch = {"status": {"capacity": {"nvidia.com/gpu": str(shape.gpus)}}}
        kubectl(
            ctx,
            "patch",
            "node",
            kubelet.NODE_NAME,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(patch),
        )
        kubectl(
            ctx,
            "label",
            "node",
            kubelet.NODE_NAME,
            "--overwrite",
            "trainjob-magics.local/gpu=stand-in",
        )
    node = json.loads(kubectl(ctx, "get", "node", kubelet.NODE_NAME, "-o", "json").stdout)
    alloc = node["status"]["allocatable"]
    ctx.nodes = replace(
        shape,
        count=1,
        cpus=str(alloc["cpu"]),
        memory=str(alloc["memory"]),
        pods=int(alloc.get("pods", shape.pods)),
    )
    ctx.save()


def _kubelet_api_access(ctx: StackContext) -> None:
    """The API server's kubelet client may use the kubelet API (kubeadm's binding): the
    kubelet authorizes it with a SubjectAccessReview."""
    from devtools.realstack.controllers import kubectl

    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "kube-apiserver-kubelet-client"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:kubelet-api-admin",
        },
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": "kube-apiserver-kubelet-client",
            }
        ],
    }
    kubectl(ctx, "apply", "-f", "-", input=json.dumps(binding))


NODE_PROCESSES = ("kubelet", "kube-proxy", "coredns", "containerd")


def lose(ctx: StackContext) -> None:
    """The node's machine goes away: its kubelet, containerd, shims and every container die at
    once (SIGKILL), and its Node object is deleted, as a cloud's node controller deletes the
    Node of a vanished VM. ``revive`` brings a node of the same name back."""
    from devtools.realstack.controllers import kubectl

    for name in NODE_PROCESSES:
        procs.kill(ctx.run, name)
    host.kill_under(ctx.run / "node")
    host.kill_cgroup(host.cgroup_root(ctx.node_slot))
    kubectl(ctx, "delete", "node", kubelet.NODE_NAME, "--wait=false")


def revive(ctx: StackContext) -> None:
    """Start the node's processes again (the kubelet registers its Node anew)."""
    for name in reversed(NODE_PROCESSES):
        procs.restart(ctx.run, name)
        if name == "containerd":
            ctr = gobuild.build(
                "containerd", ctx.versions.containerd, ctx.run / "logs" / "build.log"
            )
            argv = [str(ctr / "ctr"), "--address", str(containerd.socket(ctx)), "version"]
            procs.wait_for(
                "containerd's socket",
                lambda argv=argv: procs.quiet_ok(argv),
                timeout=60,
                run=ctx.run,
                name="containerd",
            )
        if name == "kubelet":
            procs.wait_for(
                "the kubelet's node to be Ready",
                lambda: kubelet.node_ready(ctx),
                timeout=120,
                run=ctx.run,
                name="kubelet",
            )
            measure(ctx)


def stop(ctx: StackContext) -> list[str]:
    """Stop the node's processes and undo what it changed on the host; returns what could not
    be undone."""
    for name in ("coredns", "kube-proxy", "kubelet"):
        with contextlib.suppress(Exception):
            procs.stop(ctx.run, name)
    with contextlib.suppress(Exception):
        containerd.stop(ctx)
    with contextlib.suppress(Exception):
        relay.stop(ctx)
    return host.restore(ctx.node_slot)
