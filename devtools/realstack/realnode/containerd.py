"""containerd (built from its Go module) with Debian's runc and CNI plugins, as the node's CRI
runtime: its roots, socket, runc state, pod network namespaces and CNI config all in the node
folder.

Two settings this kind of machine needs (``../shared/reference.md`` section 11):
``restrict_oom_score_adj`` (root here lacks CAP_SYS_RESOURCE: without it every sandbox fails in
runc with ``failed to update /proc/self/oom_score_adj``), and a sandbox image built here
(``images.PAUSE``: nothing is pulled, there is no registry).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from devtools.realstack import procs
from devtools.realstack.context import StackContext
from devtools.realstack.realnode import host

CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
RUNC = "runc"


def node_dir(ctx: StackContext) -> Path:
    return ctx.run / "node"


def socket(ctx: StackContext) -> Path:
    """containerd's socket, in a short folder of the slot's (``host.socket_dir``): a socket's path
    must fit in 108 bytes (``sun_path``) with containerd's ``.ttrpc`` suffix, which a run folder
    under a long home or a long ``--run`` name does not. A stack started before the socket
    moved keeps it in its node folder."""
    before = node_dir(ctx) / "containerd" / "containerd.sock"
    return before if before.exists() else host.socket_dir(ctx.node_slot) / "containerd.sock"


def cni_conflist(ipam_dir: Path) -> dict:
    """A bridge on ``host.BRIDGE`` with host-local addresses from ``host.POD_CIDR``: the pods
    reach each other and, through the gateway, only the service range (no default route, no
    masquerading: nothing leaves the machine)."""
    return {
        "cniVersion": "1.0.0",
        "name": "realstack",
        "plugins": [
            {
                "type": "bridge",
                "bridge": host.BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": host.POD_CIDR, "gateway": host.POD_GATEWAY}]],
                    "routes": [{"dst": host.SERVICE_CIDR}],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def config(ctx: StackContext, sandbox_image: str) -> str:
    base = node_dir(ctx)
    root, state = base / "containerd" / "root", base / "containerd" / "state"
    runc = shutil.which(RUNC) or "/usr/sbin/runc"
    return f"""version = 3
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{socket(ctx)}"

[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "{base / "containerd" / "opt"}"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{sandbox_image}"
  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{runc}"
          Root = "{base / "runc"}"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{CNI_BIN}"]
      conf_dir = "{base / "cni" / "net.d"}"
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_tls_streaming = false
"""


def start(ctx: StackContext, binaries: Path, sandbox_image: str) -> Path:
    """Write the config and the CNI conflist, start containerd, wait for its socket."""
    base = node_dir(ctx)
    conf_dir = base / "cni" / "net.d"
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "10-realstack.conflist").write_text(
        json.dumps(cni_conflist(base / "cni" / "ipam"), indent=2)
    )
    cfg = base / "containerd" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    socket(ctx).parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(config(ctx, sandbox_image))
    path = f"{binaries}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    procs.start(
        ctx.run,
        "containerd",
        host.in_node(
            ctx.node_slot,
            [str(binaries / "containerd"), "--config", str(cfg), "--log-level", "warn"],
        ),
        env={"PATH": path},
        cwd=base,
    )
    ctr = [str(binaries / "ctr"), "--address", str(socket(ctx))]
    procs.wait_for(
        "containerd's socket",
        lambda: procs.quiet_ok([*ctr, "version"]),
        timeout=60,
        run=ctx.run,
        name="containerd",
    )
    return socket(ctx)


def stop(ctx: StackContext) -> None:
    procs.stop(ctx.run, "containerd", timeout=10)
