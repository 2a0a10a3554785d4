"""The API server as the node's processes reach it: it listens on 127.0.0.1 only (nothing of
the stack listens on the machine's own interfaces), so ``socat`` relays ``HOST_IP:PORT`` on the
host's end of the node's veth to it. TLS passes through; the API server's certificate names
the relay's address."""

from __future__ import annotations

import shutil
import socket

from devtools.realstack import procs
from devtools.realstack.context import StackContext
from devtools.realstack.realnode import host

PORT = 6443


def start(ctx: StackContext) -> None:
    socat = shutil.which("socat")
    if socat is None:
        raise procs.StackError("the real node needs socat: apt-get install socat")
    ip = host.host_ip(ctx.node_slot)
    procs.start(
        ctx.run,
        "apiserver-relay",
        [
            socat,
            f"TCP-LISTEN:{PORT},bind={ip},fork,reuseaddr",
            f"TCP:127.0.0.1:{ctx.ports['apiserver']}",
        ],
    )
    procs.wait_for(
        "the API server relay",
        lambda: _connects(ip),
        timeout=30,
        run=ctx.run,
        name="apiserver-relay",
    )


def _connects(ip: str) -> bool:
    with socket.create_connection((ip, PORT), timeout=2):
        return True


def stop(ctx: StackContext) -> None:
    procs.stop(ctx.run, "apiserver-relay")
