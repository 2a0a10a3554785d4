"""Row 1: exec round trip of `true`: session.execute vs kubectl exec vs kubernetes.stream.stream."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from benchmarks import baselines, fixtures, k8s
from benchmarks.common import NOT_AVAILABLE, Context, Row, Stats, ms, ratio, yes_no

NAME = "roundtrip"
CMD = ["true"]
# (baseline, label, goal, needed ratio at p50 and p95; 0: a reference, no goal)
GOALS: tuple[tuple[str, str, str, float], ...] = (
    ("kubectl", "`kubectl exec POD -- true`", ">= 10x faster (p50 and p95)", 10.0),
    ("stock", "`kubernetes.stream.stream` loop", "no slower (p50 and p95)", 1.0),
    ("raw", "raw socket reader (floor)", "reference", 0.0),
)


def _p(st: Stats) -> str:
    return f"p50 {ms(st.median)}, p95 {ms(st.p95)}"


def measure(
    kubeconfig: str,
    namespace: str,
    pod: str,
    sess: Any,
    cache_dir: str,
    n: int,
    n_kubectl: int,
) -> dict[str, Stats]:
    """Interleave ours (``sess``, if not None), kubectl exec, the stock loop and the raw reader
    on ``pod``, in a shuffled order each round; kubectl only in the first ``n_kubectl`` rounds."""
    core = k8s.core_api(kubeconfig)
    target = k8s.read_kubeconfig(kubeconfig)

    def stock() -> None:
        r = baselines.stock_exec(core, pod, namespace, CMD)
        assert r.status and r.status["returncode"] == 0, r

    def kubectl() -> None:
        p = baselines.kubectl_exec(kubeconfig, cache_dir, pod, namespace, CMD)
        assert p.returncode == 0, p.stderr

    def raw() -> None:
        r = baselines.raw_exec(target, namespace, pod, CMD)
        assert r.status and r.status.get("status") == "Success", r

    clients: dict[str, Callable[[], None]] = {"stock": stock, "raw": raw}
    if baselines.kubectl_available():
        clients["kubectl"] = kubectl
    if sess is not None:

        def ours() -> None:
            r = sess.execute(CMD)
            assert r.returncode == 0, r

        clients["ours"] = ours
    samples: dict[str, list[float]] = {k: [] for k in clients}
    for fn in clients.values():  # warm up: TLS session, kubectl discovery cache
        fn()
    rng = random.Random(7)
    for i in range(n):
        order = [k for k in clients if not (k == "kubectl" and i >= n_kubectl)]
        rng.shuffle(order)  # no client always runs right after kubectl's process exit
        for k in order:
            t0 = time.perf_counter()
            clients[k]()
            samples[k].append(time.perf_counter() - t0)
    return {k: Stats(v) for k, v in samples.items()}


def rows(
    st: dict[str, Stats],
    why: str,
    goals: tuple[tuple[str, str, str, float], ...] = GOALS,
    what: str = "Exec round trip of `true`",
    bench: str = NAME,
) -> list[Row]:
    """One row per baseline: ours vs it at p50 and p95."""
    out = []
    for base, label, goal, need in goals:
        if base not in st:
            out.append(
                Row(
                    f"{what}, vs {base}",
                    "-",
                    f"{NOT_AVAILABLE}: no {baselines.kubectl()} on PATH",
                    "-",
                    goal,
                    "n/a",
                    bench=bench,
                )
            )
            continue
        b = st[base]
        title = f"{what}, vs {base} (n={len(b.samples)})"
        if "ours" not in st:
            out.append(Row(title, f"{NOT_AVAILABLE}: {why}", _p(b), "-", goal, "n/a", bench=bench))
            continue
        o = st["ours"]
        r50, r95 = b.median / o.median, b.p95 / o.p95
        out.append(
            Row(
                title,
                _p(o),
                f"{label}: {_p(b)}",
                f"p50 {ratio(r50)}, p95 {ratio(r95)}",
                goal,
                yes_no(r50 >= need and r95 >= need) if need else "n/a",
                bench=bench,
            )
        )
    return out


def run(ctx: Context) -> list[Row]:
    """Interleave the three clients, n rounds each, and compare p50/p95."""
    pod = fixtures.base_pod(ctx)
    why, sess = "", None
    try:
        sess = fixtures.session(ctx)
    except fixtures.Unavailable as e:
        why = str(e)
    st = measure(
        ctx.kubeconfig,
        ctx.namespace,
        pod,
        sess,
        str(ctx.workdir / "kubectl-cache"),
        n=5 if ctx.smoke else 80,
        n_kubectl=3 if ctx.smoke else 30,
    )
    return rows(st, why)
