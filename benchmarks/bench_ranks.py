"""Per-rank output's cost: one ``mpirun`` printing 64 MB through 4 ranks (16 MB each, lines of
100 bytes) on the local cluster's 4-pod MPI job, with per-rank tagging (engine/exec/ranks.py:
``--tag-output`` + ``--display-map`` added, the tags parsed and removed, each rank's output kept)
against the same command untagged (``ranks=False``). The floor: the same mpirun with
``--tag-output --display-map`` given by the user (``ranks=False``: nothing parsed, the tagged
bytes kept as they come), i.e. what the launcher's tagging itself costs here (its extra bytes,
about 14% with lines of 100 bytes, go through the local cluster's relay).

The machine is shared (2 cores; other sessions' tests and builds come and go), so the three run
interleaved, their order rotated each repetition (each first as often as last), and the ratios
are medians of paired ratios: each repetition's tagged run against its own untagged run, run
seconds apart, so a load that changes over minutes cancels out; the interquartile range of those
ratios is the spread. Beside the times: the client's CPU per run (the parser's share of it does
not depend on the load), the prelude's ``mpirun --version`` as the pod runs it (the local
cluster's ``mpirun`` shim answers it with Open MPI's own binary, as a real pod runs the launcher
itself; beside it ``orterun --version`` where Open MPI 4 is installed), and the load average
over the runs. bench_realstack runs the same on the real stack (a real Open MPI over real pods,
the bytes through kube-apiserver, the kubelet and containerd)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

from benchmarks.common import Context, Row, Stats, med_range, ms, yes_no

NAME = "ranks"
MB = 1 << 20
RANKS = 4
PER_RANK = 16_000_000  # whole lines: 160000 of 100 bytes
GOAL = 1.1
KINDS = ("tagged", "untagged", "floor")
# each rank prints PER_RANK bytes in lines of 100 bytes
COMMAND = f"mpirun -np {RANKS} sh -c 'yes \"$(printf %099d 0)\" | head -c {PER_RANK}'"
# the floor: mpirun tags its output itself (the options the engine adds), nothing parses it
FLOOR_COMMAND = COMMAND.replace("mpirun ", "mpirun --tag-output --display-map ", 1)
TAG_BYTES = len("[1,0]<stdout>:")  # each line's tag (ranks 0-3, job 1)
FLOOR_MIN = RANKS * PER_RANK * (100 + TAG_BYTES) // 100  # every line tagged (and the job map)
# the prelude's launcher check (exec/ranks.py RANKS_SCRIPT), and the native launcher's
VERSION_COMMAND = "command mpirun --version >/dev/null 2>&1"
NATIVE_VERSION_COMMAND = "command orterun --version >/dev/null 2>&1"


def _timed(session: Any, command: str, **kwargs: Any) -> tuple[float, float, Any]:
    """(wall seconds, this process's CPU seconds, result) of one ``session.execute``."""
    c0, t0 = time.process_time(), time.perf_counter()
    result = session.execute(command, **kwargs)
    return time.perf_counter() - t0, time.process_time() - c0, result


def measure(
    kubeconfig: str,
    reps: int,
    runtime: str = "mpi-interactive",
    namespace: str | None = None,
) -> dict[str, list[float]]:
    """Samples per kind: wall times (``KINDS``), client CPU (``cpu-KIND``), the prelude's
    ``mpirun --version`` (``version``, ``native``: each less a ``true`` run just before it),
    and the 1-minute load average before each repetition (``load``). ``runtime``: an Open MPI
    runtime of the cluster (the real stack's is ``deepspeed-distributed``)."""
    from trainjob_magics.engine import connect
    from trainjob_magics.engine.errors import ConnectionLostError

    session = connect(runtime, num_nodes=RANKS, config_file=kubeconfig, namespace=namespace)
    samples: dict[str, list[float]] = {k: [] for k in KINDS}
    samples.update({f"cpu-{k}": [] for k in KINDS}, version=[], native=[], load=[])
    samples.update(lost=[], dropped=[])
    try:
        session.execute(COMMAND, ranks=False)  # warm: page cache, the pods' first mpirun
        for i in range(reps):
            samples["load"].append(os.getloadavg()[0])
            for kind in KINDS[i % len(KINDS) :] + KINDS[: i % len(KINDS)]:
                # the floor's 73 MB stay in memory as the others' 64 MB do (not spilled)
                extra = {"max_memory_output": 128 * MB} if kind == "floor" else {}
                command = FLOOR_COMMAND if kind == "floor" else COMMAND
                for _attempt in range(3):
                    try:
                        wall, cpu, result = _timed(
                            session, command, ranks=kind == "tagged", **extra
                        )
                    except ConnectionLostError as exc:  # the output's end lost on the way
                        samples["lost"].append(1.0)
                        print(f"[bench] ranks: {kind}: {exc}", file=sys.stderr, flush=True)
                        continue
                    # Open MPI 4 drops what its stdout did not take when the ranks end
                    # (docs/multinode.md): a short run is run again, counted as lost
                    want = FLOOR_MIN if kind == "floor" else RANKS * PER_RANK
                    if result.stdout_size >= want:
                        break
                    samples["dropped"].append(float(want - result.stdout_size))
                    print(f"[bench] ranks: {kind}: mpirun dropped output", file=sys.stderr)
                else:
                    raise RuntimeError(f"3 runs of {kind} in a row lost part of their output")
                samples[kind].append(wall)
                samples[f"cpu-{kind}"].append(cpu)
                assert result.returncode == 0, result.stderr[-500:]
                if kind == "floor":  # every line tagged, the job map printed too
                    assert result.stdout_size >= FLOOR_MIN
                    continue
                assert result.stdout_size == RANKS * PER_RANK, result.stdout_size
                if kind == "tagged":
                    sizes = [o.size for o in result.by_rank.values()]
                    assert sizes == [PER_RANK] * RANKS, sizes
                del result  # its 64 MB go before the next run
            for key, command in (("version", VERSION_COMMAND), ("native", NATIVE_VERSION_COMMAND)):
                base = _timed(session, "true")[0]
                wall, _cpu, result = _timed(session, command, ranks=False)
                if result.returncode == 0:  # (no orterun: the imitation, no Open MPI here)
                    samples[key].append(wall - base)
    finally:
        session.close(timeout=60)
    return samples


def _paired(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True)]


