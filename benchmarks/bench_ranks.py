"""Per-rank output's cost: one ``mpirun`` printing 64 MB through 4 ranks (16 MB each, lines of
100 bytes) on the local cluster's 4-pod MPI job, with per-rank tagging (engine/exec/ranks.py:
``--tag-output`` + ``--display-map`` added, the tags parsed and removed, each rank's output kept)
against the same command untagged (``ranks=False``), interleaved in one run."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.common import Context, Row, Stats, med_range, yes_no

NAME = "ranks"
MB = 1 << 20
RANKS = 4
PER_RANK = 16_000_000  # whole lines: 160000 of 100 bytes
GOAL = 1.1
# each rank prints PER_RANK bytes in lines of 100 bytes
COMMAND = f"mpirun -np {RANKS} sh -c 'yes \"$(printf %099d 0)\" | head -c {PER_RANK}'"


def measure(kubeconfig: str, reps: int) -> dict[str, list[float]]:
    from trainjob_magics.engine import connect

    session = connect("mpi-interactive", num_nodes=RANKS, config_file=kubeconfig)
    samples: dict[str, list[float]] = {"tagged": [], "untagged": []}
    try:
        session.execute(COMMAND, ranks=False)  # warm: page cache, the pods' first mpirun
        for _ in range(reps):
            for kind in ("tagged", "untagged"):
                t0 = time.perf_counter()
                result: Any = session.execute(COMMAND, ranks=kind == "tagged")
                samples[kind].append(time.perf_counter() - t0)
                assert result.returncode == 0, result.stderr[-500:]
                assert result.stdout_size == RANKS * PER_RANK, result.stdout_size
                if kind == "tagged":
                    sizes = [o.size for o in result.by_rank.values()]
                    assert sizes == [PER_RANK] * RANKS, sizes
    finally:
        session.close(timeout=60)
    return samples


def rows(samples: dict[str, list[float]]) -> list[Row]:
    tagged, untagged = Stats(samples["tagged"]), Stats(samples["untagged"])
    ratio = tagged.median / untagged.median
    return [
        Row(
            f"per-rank tagging, 64 MB through {RANKS} ranks (mpirun, n={len(tagged.samples)})",
            med_range(tagged),
            f"the same mpirun untagged: {med_range(untagged)}",
            f"{ratio:.2f}x",
            f"<= {GOAL:g}x",
            yes_no(ratio <= GOAL),
            bench=NAME,
        )
    ]


def run(ctx: Context) -> list[Row]:
    return rows(measure(ctx.kubeconfig, 1 if ctx.smoke else 5))
