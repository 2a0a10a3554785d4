"""The kubelet API of the kwok nodes, served by our own small Go program (``nodeagent/``)
built on the kubelet's protocol code (``k8s.io/cri-streaming``), because kwok v0.8.0's exec
loses exit codes (see ``nodeagent/main.go``). kwok still keeps the Node objects, their leases
and heartbeats; the nodes' ``daemonEndpoints`` name this agent's port."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from devtools.realstack import gobuild, procs
from devtools.realstack.context import StackContext
from devtools.realstack.paths import bin_dir

SOURCE = Path(__file__).resolve().parent / "nodeagent"


def build(log: Path) -> Path:
    """The agent's binary, rebuilt when its sources change."""
    digest = hashlib.sha256()
    for path in sorted(SOURCE.iterdir()):
        if path.suffix in (".go", ".mod", ".sum"):
            digest.update(path.name.encode() + path.read_bytes())
    out = bin_dir("nodeagent", digest.hexdigest()[:12]) / "nodeagent"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        gobuild.go_run(
            ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(out), "."], SOURCE, log
        )
    return out


def start(ctx: StackContext, cert: Path, key: Path) -> int:
    """Start the agent on its own port; returns the port the nodes advertise."""
    binary = build(ctx.run / "logs" / "build.log")
    port = ctx.port("nodeagent")
    (ctx.run / "pods").mkdir(parents=True, exist_ok=True)
    procs.start(
        ctx.run,
        "nodeagent",
        [
            binary,
            f"--address=127.0.0.1:{port}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
            f"--client-ca-file={ctx.pki.ca.cert}",
            f"--pods-dir={ctx.run / 'pods'}",
        ],
    )
    admin = ctx.pki.dir / "admin.crt", ctx.pki.dir / "admin.key"
    procs.wait_for(
        "the node agent's /healthz",
        lambda: procs.https_ok(
            f"https://127.0.0.1:{port}/healthz", ca=ctx.pki.ca.cert, cert=admin[0], key=admin[1]
        ),
        timeout=30,
        run=ctx.run,
        name="nodeagent",
    )
    return port


def stop(ctx: StackContext) -> None:
    procs.stop(ctx.run, "nodeagent")


def restart(run: Path) -> int:
    """Rebuild the agent if its sources changed and restart it alone with its old arguments
    (port, certificates): pods keep running and the nodes keep advertising it."""
    spec = json.loads(procs.spec_path(run, "nodeagent").read_text())
    argv = [str(build(run / "logs" / "build.log")), *spec["argv"][1:]]
    procs.stop(run, "nodeagent")
    return procs.start(run, "nodeagent", argv, env=spec.get("env"))
