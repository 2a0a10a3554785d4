"""Row 3: 64 MB and 512 MB of stdout: ours vs the stock WSClient loop vs a raw socket reader."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

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
GB = 1 << 30
STOCK_BUDGET = 150.0  # seconds: stop repeating the stock client once past this


def command(n: int) -> list[str]:
    """argv that prints exactly n bytes of stdout."""
    return ["head", "-c", str(n), "/dev/zero"]


def _checked(ctx: Context, label: str, size: int, fn: Callable[[], tuple[int, Any]]) -> float:
    """Time fn (returns (byte count, status)); retry once, with a note, on a short read."""
    for attempt in (1, 2):
        t0 = time.perf_counter()
        got, status = fn()
        dt = time.perf_counter() - t0
        if got == size:
            return dt
        msg = f"{label}: read {got} of {size} bytes (status {status})"
        if attempt == 2:
            raise AssertionError(msg)
        ctx.note(f"{msg}; repeated once")
    raise AssertionError("unreachable")


def _cell(st: Stats, n: int) -> str:
    return f"{med_range(st, secs)} ({n / MB / st.median:.0f} MB/s)"


def _raw(target: Any, ctx: Context, pod: str, cmd: list[str]) -> tuple[int, Any]:
    r = baselines.raw_exec(target, ctx.namespace, pod, cmd)
    return r.stdout_len, r.status


def _stock(core: Any, ctx: Context, pod: str, cmd: list[str]) -> tuple[int, Any]:
    r = baselines.stock_exec(core, pod, ctx.namespace, cmd)
    return r.stdout_len, r.status


def _ours(sess: Any, cmd: list[str]) -> tuple[int, Any]:
    """Run through the engine; count bytes without materializing them when it can."""
    res = sess.execute(cmd)
    size = getattr(res, "stdout_size", None)
    return (len(res.stdout_bytes) if size is None else size), res.returncode


def run(ctx: Context) -> list[Row]:
    """Time each reader on the same pod-sized output; check byte counts."""
    sizes = [1 * MB, 4 * MB] if ctx.smoke else [64 * MB, 512 * MB]
    reps = {sizes[0]: 2 if ctx.smoke else 5, sizes[1]: 2 if ctx.smoke else 3}
    return compare(ctx, sizes, reps, stock_size=sizes[0])


def compare(
    ctx: Context,
    sizes: list[int],
    reps: dict[int, int],
    stock_size: int | None,
    what: str = "Large output",
    raw_limit: float = 2.0,
    bench: str = NAME,
) -> list[Row]:
    """Ours and the raw reader, interleaved, at each size; the stock loop too at
    ``stock_size`` (None: never). Ours must stay within ``raw_limit`` x the raw reader's time."""
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
        label = f"{size // GB} GB" if size % GB == 0 else f"{size // MB} MB"
        raw_s: list[float] = []
        our_s: list[float] = []
        for _ in range(reps[size]):  # interleave raw and ours
            raw_s.append(_checked(ctx, f"raw {label}", size, partial(_raw, target, ctx, pod, cmd)))
            if sess is not None:
                our_s.append(_checked(ctx, f"ours {label}", size, partial(_ours, sess, cmd)))
        raw = Stats(raw_s)
        ours = Stats(our_s) if our_s else None

        if size == stock_size:
            stock_s: list[float] = []
            lost: list[str] = []  # the stock client drops output now and then: count, not fail
            t_budget = time.perf_counter()
            for _ in range(1 if ctx.smoke else 5):
                t0 = time.perf_counter()
                got, status = _stock(core, ctx, pod, cmd)
                if got == size:
                    stock_s.append(time.perf_counter() - t0)
                else:
                    lost.append(f"read {got} of {size} bytes (status {status})")
                if time.perf_counter() - t_budget > STOCK_BUDGET:
                    break
            if lost:
                ctx.note(f"stock {label}: lost output in {len(lost)} run(s): {'; '.join(lost)}")
            if not stock_s:  # every stock run lost output: time one more, for the record
                stock_s.append(
                    _checked(ctx, f"stock {label}", size, partial(_stock, core, ctx, pod, cmd))
                )
            stock = Stats(stock_s)
            # The stock loop is bimodal: linear while it keeps up with every frame, quadratic
            # once frames pile up inside one update() (each appends to a growing str).
            slow = [t for t in stock_s if t > 5 * stock.min]
            mode = f"; {len(slow)} of {len(stock_s)} runs quadratic (> 5x the fastest)"
            if slow and ours is not None:
                mode += f", their median {secs(statistics.median(slow))}"
                mode += f" = {ratio(statistics.median(slow) / ours.median)} ours"
            title = f"{what} {label}: vs stock WSClient loop (n={len(stock_s)})"
            if ours is None:
                rows.append(
                    Row(
                        title,
                        f"{NOT_AVAILABLE}: {why}",
                        _cell(stock, size) + mode,
                        "-",
                        ">= 50x",
                        "n/a",
                    )
                )
            else:
                x = stock.median / ours.median
                rows.append(
                    Row(
                        title,
                        _cell(ours, size),
                        _cell(stock, size) + mode,
                        f"{ratio(x)} (medians)",
                        ">= 50x",
                        yes_no(x >= 50),
                    )
                )
        title = f"{what} {label}: vs raw socket frame read (n={len(raw_s)})"
        goal = f"within {raw_limit:g}x of raw"
        if ours is None:
            rows.append(Row(title, f"{NOT_AVAILABLE}: {why}", _cell(raw, size), "-", goal, "n/a"))
        else:
            x = ours.median / raw.median
            rows.append(
                Row(
                    title,
                    _cell(ours, size),
                    _cell(raw, size),
                    f"{ratio(x)} slower",
                    goal,
                    yes_no(x <= raw_limit),
                )
            )
    for r in rows:
        r.bench = bench
    return rows
