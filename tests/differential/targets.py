"""The two clusters a differential scenario runs on: the real stack (devtools/realstack) and a
local cluster started at the stack's versions with the same fixtures (namespaces ``tjm`` and
``tjm-queued``, LocalQueues ``user-queue`` and ``default`` on ``cluster-queue``, the quota of
the stack's nodes, WorkloadPriorityClasses ``low``/``high``, preemption within the queue)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.realstack import fixtures, paths, procs, stack
from devtools.realstack.context import StackContext

REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"


@dataclass
class Target:
    """Where a scenario runs: kubeconfigs (the user's and an admin's) and the fixtures."""

    name: str  # "local" or "real"
    kubeconfig: str
    admin_kubeconfig: str
    trainer: str  # "2.2"
    kueue: str  # "0.19"
    namespace: str = fixtures.NAMESPACE
    queued_namespace: str = fixtures.QUEUED_NAMESPACE
    queue: str = fixtures.LOCAL_QUEUES[0]
    node_cpus: str = "32"
    node_count: int = 2
    extra: dict[str, Any] = field(default_factory=dict)

    def kubectl(
        self, *args: str, admin: bool = True, stdin: str | None = None, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """The real kubectl against this cluster (admin credentials unless told)."""
        home = Path(self.extra.setdefault("home", f"/tmp/tjm-diff-kubectl-{self.name}"))
        home.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                self.admin_kubeconfig if admin else self.kubeconfig,
                "--cache-dir",
                str(home / "cache"),
                *args,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "HOME": str(home)},
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc

    def get_json(self, *args: str) -> Any:
        """``kubectl get ... -o json`` as data, None when it fails (not found)."""
        proc = self.kubectl("get", *args, "-o", "json")
        return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None


def minor(version: str) -> str:
    """``v2.2.1`` -> ``2.2``; ``v0.19.2`` -> ``0.19``; ``v0.14.8`` -> ``0.14``."""
    parts = version.lstrip("v").split(".")
    return ".".join(parts[:2])


def real_stack() -> tuple[StackContext | None, str]:
    """The running stack, or None and why not."""
    run = paths.run_dir()
    if not (run / "state.json").exists():
        return None, (
            f"no real stack at {run}: start one with `python -m devtools.realstack up` (needs Go)"
            " or set TRAINJOB_MAGICS_REALSTACK_DIR"
        )
    if not stack.status(run).get("ready"):
        down = sorted(set(stack.COMPONENTS) - set(procs.running(run)) - {"jobset", "trainer"})
        return None, f"the real stack at {run} is not ready (not running: {', '.join(down) or '?'})"
    ctx = StackContext.load(run)
    if not ctx.versions.kueue:
        return None, f"the real stack at {run} runs without Kueue (the scenarios need it)"
    return ctx, ""


def real_target(ctx: StackContext) -> Target:
    env = stack.test_env(ctx)
    return Target(
        name="real",
        kubeconfig=env["TRAINJOB_MAGICS_E2E_KUBECONFIG"],
        admin_kubeconfig=env["TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG"],
        trainer=minor(ctx.versions.trainer),
        kueue=ctx.versions.kueue.lstrip("v") if ctx.versions.kueue else "",
        node_cpus=str(ctx.nodes.cpus),
        node_count=ctx.nodes.count,
    )


def local_kueue_version(real_kueue: str) -> str:
    """The local cluster's Kueue version for the stack's (``v0.19.2`` -> ``0.19.2``): the patch
    release matters (0.14.0-0.14.4 and 0.14.5+ patch different fields; 0.17.0-0.17.1 label the
    JobSet with the queue)."""
    return real_kueue.lstrip("v")
