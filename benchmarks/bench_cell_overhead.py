"""Row 2: cell overhead of `%%trainjob true` (widgets on / text fallback) vs session.execute."""

from __future__ import annotations

import time

from benchmarks import fixtures, ipyshell
from benchmarks.common import Context, Row, Stats, med_range, ms, yes_no

NAME = "cell"
LIMIT = 0.005  # seconds added by the cell over a bare session.execute


def measure(kubeconfig: str, n: int, namespace: str = "") -> dict[str, list[float]]:
    """Interleave cell(widgets on), cell(text) and session.execute on the same session, ``n``
    rounds (``namespace``: the session's; empty: the kubeconfig context's)."""
    shell = ipyshell.make_shell(kubeconfig, "off", namespace)
    try:
        ipyshell.connect(shell)
        sess = ipyshell.current_session(shell)
        if sess is None:
            raise fixtures.Unavailable("cannot find the magics' current session")
        samples: dict[str, list[float]] = {"on": [], "off": [], "exec": []}

        def once(kind: str) -> float:
            if kind == "exec":
                t0 = time.perf_counter()
                r = sess.execute("true")
                dt = time.perf_counter() - t0
                assert r.returncode == 0
                return dt
            ipyshell.set_widgets(shell, kind)
            t0 = time.perf_counter()
            ipyshell.cell(shell, "true")
            return time.perf_counter() - t0

        for kind in samples:  # warm-up
            once(kind)
        for _ in range(n):
            for kind in samples:
                samples[kind].append(once(kind))
    finally:
        ipyshell.close(shell)
    return samples


def rows(
    samples: dict[str, list[float]],
    what: str = "Cell overhead `%%trainjob true`",
    bench: str = NAME,
    limit: float = LIMIT,
) -> list[Row]:
    """One row per view: the median of the paired differences against session.execute."""
    n = len(samples["exec"])
    base = Stats(samples["exec"])
    out = []
    for kind, label in (("on", "widgets on"), ("off", "text fallback")):
        st = Stats(samples[kind])
        # median of the per-round differences (each round runs the three back to back)
        diffs = Stats([c - e for c, e in zip(samples[kind], samples["exec"], strict=True)])
        added = diffs.median
        out.append(
            Row(
                f"{what}, {label} (n={n})",
                med_range(st),
                f"`session.execute('true')`: {med_range(base)}",
                f"{ms(added)} added (median of paired differences)",
                f"<= {limit * 1000:g} ms added",
                yes_no(added <= limit),
                bench=bench,
            )
        )
    return out


def run(ctx: Context) -> list[Row]:
    """Interleave cell(widgets on), cell(text) and session.execute on the same session."""
    return rows(measure(ctx.kubeconfig, 5 if ctx.smoke else 60))
