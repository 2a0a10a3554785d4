"""Per-rank output's cost: one ``mpirun`` printing 64 MB through 4 ranks (16 MB each, lines of
100 bytes) on the local cluster's 4-pod MPI job, with per-rank tagging (engine/exec/ranks.py:
``--tag-output`` + ``--display-map`` added, the tags parsed and removed, each rank's output kept)
against the same command untagged (``ranks=False``), interleaved in one run. The floor: the same
mpirun with ``--tag-output --display-map`` given by the user (``ranks=False``: nothing parsed,
the tagged bytes kept as they come), i.e. what the launcher's tagging itself costs here (its
extra bytes, about 14% with lines of 100 bytes, go through the local cluster's relay)."""

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
# the floor: mpirun tags its output itself (the options the engine adds), nothing parses it
FLOOR_COMMAND = COMMAND.replace("mpirun ", "mpirun --tag-output --display-map ", 1)
TAG_BYTES = len("[1,0]<stdout>:")  # each line's tag (ranks 0-3, job 1)


def measure(kubeconfig: str, reps: int) -> dict[str, list[float]]:
    from trainjob_magics.engine import connect

    session = connect("mpi-interactive", num_nodes=RANKS, config_file=kubeconfig)
    samples: dict[str, list[float]] = {"tagged": [], "untagged": [], "floor": []}
    try:
        session.execute(COMMAND, ranks=False)  # warm: page cache, the pods' first mpirun
        for _ in range(reps):
            for kind in ("tagged", "untagged", "floor"):
                # the floor's 73 MB stay in memory as the others' 64 MB do (not spilled)
                extra = {"max_memory_output": 128 * MB} if kind == "floor" else {}
                command = FLOOR_COMMAND if kind == "floor" else COMMAND
                t0 = time.perf_counter()
                result: Any = session.execute(command, ranks=kind == "tagged", **extra)
                samples[kind].append(time.perf_counter() - t0)
                assert result.returncode == 0, result.stderr[-500:]
                if kind == "floor":  # every line tagged, the job map printed too
                    assert result.stdout_size > RANKS * PER_RANK * (100 + TAG_BYTES) // 100
                    continue
                assert result.stdout_size == RANKS * PER_RANK, result.stdout_size
                if kind == "tagged":
                    sizes = [o.size for o in result.by_rank.values()]
                    assert sizes == [PER_RANK] * RANKS, sizes
    finally:
        session.close(timeout=60)
    return samples


def rows(samples: dict[str, list[float]]) -> list[Row]:
    tagged, untagged = Stats(samples["tagged"]), Stats(samples["untagged"])
    floor = Stats(samples["floor"])
    ratio = tagged.median / untagged.median
    return [
        Row(
            f"per-rank tagging, 64 MB through {RANKS} ranks (mpirun, n={len(tagged.samples)})",
            med_range(tagged),
            f"the same mpirun untagged: {med_range(untagged)}",
            f"{ratio:.2f}x; the floor {floor.median / untagged.median:.2f}x, "
            f"ours / the floor {tagged.median / floor.median:.2f}x",
            f"<= {GOAL:g}x",
            yes_no(ratio <= GOAL),
            bench=NAME,
            floor=f"mpirun --tag-output --display-map, nothing parsed: {med_range(floor)}",
        )
    ]


def run(ctx: Context) -> list[Row]:
    return rows(measure(ctx.kubeconfig, 1 if ctx.smoke else 7))
