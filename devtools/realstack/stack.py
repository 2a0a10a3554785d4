"""Bring a whole stack up and down: control plane, the real node (kubelet, containerd, CNI,
kube-proxy, CoreDNS) with the provisioner, the JobSet, Trainer and Kueue controllers, and the test
fixtures (queues, priorities, namespaces, RBAC)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path

from devtools.realstack import (
    control_plane,
    controllers,
    fixtures,
    gates,
    gobuild,
    images,
    procs,
    provisioner,
    realnode,
)
from devtools.realstack import jupyterhub as hub
from devtools.realstack.context import NodeShape, StackContext
from devtools.realstack.realnode import host
from devtools.realstack.versions import Versions

# the ClusterTrainingRuntimes of Trainer's release manifests (v2.1.0-v2.3.0) that tests/realcluster
# runs every capability on: torch, and the two MPI layouts' representatives (deepspeed and mlx,
# both OpenMPI with runLauncherAsNode: the launcher is the trainer, the node pods run sshd)
RUNTIMES = ("torch-distributed", "deepspeed-distributed", "mlx-distributed")

# what `logs COMPONENT` accepts, beside the controller names procs knows
COMPONENTS = (
    *control_plane.COMPONENTS,
    *realnode.COMPONENTS,
    "provisioner",
    "jobset",
    "trainer",
    "kueue",
    *hub.COMPONENTS,
)


def build_all(versions: Versions, log: Path) -> dict[str, float]:
    """Build every component that is not cached yet; seconds per component."""
    took: dict[str, float] = {}
    plan = [
        ("kubernetes", versions.kubernetes),
        ("etcd", versions.etcd),
        ("containerd", versions.containerd),
        ("coredns", versions.coredns),
        ("jobset", versions.jobset),
        ("trainer", versions.trainer),
    ]
    if versions.kueue:
        plan.append(("kueue", versions.kueue))
    for component, version in plan:
        t = time.monotonic()
        gobuild.build(component, version, log)
        took[f"{component} {version}"] = round(time.monotonic() - t, 1)
    return took


def up(
    run: Path,
    versions: Versions,
    shape: NodeShape,
    *,
    jupyterhub: bool = False,
    feature_gates: Mapping[str, Mapping[str, bool]] | None = None,
) -> StackContext:
    """Start a stack in ``run`` (a running one with the same versions is reused), with
    JupyterHub when asked (added to a running stack that lacks it). ``feature_gates``:
    component (kube-apiserver, kubelet) -> gates beyond the version's defaults; a reused stack
    is restarted into them (``gates.apply``)."""
    versions = versions.resolved()
    check_run_path(run)
    wanted = {c: dict(g) for c, g in (feature_gates or {}).items() if g}
    if (run / "state.json").exists():
        old = StackContext.load(run)
        # the node's shape is what its kubelet measured: only the GPU stand-in is asked for
        if procs.running(run) and old.versions == versions and old.nodes.gpus == shape.gpus:
            reuse = False
            with contextlib.suppress(Exception):
                reuse = _ready(old)
            if reuse:
                if old.feature_gates != wanted:
                    _step(old, "feature gates", lambda c: gates.apply(c, _every(wanted)))
                if jupyterhub:
                    _step(old, "jupyterhub", hub.start)
                return old
        down(run)
    ctx = StackContext(run=run, versions=versions, nodes=shape, feature_gates=wanted)
    ctx.save()
    realnode.prepare(ctx)  # the node's slot: the API server's certificate names its relay
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    timings.update(
        {f"build {k}": v for k, v in build_all(versions, run / "logs" / "build.log").items()}
    )
    steps = [
        ("control plane", control_plane.start),
        ("node", realnode.start),
        ("provisioner", provisioner.start),
        ("controllers", controllers.start),
        ("fixtures", fixtures.apply),
    ]
    if jupyterhub:
        steps.append(("jupyterhub", hub.start))
    for name, step in steps:
        t = time.monotonic()
        try:
            _step(ctx, name, step)
        except BaseException:
            # a failed start stops what it started (its logs stay in RUN/logs for a look)
            down(run, keep_state=True)
            raise
        timings[name] = round(time.monotonic() - t, 1)
    timings["total"] = round(time.monotonic() - t0, 1)
    (run / "timings.json").write_text(json.dumps(timings, indent=2))
    (run / "ready").write_text(json.dumps({"versions": asdict(versions)}))
    return ctx


# the longest unix socket path the kubelet makes under its root (realnode/kubelet.py: --root-dir
# RUN/node/kubelet/root): a socket's path must fit in sun_path (108 bytes with its NUL). 1.33's
# kubelet binds pod-resources/<random digits> first, then renames it (pkg/kubelet/util/util_unix.go
# CreateListener): a matrix run folder of 22 characters made that 108 and the kubelet exited.
KUBELET_SOCKET = Path("node") / "kubelet" / "root" / "device-plugins" / "kubelet.sock"
SUN_PATH = 107


def check_run_path(run: Path) -> None:
    """A run folder too long for the node's sockets stops ``up`` before it starts anything."""
    longest = run.absolute() / KUBELET_SOCKET
    if len(str(longest)) > SUN_PATH:
        over = len(str(longest)) - SUN_PATH
        raise procs.StackError(
            f"the run folder {run} is {over} characters too long for the kubelet's sockets "
            f"({longest} must fit in {SUN_PATH}): give a shorter --run"
        )


