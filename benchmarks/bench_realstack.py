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

import functools
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_cell_overhead,
    bench_connect,
    bench_fanout,
    bench_large_output,
    bench_ranks,
    bench_roundtrip,
    bench_transfer,
    fixtures,
)
from benchmarks.common import NOT_AVAILABLE, Context, Row

NAME = "realstack"
ENV = "TRAINJOB_MAGICS_REALSTACK_DIR"
# a comma list of the parts to run (default all): e.g. ``ranks``
PARTS_ENV = "TRAINJOB_MAGICS_BENCH_REALSTACK_PARTS"
MPI_RUNTIME = "deepspeed-distributed"  # the real stack's Open MPI runtime
SECTION = "## On the real stack"
FANOUT_CPU = None  # no request: the one node has 2 cpus, and 32 pods must fit on it
FANOUT_SIZES = [16, 32]
LARGE_REPS = 3
TRANSFER_REPS = 5

# Goals, re-derived on the real node (README, "On the real stack") from a measured run at load
# 7-17. Every exec now pays the runtime's own cost: the kubelet asks containerd for the exec,
# containerd's shim runs `runc exec` (a new process joining the container's namespaces and
# cgroups), all on the same 2 cores. That is part of the floor: `true` takes ~70 ms p50 for
# every client (~15 ms with the old pod runner). kubectl adds its own start-up (~150 ms), so a
# client at the floor is only (70 + 150) / 70 ~ 3x faster than kubectl: ours must be 2.5x (the
# local 10x and the old 5x are out of any client's reach). The stock client and the floor keep
# the local goals.
ROUNDTRIP_GOALS: tuple[tuple[str, str, str, float], ...] = (
    ("kubectl", "`kubectl exec POD -- true`", ">= 2.5x faster (p50 and p95)", 2.5),
    ("stock", "`kubernetes.stream.stream` loop", "no slower (p50 and p95)", 1.0),
    ("raw", "raw socket reader (floor)", "reference", 0.0),
)
# The cell's overhead is this process's own work (magics, display), whatever the cluster: the
# local goal.
CELL_LIMIT = 0.005
# 1 GB: the server side is the bottleneck (apiserver, kubelet and containerd's stream server
# relay ~85 MB/s here, less than half the local cluster's raw stream), so the client has slack:
# ours must stay within 1.25x of the raw reader (locally 2x).
LARGE_LIMIT = 1.25
# 256 MB: as locally (no slower than kubectl cp, within 1.5x of the raw stream, which neither
# writes the file nor checks its sha256).
TRANSFER_LIMIT = 1.5
# Each exec costs CPU in the apiserver, the kubelet, containerd and runc on the 2 cores, so the
# floor itself is only ~4-5x faster than one pod after another at 16-32 pods: ours must be 3x
# (not the local 5x). Near the floor keeps the local 1.25x, as the engine is the same.
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
    nodes = f"{n['count']} node{'s' if str(n['count']) != '1' else ''}"
    return ", ".join(parts) + f"; {nodes} x {n['cpus']} cpu"


def skipped(why: str) -> list[Row]:
    """The one line a run without a stack gets."""
    return [Row("Real stack", f"{NOT_AVAILABLE}: {why}", "-", "-", "n/a", "n/a", bench=NAME)]


def run(ctx: Context) -> list[Row]:
    """Round trip, cell overhead, large output, transfer, fan-out, connect, on the stack, each
    with its baseline and floor in the same run."""
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
    loads: list[str] = []

    def part(label: str, fn: Callable[[], list[Row]]) -> None:
        """One part's rows, its 1-minute load average before and after; an error is its row."""
        l0 = os.getloadavg()[0]
        t0 = time.monotonic()
        print(f"[bench] realstack: {label} ...", file=sys.stderr, flush=True)
        try:
            got = fn()
        except fixtures.Unavailable as e:
            got = [Row(f"Real stack: {label}", f"{NOT_AVAILABLE}: {e}", "-", "-", "-", "n/a")]
        except Exception as e:
            traceback.print_exc()
            msg = f"error: {type(e).__name__}: {e}".replace("|", "/")[:200]
            got = [Row(f"Real stack: {label}", msg, "-", "-", "-", "n/a")]
        for r in got:
            r.bench = NAME
        rows.extend(got)
        took = time.monotonic() - t0
        loads.append(f"{label} {l0:.1f} -> {os.getloadavg()[0]:.1f} ({took:.0f} s)")

    chosen = {p.strip() for p in os.environ.get(PARTS_ENV, "").split(",") if p.strip()}
    # (key for PARTS_ENV, label, the part); None: free the node for the fan-out and 4 MPI pods
    parts: list[tuple[str, str, Callable[[Context, Context], list[Row]]] | None] = [
        ("roundtrip", "exec round trip", _roundtrip),
        ("cell", "cell overhead", _cell),
        ("large", "large output", _large),
        ("transfer", "transfer", _transfer),
        None,
        ("ranks", "per-rank tagging", _ranks),
        ("fanout", "fan-out", _fanout),
        ("connect", "connect", _connect),
    ]
    try:
        for item in parts:
            if item is None:
                fixtures.cleanup(sub)
            elif not chosen or item[0] in chosen:
                _key, label, fn = item
                part(label, functools.partial(fn, ctx, sub))
    finally:
        fixtures.cleanup(sub)
    load1 = os.getloadavg()
    sub.note("Load average (1 min) at each part's start -> end: " + "; ".join(loads) + ".")
    ctx.shared["realstack"] = {
        "stack": describe(info),
        "load": f"{load0[0]:.2f} at start, {load1[0]:.2f} at end "
        f"(5 min: {load0[1]:.2f}, {load1[1]:.2f})",
        "notes": sub.notes,
    }
    return rows


