"""Row 1: exec round trip of `true`: session.execute vs kubectl exec vs kubernetes.stream.stream."""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable

from benchmarks import baselines, fixtures, k8s
from benchmarks.common import NOT_AVAILABLE, Context, Row, Stats, ms, ratio, yes_no

NAME = "roundtrip"
CMD = ["true"]


def _p(st: Stats) -> str:
    return f"p50 {ms(st.median)}, p95 {ms(st.p95)}"


def run(ctx: Context) -> list[Row]:
    """Interleave the three clients, n rounds each, and compare p50/p95."""
    n = 5 if ctx.smoke else 80
    n_kubectl = 3 if ctx.smoke else 30
    pod = fixtures.base_pod(ctx)
    core = k8s.core_api(ctx.kubeconfig)
    cache = str(ctx.workdir / "kubectl-cache")

    def stock() -> None:
        r = baselines.stock_exec(core, pod, ctx.namespace, CMD)
        assert r.status and r.status["returncode"] == 0, r

    def kubectl() -> None:
        p = baselines.kubectl_exec(ctx.kubeconfig, cache, pod, ctx.namespace, CMD)
        assert p.returncode == 0, p.stderr

    target = k8s.read_kubeconfig(ctx.kubeconfig)

    def raw() -> None:
        r = baselines.raw_exec(target, ctx.namespace, pod, CMD)
        assert r.status and r.status.get("status") == "Success", r

    clients: dict[str, Callable[[], None]] = {"stock": stock, "raw": raw}
    if shutil.which("kubectl"):
        clients["kubectl"] = kubectl
    why = ""
    try:
        sess = fixtures.session(ctx)

        def ours() -> None:
            r = sess.execute(CMD)
            assert r.returncode == 0, r

        clients["ours"] = ours
    except fixtures.Unavailable as e:
        why = str(e)

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
    st = {k: Stats(v) for k, v in samples.items()}
    rows = []
    for base, label, goal, need in (
        ("kubectl", "`kubectl exec POD -- true`", ">= 10x faster (p50 and p95)", 10.0),
        ("stock", "`kubernetes.stream.stream` loop", "no slower (p50 and p95)", 1.0),
        ("raw", "raw socket reader (floor)", "reference", 0.0),
    ):
        if base not in st:
            rows.append(
                Row(
                    f"Exec round trip of `true`, vs {base}",
                    "-",
                    f"{NOT_AVAILABLE}: no kubectl on PATH",
                    "-",
                    goal,
                    "n/a",
                    bench=NAME,
                )
            )
            continue
        b = st[base]
        what = f"Exec round trip of `true`, vs {base} (n={len(b.samples)})"
        if "ours" not in st:
            rows.append(Row(what, f"{NOT_AVAILABLE}: {why}", _p(b), "-", goal, "n/a", bench=NAME))
            continue
        o = st["ours"]
        r50, r95 = b.median / o.median, b.p95 / o.p95
        rows.append(
            Row(
                what,
                _p(o),
                f"{label}: {_p(b)}",
                f"p50 {ratio(r50)}, p95 {ratio(r95)}",
                goal,
                yes_no(r50 >= need and r95 >= need) if need else "n/a",
                bench=NAME,
            )
        )
    return rows
