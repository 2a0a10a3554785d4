"""Python cells: `%%trainjob --python` `1 + 1` (a persistent interpreter) vs the same through
`%%trainjob python3 -c ...` (a fresh interpreter each time), and vs `%%trainjob true` (the floor).
"""

from __future__ import annotations

import random
import time

from benchmarks import fixtures, ipyshell
from benchmarks.common import Context, Row, Stats, med_range, ratio, yes_no

NAME = "python"
CELLS = {
    "python": ("--python", "1 + 1"),
    "fresh": ("", "python3 -c 'print(1 + 1)'"),
    "true": ("", "true"),
}


def run(ctx: Context) -> list[Row]:
    """Interleave the three cells on one session (text output), in shuffled order."""
    n = 5 if ctx.smoke else 40
    shell = ipyshell.make_shell(ctx.kubeconfig, "off")
    ipyshell.connect(shell)
    if ipyshell.current_session(shell) is None:
        raise fixtures.Unavailable("cannot find the magics' current session")
    samples: dict[str, list[float]] = {k: [] for k in CELLS}

    def once(kind: str) -> float:
        line, body = CELLS[kind]
        t0 = time.perf_counter()
        ipyshell.cell(shell, body, line)
        return time.perf_counter() - t0

    try:
        for kind in CELLS:  # warm up: the interpreter starts in the first python cell
            once(kind)
        rng = random.Random(11)
        for _ in range(n):
            order = list(CELLS)
            rng.shuffle(order)
            for kind in order:
                samples[kind].append(once(kind))
    finally:
        ipyshell.close(shell)
    st = {k: Stats(v) for k, v in samples.items()}
    ours = st["python"]
    fresh = st["fresh"].median / ours.median
    floor = ours.median / st["true"].median
    return [
        Row(
            f"Python cell `1 + 1` round trip vs a fresh interpreter (n={n})",
            med_range(ours),
            f"`%%trainjob python3 -c 'print(1 + 1)'`: {med_range(st['fresh'])}",
            f"{ratio(fresh)} faster",
            ">= 3x faster",
            yes_no(fresh >= 3.0),
            bench=NAME,
        ),
        Row(
            f"Python cell `1 + 1` round trip vs `%%trainjob true` (floor, n={n})",
            med_range(ours),
            f"`%%trainjob true`: {med_range(st['true'])}",
            f"{ratio(floor)} the floor",
            "<= 2x the floor",
            yes_no(floor <= 2.0),
            bench=NAME,
        ),
    ]
