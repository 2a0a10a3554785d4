"""Row 3: 64 MB and 512 MB of stdout: ours vs the stock WSClient loop vs a raw socket reader."""

from __future__ import annotations

import time

from benchmarks import baselines, fixtures, k8s
from benchmarks.common import (
    NOT_AVAILABLE,
    Context,
    Row,
    Stats,
    med_range,
    ratio,
    secs,
    yes_no,
)

NAME = "large"
MB = 1 << 20
STOCK_BUDGET = 150.0  # seconds: stop repeating the stock client once past this


def command(n: int) -> list[str]:
    """argv that prints exactly n bytes of stdout."""
    return ["head", "-c", str(n), "/dev/zero"]


def _cell(st: Stats, n: int) -> str:
    return f"{med_range(st, secs)} ({n / MB / st.median:.0f} MB/s)"


def run(ctx: Context) -> list[Row]:
    """Time each reader on the same pod-sized output; check byte counts."""
    sizes = [1 * MB, 4 * MB] if ctx.smoke else [64 * MB, 512 * MB]
    reps = {sizes[0]: 2 if ctx.smoke else 5, sizes[1]: 2 if ctx.smoke else 3}
    pod = fixtures.base_pod(ctx)
    target = k8s.read_kubeconfig(ctx.kubeconfig)
    core = k8s.core_api(ctx.kubeconfig)
    try:
        sess = fixtures.session(ctx)
        why = ""
    except fixtures.Unavailable as e:
        sess, why = None, str(e)

    rows: list[Row] = []
    for size in sizes:
        cmd = command(size)
        label = f"{size // MB} MB"
        raw_s: list[float] = []
        our_s: list[float] = []
        for _ in range(reps[size]):  # interleave raw and ours
            t0 = time.perf_counter()
            r = baselines.raw_exec(target, ctx.namespace, pod, cmd)
            raw_s.append(time.perf_counter() - t0)
            assert r.stdout_len == size, (r.stdout_len, size)
            if sess is not None:
                t0 = time.perf_counter()
                res = sess.execute(cmd)
                our_s.append(time.perf_counter() - t0)
                assert len(res.stdout_bytes) == size and res.returncode == 0
                del res
        raw = Stats(raw_s)
        ours = Stats(our_s) if our_s else None

        if size == sizes[0]:
            stock_s: list[float] = []
            t_budget = time.perf_counter()
            for _ in range(3 if not ctx.smoke else 1):
                t0 = time.perf_counter()
                r = baselines.stock_exec(core, pod, ctx.namespace, cmd)
                stock_s.append(time.perf_counter() - t0)
                assert r.stdout_len == size, (r.stdout_len, size)
                if time.perf_counter() - t_budget > STOCK_BUDGET:
                    break
            stock = Stats(stock_s)
            what = f"Large output {label}: vs stock WSClient loop (n={len(stock_s)})"
            if ours is None:
                rows.append(
                    Row(what, f"{NOT_AVAILABLE}: {why}", _cell(stock, size), "-", ">= 50x", "n/a")
                )
            else:
                x = stock.median / ours.median
                rows.append(
                    Row(
                        what,
                        _cell(ours, size),
                        _cell(stock, size),
                        ratio(x),
                        ">= 50x",
                        yes_no(x >= 50),
                    )
                )
        what = f"Large output {label}: vs raw socket frame read (n={len(raw_s)})"
        if ours is None:
            rows.append(
                Row(what, f"{NOT_AVAILABLE}: {why}", _cell(raw, size), "-", "<= 2x raw", "n/a")
            )
        else:
            x = ours.median / raw.median
            rows.append(
                Row(
                    what,
                    _cell(ours, size),
                    _cell(raw, size),
                    f"{ratio(x)} slower",
                    "within 2x of raw",
                    yes_no(x <= 2.0),
                )
            )
    for r in rows:
        r.bench = NAME
    return rows