def _every(wanted: Mapping[str, Mapping[str, bool]]) -> dict[str, Mapping[str, bool]]:
    """``wanted`` for every component whose gates can be set ({}: the version's defaults)."""
    return {c: wanted.get(c, {}) for c in gates.COMPONENTS}


def _step(ctx: StackContext, name: str, step: Callable[[StackContext], object]) -> None:
    """Run one step of ``up``; a failure names the step (the caller takes the stack down)."""
    try:
        step(ctx)
    except procs.StackError as exc:
        raise procs.StackError(f"up failed at {name}: {exc}") from exc


def hub_line(ctx: StackContext) -> str | None:
    """The line that says where the hub is and how to log in (None without a hub)."""
    return hub.status_line(ctx)


def _ready(ctx: StackContext) -> bool:
    return (ctx.run / "ready").exists() and procs.https_ok(
        f"{ctx.apiserver_url}/readyz",
        ca=ctx.pki.ca.cert,
        cert=ctx.pki.dir / "admin.crt",
        key=ctx.pki.dir / "admin.key",
    )


def down(run: Path, *, keep_state: bool = False) -> list[str]:
    """Stop every process of the stack (pods included) and remove its state."""
    stopped: list[str] = []
    mine = stack_processes(run)
    if (run / "state.json").exists():
        ctx = StackContext.load(run)
        for step in (
            hub.stop,
            controllers.stop,
            provisioner.stop,
            realnode.stop,
            control_plane.stop,
        ):
            with contextlib.suppress(Exception):
                step(ctx)
    for name in procs.running(run):  # anything a step did not know about
        procs.stop(run, name)
        stopped.append(name)
    # `down` returns when what it started is gone (a `down; up` must not race its leftovers)
    for pid in procs.wait_gone(mine | stack_processes(run), 5.0):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    left = procs.wait_gone(mine, 15.0)
    if left:
        raise procs.StackError(f"down: processes {left} of the stack in {run} survived SIGKILL")
    if not keep_state and run.exists():
        shutil.rmtree(run, ignore_errors=True)
    return stopped


def stack_processes(run: Path) -> set[int]:
    """Every live process of the stack in ``run``: its components' process groups (forked
    children included) and whatever names the run's folder (shims, the pods' sandboxes)."""
    found = host.processes_under(run)
    folder = run / "pids"
    if folder.is_dir():
        for pid_file in folder.glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text())
                found |= set(procs.group_members(pid))
                if procs.alive(pid):
                    found.add(pid)
    return found


def status(run: Path) -> dict:
    """What runs, at which versions, and where its kubeconfigs are."""
    if not (run / "state.json").exists():
        return {"running": False, "run": str(run)}
    ctx = StackContext.load(run)
    alive = procs.running(run)
    ready = False
    with contextlib.suppress(Exception):
        ready = _ready(ctx)
    return {
        "running": bool(alive),
        "ready": ready,
        "run": str(run),
        "versions": asdict(ctx.versions),
        "nodes": asdict(ctx.nodes),
        "feature_gates": {c: gates.render(g) for c, g in ctx.feature_gates.items()},
        "apiserver": ctx.apiserver_url if "apiserver" in ctx.ports else None,
        "admin_kubeconfig": str(ctx.admin_kubeconfig),
        "restricted_kubeconfig": str(ctx.restricted_kubeconfig),
        "processes": alive,
        "namespaces": {"plain": fixtures.NAMESPACE, "queued": fixtures.QUEUED_NAMESPACE},
        "queue": fixtures.LOCAL_QUEUES[0],
        "jupyterhub": hub.status_line(ctx),
    }


def test_env(ctx: StackContext) -> dict[str, str]:
    """The environment that points tests/realcluster at this stack."""
    return {
        "TRAINJOB_MAGICS_E2E_KUBECONFIG": str(ctx.restricted_kubeconfig),
        "TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG": str(ctx.admin_kubeconfig),
        "TRAINJOB_MAGICS_E2E_NAMESPACE": fixtures.NAMESPACE,
        "TRAINJOB_MAGICS_E2E_QUEUE_NAMESPACE": fixtures.QUEUED_NAMESPACE,
        "TRAINJOB_MAGICS_E2E_QUEUE": fixtures.LOCAL_QUEUES[0],
        "TRAINJOB_MAGICS_E2E_RUNTIME": RUNTIMES[0],
        "TRAINJOB_MAGICS_E2E_RUNTIMES": ",".join(RUNTIMES),
        "TRAINJOB_MAGICS_E2E_PRIORITIES": ",".join(fixtures.PRIORITIES),
        "TRAINJOB_MAGICS_REALSTACK_DIR": str(ctx.run),
        "TRAINJOB_MAGICS_E2E_MINIMAL_IMAGE": images.MINIMAL_IMAGE,
    }
