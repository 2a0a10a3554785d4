"""On the real stack (devtools/realstack: upstream kube-apiserver, scheduler, controller-manager,
a real node: kubelet and containerd, real JobSet/Trainer/Kueue controllers): the
exec round trip vs ``kubectl exec`` through the same apiserver, fan-out to 64 pods, and
``connect()`` to the first output vs the same API calls made by hand.

The stack is one already up (``python -m devtools.realstack --run DIR up``), named by
``--realstack-dir DIR`` or ``TRAINJOB_MAGICS_REALSTACK_DIR``; without one the row says so. It
runs in the restricted user's unqueued namespace (no Kueue admission in the way), with the
helpers of bench_roundtrip, bench_fanout and bench_connect.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchmarks import bench_connect, bench_fanout, bench_roundtrip, fixtures
from benchmarks.common import NOT_AVAILABLE, Context, Row

NAME = "realstack"
ENV = "TRAINJOB_MAGICS_REALSTACK_DIR"
SECTION = "## On the real stack"
FANOUT_CPU = "100m"  # per pod: 64 pods fit the default 2 x 32-cpu nodes many times over

# Goals, set after two measured runs at load 14-19 (README, "On the real stack"). Every client
# takes the same path (apiserver -> node agent over SPDY -> pod runner), about 15 ms for `true`
# here, 3x the local cluster's, so the kubectl goal is the local 10x scaled down: what is left
# between ours and kubectl is kubectl's own start-up (~230 ms). The stock client and the floor
# keep the local goals.
ROUNDTRIP_GOALS: tuple[tuple[str, str, str, float], ...] = (
    ("kubectl", "`kubectl exec POD -- true`", ">= 5x faster (p50 and p95)", 5.0),
    ("stock", "`kubernetes.stream.stream` loop", "no slower (p50 and p95)", 1.0),
    ("raw", "raw socket reader (floor)", "reference", 0.0),
)
# Each exec costs CPU in the apiserver, the node agent and the pod runner, all on this
# machine's 2 cores: the floor itself was only 4.6-7.9x faster than one after another, so
# ours must be 3x (not the local 5x); near the floor keeps the local cluster's 1.25x, as the
# engine is the same.
FANOUT_SEQ_NEED = 3.0
FANOUT_FLOOR_LIMIT = 1.25
CONNECT_LIMIT = 1.5


def stack_dir(ctx: Context) -> Path | None:
    """The stack's state folder: ``--realstack-dir``, else the environment, else None."""
    given = ctx.realstack_dir or os.environ.get(ENV, "")
    return Path(given) if given else None


def stack_info(run: Path) -> dict[str, Any]:
    """Kubeconfig (restricted user), namespace, versions and node shape of a ready stack, or
    raise Unavailable saying why not."""
    try:
        from devtools.realstack import fixtures as rs_fixtures
        from devtools.realstack import stack
    except ImportError as e:  # run from outside the repository
        raise fixtures.Unavailable(f"devtools.realstack not importable ({e})") from e
    status = stack.status(run)
    if not status.get("ready"):
        raise fixtures.Unavailable(
            f"no ready real stack in {run} (`python -m devtools.realstack --run {run} up`)"
        )
    return {
        "kubeconfig": status["restricted_kubeconfig"],
        "namespace": rs_fixtures.NAMESPACE,
        "versions": status["versions"],
        "nodes": status["nodes"],
    }


def describe(info: dict[str, Any]) -> str:
    """One line: versions and node shape."""
    v, n = info["versions"], info["nodes"]
    parts = [f"kube-apiserver {v['kubernetes']}", f"etcd {v['etcd']}"]
    parts.append(f"kubelet {v['kubernetes']} + containerd {v.get('containerd', '?')}")
    parts += [f"Trainer {v['trainer']}", f"JobSet {v['jobset']}"]
    if v.get("kueue"):
        parts.append(f"Kueue {v['kueue']}")
    return ", ".join(parts) + f"; {n['count']} nodes x {n['cpus']} cpu"


def skipped(why: str) -> list[Row]:
    """The one line a run without a stack gets."""
    return [Row("Real stack", f"{NOT_AVAILABLE}: {why}", "-", "-", "n/a", "n/a", bench=NAME)]


def run(ctx: Context) -> list[Row]:
    """Round trip, fan-out, connect, on the stack, each with its baseline in the same run."""
    run_dir = stack_dir(ctx)
    if run_dir is None:
        return skipped(f"no real stack given (--realstack-dir DIR or {ENV})")
    try:
        info = stack_info(run_dir)
    except fixtures.Unavailable as e:
        return skipped(str(e))
    load0 = os.getloadavg()
    sub = Context(
        cluster=None,
        kubeconfig=info["kubeconfig"],
        namespace=info["namespace"],
        smoke=ctx.smoke,
        workdir=ctx.workdir / "realstack",
        reps=ctx.reps,
    )
    sub.workdir.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    try:
        # 1. exec round trip, all four clients interleaved on one pod
        pod = fixtures.base_pod(sub)
        why, sess = "", None
        try:
            sess = fixtures.session(sub)
        except fixtures.Unavailable as e:
            why = str(e)
        st = bench_roundtrip.measure(
            sub.kubeconfig,
            sub.namespace,
            pod,
            sess,
            str(sub.workdir / "kubectl-cache"),
            n=5 if ctx.smoke else 80,
            n_kubectl=3 if ctx.smoke else 30,
        )
        rows += bench_roundtrip.rows(
            st, why, ROUNDTRIP_GOALS, what="Real stack: exec round trip of `true`", bench=NAME
        )
        fixtures.cleanup(sub)  # free the nodes for the fan-out

        # 2. fan-out: ours, one after another, and the floor, on the same pods
        fan = bench_fanout.measure(
            sub.kubeconfig,
            sub.namespace,
            [2, 4] if ctx.smoke else [8, 64],
            1 if ctx.smoke else 5,
            sub.shared.setdefault("jobs", []),
            cpu=FANOUT_CPU,
            timeout=300,
        )
        rows += bench_fanout.rows(
            fan,
            bench=NAME,
            where=" on the real stack",
            floor_limit=FANOUT_FLOOR_LIMIT,
            floor_goal=f"<= {FANOUT_FLOOR_LIMIT}x the floor at every size (as locally)",
            seq_need=FANOUT_SEQ_NEED,
        )
        starts = ", ".join(f"{n}: {s:.1f} s" for n, s in fan.startup.items())
        sub.note(
            f"Fan-out: TrainJob created -> all its pods Running took {starts} "
            f"(cpu request {FANOUT_CPU} per pod; not a goal, the stack's own speed)."
        )

        # 3. connect() to the first output vs the floor, alternating
        o, f, counts = bench_connect.measure(sub.kubeconfig, sub.namespace, 1 if ctx.smoke else 7)
        rows.append(
            bench_connect.row(
                o,
                f,
                counts,
                "Real stack: `connect()` -> first output of `echo hi`",
                limit=CONNECT_LIMIT,
                bench=NAME,
            )
        )
    finally:
        fixtures.cleanup(sub)
    load1 = os.getloadavg()
    ctx.shared["realstack"] = {
        "stack": describe(info),
        "load": f"{load0[0]:.2f} at start, {load1[0]:.2f} at end "
        f"(5 min: {load0[1]:.2f}, {load1[1]:.2f})",
        "notes": sub.notes,
    }
    return rows