def _spread(ratios: list[float]) -> str:
    """``1.12x (1.05x-1.20x)``: the median and interquartile range of paired ratios."""
    med = statistics.median(ratios)
    if len(ratios) < 2:
        return f"{med:.2f}x"
    q1, _q2, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return f"{med:.2f}x ({q1:.2f}x-{q3:.2f}x)"


def rows(samples: dict[str, list[float]], where: str = "", bench: str = NAME) -> list[Row]:
    tagged, untagged, floor = (Stats(samples[k]) for k in KINDS)
    ratios = _paired(tagged.samples, untagged.samples)
    ratio = statistics.median(ratios)
    return [
        Row(
            f"{where}per-rank tagging, 64 MB through {RANKS} ranks, mpirun "
            f"(n={len(tagged.samples)})",
            med_range(tagged),
            f"the same mpirun untagged: {med_range(untagged)}",
            f"{_spread(ratios)}; the floor {_spread(_paired(floor.samples, untagged.samples))}, "
            f"ours / the floor {_spread(_paired(tagged.samples, floor.samples))}",
            f"<= {GOAL:g}x",
            yes_no(ratio <= GOAL),
            bench=bench,
            floor=f"mpirun --tag-output --display-map, nothing parsed: {med_range(floor)}",
        )
    ]


def note(samples: dict[str, list[float]], shim: bool = True) -> str:
    """The run's footnote: ratio of medians, client CPU, the prelude's check, the load."""
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    cpu = ", ".join(f"{k} {ms(med[f'cpu-{k}'])}" for k in KINDS)
    parts = [
        f"Per-rank tagging: the {len(samples['tagged'])} repetitions ran tagged, untagged and "
        f"the floor interleaved, the order rotated; the row's ratios are medians of each "
        f"repetition's paired ratios (interquartile range in parentheses); ratio of the medians "
        f"{med['tagged'] / med['untagged']:.2f}x (the floor {med['floor'] / med['untagged']:.2f}x)",
        f"this process's CPU per run (median): {cpu}",
    ]
    if "version" in med:
        said = ["the local cluster's mpirun shim answers it with Open MPI's own"] if shim else []
        if "native" in med:
            said.append(f"Open MPI's own `orterun --version`: {ms(med['native'])}")
        paren = f" ({'; '.join(said)})" if said else ""
        parts.append(
            f"the prelude's `mpirun --version` in the pod: {ms(med['version'])} more than "
            f"`true`{paren}"
        )
    if samples.get("lost"):
        parts.append(
            f"{len(samples['lost'])} run(s) lost the end of their output on the way (the server "
            "ended the stream early with Success: ConnectionLostError), each run again"
        )
    if samples.get("dropped"):
        mb = [d / 1e6 for d in samples["dropped"]]
        parts.append(
            f"{len(mb)} run(s) got less than the ranks printed, exit code 0 (Open MPI 4 drops "
            f"what its stdout did not take when the ranks end, docs/multinode.md; "
            f"{min(mb):.2f}-{max(mb):.2f} MB missing), each run again"
        )
    load = samples["load"]
    parts.append(f"load average (1 min) before each repetition: {min(load):.2f}-{max(load):.2f}")
    return "; ".join(parts) + "."


def run(ctx: Context) -> list[Row]:
    samples = measure(ctx.kubeconfig, 1 if ctx.smoke else 15)
    ctx.note(note(samples))
    return rows(samples)
