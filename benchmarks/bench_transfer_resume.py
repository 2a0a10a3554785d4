"""A resumed transfer against an uninterrupted one (files/resume.py): a 1 GB download (and
upload) whose exec connection a TCP proxy in front of the API server resets three times (at
25, 50 and 75 %, the fault proxy of the tests: ``tests/helpers/faultproxy.py``), interleaved
with the same transfer left alone, both through the proxy. The goal is the issue's: a resumed
transfer costs at most the time of the part it lost (the bytes received twice, at the
uninterrupted transfer's rate) plus a second per resume. The proxy counts the bytes of each
transfer, so the lost part is measured, not assumed.

On the local cluster and, with ``--realstack-dir``, on the real stack (rows in its section).
"""

from __future__ import annotations

import hashlib
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import bench_realstack, fixtures
from benchmarks.common import Context, Row, Stats, med_range, secs, yes_no

NAME = "resume"
MIB = 1 << 20
CUTS = (0.25, 0.5, 0.75)
REMOTE = "bench-resume"


def _proxy_type() -> Any:
    try:
        from tests.helpers.faultproxy import FaultProxy
    except ImportError as e:  # run from outside the repository
        raise fixtures.Unavailable(f"tests/helpers/faultproxy.py is not importable ({e})") from e
    return FaultProxy


def _cutter(proxy: Any) -> Callable[[int, int], None]:
    left = list(CUTS)

    def progress(done: int, total: int) -> None:
        if left and total and done >= left[0] * total:
            left.pop(0)
            proxy.drop_established()

    return progress


class Measured:
    """Times and bytes on the wire of each kind of transfer, and the retry lines said."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.wire: dict[str, list[int]] = {}
        self.lines: list[str] = []


def _measure(ctx: Context, kubeconfig: str, namespace: str, size: int, reps: int) -> Measured:
    tm = fixtures.engine_api()
    work = Path(tempfile.mkdtemp(prefix="bench-resume-", dir=ctx.workdir))
    proxy = _proxy_type().for_kubeconfig(Path(kubeconfig), work / "kubeconfig")
    sess = tm.connect(
        "torch-distributed",
        num_nodes=1,
        namespace=namespace,
        config_file=str(work / "kubeconfig"),
        timeout=300,
    )
    m = Measured()
    try:
        made = sess.execute(
            f"mkdir -p {REMOTE} && head -c {size} /dev/urandom > {REMOTE}/seed.bin && "
            f"sha256sum {REMOTE}/seed.bin",
            timeout=600,
        )
        if not made.ok:
            raise RuntimeError(f"could not make the file in the pod: {made.stderr.strip()}")
        digest = made.stdout.split()[0]
        local = work / "up.bin"
        sess.download(f"{REMOTE}/seed.bin", str(local), timeout=1200)  # the upload's source
        counter = iter(range(1_000_000))

        def down(cut: bool) -> tuple[float, int]:
            out = work / f"down-{next(counter)}.bin"
            before = proxy.bytes_down
            progress = _cutter(proxy) if cut else None
            t0 = time.perf_counter()
            res = sess.download(
                f"{REMOTE}/seed.bin", str(out), progress=progress, on_retry=m.lines.append
            )
            took = time.perf_counter() - t0
            assert res.verified == "sha256" and res.bytes == size, res
            if cut:  # checked outside the timing, once per kind is enough but cheap here
                assert _sha256(out) == digest
            out.unlink()
            return took, proxy.bytes_down - before

        def up(cut: bool) -> tuple[float, int]:
            before = proxy.bytes_up
            progress = _cutter(proxy) if cut else None
            t0 = time.perf_counter()
            res = sess.upload(
                str(local),
                f"{REMOTE}/up-{next(counter)}.bin",
                progress=progress,
                on_retry=m.lines.append,
            )
            took = time.perf_counter() - t0
            assert res.verified == "sha256" and res.bytes == size, res
            sess.execute(f"rm -f {REMOTE}/up-*.bin")
            return took, proxy.bytes_up - before

        cases: dict[str, Callable[[], tuple[float, int]]] = {
            "down": lambda: down(False),
            "down-resumed": lambda: down(True),
            "up": lambda: up(False),
            "up-resumed": lambda: up(True),
        }
        for fn in cases.values():  # warm up: TLS, page cache, the pod's python
            fn()
        m.lines.clear()
        for _ in range(reps):
            order = list(cases.items())
            random.shuffle(order)
            for kind, fn in order:
                took, wire = fn()
                m.times.setdefault(kind, []).append(took)
                m.wire.setdefault(kind, []).append(wire)
    finally:
        try:
            sess.execute(f"rm -rf {REMOTE}")
        finally:
            sess.close(timeout=60)
            proxy.close()
    return m


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def _rows(m: Measured, size: int, reps: int, what: str, stack: bool) -> list[Row]:
    out = []
    for kind, label in (("down", "download"), ("up", "upload")):
        plain, resumed = Stats(m.times[kind]), Stats(m.times[f"{kind}-resumed"])
        wire_plain = statistics.median(m.wire[kind])
        lost = statistics.median(m.wire[f"{kind}-resumed"]) - wire_plain  # received twice
        rate = wire_plain / plain.median
        lost_time = max(0.0, lost) / rate
        added = resumed.median - plain.median
        per_resume = (added - lost_time) / len(CUTS)
        budget = lost_time + 1.0 * len(CUTS)
        title = f"{what}{label}" if what else label.capitalize()
        out.append(
            Row(
                f"{title} of {size // MIB} MiB cut {len(CUTS)} times, resumed, "
                f"vs uninterrupted (n={reps})",
                f"{med_range(resumed, secs)}, {lost / MIB:.1f} MiB sent twice",
                f"uninterrupted: {med_range(plain, secs)} ({rate / 1e6:.0f} MB/s)",
                f"+{secs(added)}: {secs(lost_time)} for the lost part, "
                f"{secs(max(0.0, per_resume))} per resume",
                "<= the lost part's time + 1 s per resume",
                yes_no(added <= budget),
                bench=NAME,
                stack=stack,
            )
        )
    return out


def run_stack(ctx: Context, size: int, reps: int) -> list[Row]:
    """The real stack's rows, if a stack is given; else none."""
    run_dir = bench_realstack.stack_dir(ctx)
    if run_dir is None:
        return []
    info = bench_realstack.stack_info(run_dir)
    load0 = os.getloadavg()
    m = _measure(ctx, info["kubeconfig"], info["namespace"], size, reps)
    load = f"{load0[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end"
    shared = ctx.shared.setdefault(
        "realstack", {"stack": bench_realstack.describe(info), "load": load, "notes": []}
    )
    shared["notes"].append(f"Resumed transfers on the real stack: load average {load}.")
    return _rows(m, size, reps, "Real stack: ", stack=True)


def run(ctx: Context) -> list[Row]:
    size = (32 if ctx.smoke else 1024) * MIB
    reps = 2 if ctx.smoke else 5
    m = _measure(ctx, ctx.kubeconfig, ctx.namespace, size, reps)
    if m.lines:
        ctx.note(f"Resumed transfers: each resume said one line, e.g. `{m.lines[0]}`.")
    return _rows(m, size, reps, "", stack=False) + run_stack(ctx, size, reps)