def _roundtrip(ctx: Context, sub: Context) -> list[Row]:
    """All four clients interleaved on one pod."""
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
    return bench_roundtrip.rows(
        st, why, ROUNDTRIP_GOALS, what="Real stack: exec round trip of `true`", bench=NAME
    )


def _cell(ctx: Context, sub: Context) -> list[Row]:
    """`%%trainjob true` through run_cell_magic vs session.execute, on a session of its own."""
    samples = bench_cell_overhead.measure(sub.kubeconfig, 5 if ctx.smoke else 60, sub.namespace)
    return bench_cell_overhead.rows(
        samples, "Real stack: cell overhead `%%trainjob true`", bench=NAME, limit=CELL_LIMIT
    )


def _large(ctx: Context, sub: Context) -> list[Row]:
    """1 GB of stdout: ours vs the raw reader, interleaved (no stock loop: quadratic)."""
    size = (4 if ctx.smoke else 1024) * bench_large_output.MB
    return bench_large_output.compare(
        sub,
        [size],
        {size: 2 if ctx.smoke else LARGE_REPS},
        stock_size=None,
        what="Real stack: large output",
        raw_limit=LARGE_LIMIT,
        bench=NAME,
    )


def _transfer(ctx: Context, sub: Context) -> list[Row]:
    """One 256 MB file up and down: ours vs kubectl cp vs the raw stream."""
    return bench_transfer.compare(
        sub,
        3 if ctx.smoke else TRANSFER_REPS,
        (4 if ctx.smoke else 256) << 20,
        None,
        what="Real stack: ",
        raw_limit=TRANSFER_LIMIT,
        bench=NAME,
    )


def _fanout(ctx: Context, sub: Context) -> list[Row]:
    """Ours, one after another and the floor, on the same pods, at each size."""
    fan = bench_fanout.measure(
        sub.kubeconfig,
        sub.namespace,
        [2, 4] if ctx.smoke else FANOUT_SIZES,
        1 if ctx.smoke else 5,
        sub.shared.setdefault("jobs", []),
        cpu=FANOUT_CPU,
        timeout=300,
    )
    starts = ", ".join(f"{n}: {s:.1f} s" for n, s in fan.startup.items())
    sub.note(
        f"Fan-out: TrainJob created -> all its pods Running took {starts} (no cpu request: "
        "the node has 2 cpus; not a goal, the node's own speed)."
    )
    return bench_fanout.rows(
        fan,
        bench=NAME,
        where=" on the real stack",
        floor_limit=FANOUT_FLOOR_LIMIT,
        floor_goal=f"<= {FANOUT_FLOOR_LIMIT}x the floor at every size (as locally)",
        seq_need=FANOUT_SEQ_NEED,
    )


def _ranks(ctx: Context, sub: Context) -> list[Row]:
    """One mpirun's 64 MB through 4 ranks over 4 pods: tagged, untagged, the launcher's own
    tagging (the floor), interleaved (bench_ranks)."""
    samples = bench_ranks.measure(
        sub.kubeconfig, 1 if ctx.smoke else 15, runtime=MPI_RUNTIME, namespace=sub.namespace
    )
    sub.note("Real stack: " + bench_ranks.note(samples, shim=False))
    return bench_ranks.rows(samples, where="Real stack: ", bench=NAME)


def _connect(ctx: Context, sub: Context) -> list[Row]:
    """connect() to the first output vs the floor, alternating."""
    o, f, counts = bench_connect.measure(sub.kubeconfig, sub.namespace, 1 if ctx.smoke else 7)
    return [
        bench_connect.row(
            o,
            f,
            counts,
            "Real stack: `connect()` -> first output of `echo hi`",
            limit=CONNECT_LIMIT,
            bench=NAME,
        )
    ]
