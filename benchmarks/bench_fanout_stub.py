"""Fan-out to 8..256 pods against a stub exec server that spawns nothing (`stub_exec --answer`):
the engine's own cost per pod, its peak threads and memory, vs a raw reader per pod.

Each size runs in a fresh child process (`--child`), so that its peak RSS (VmHWM) and thread
count are its own; the stub runs in another process, as an API server would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from benchmarks.common import Context, Row, Stats, med_range, ms, secs, vm_hwm_kb, yes_no

NAME = "fanout-stub"
CMD = ["sh", "-c", "sleep 0.1; hostname"]
COMMAND_TIME = 0.1  # what the stub waits before it answers: the command's run time


def _rss_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@contextmanager
def stub(answer: float) -> Any:
    """The stub exec server in a child process; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.stub_exec", "--answer", str(answer)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = (proc.stdout.readline() if proc.stdout else "").strip()
        if not url.startswith("http"):
            raise RuntimeError(f"stub exec server did not start (exit {proc.poll()})")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def child(url: str, n: int, reps: int) -> dict[str, Any]:
    """In a fresh process: ``session.execute(CMD, pods=refs)`` on ``n`` stub pods, ``reps``
    times, interleaved with the raw floor; peak threads and RSS while ours runs."""
    from kubernetes.client import ApiClient, Configuration

    from benchmarks import baselines
    from benchmarks.k8s import KubeTarget
    from trainjob_magics.engine.result import PodRef
    from trainjob_magics.engine.session import TrainJobSession

    cfg = Configuration(host=url, api_key={"authorization": "stub"})
    cfg.api_key_prefix = {"authorization": "Bearer"}
    sess = TrainJobSession("stub", "default", "stub", ApiClient(cfg), "stub-0", "node")
    refs = [PodRef(f"stub-{i}", "node", i, "Running", "node") for i in range(n)]
    target = KubeTarget(server=url, token="stub", ca_pem=None)
    base_threads = threading.active_count()
    peak = {"threads": 0}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.002):
            peak["threads"] = max(peak["threads"], threading.active_count() - 1)

    def ours() -> float:
        t0 = time.perf_counter()
        res = sess.execute(CMD, pods=refs)
        took = time.perf_counter() - t0
        assert len(res) == n and res.ok, res.errors
        return took

    def floor(pool: ThreadPoolExecutor) -> float:
        t0 = time.perf_counter()
        got = list(pool.map(lambda r: baselines.raw_exec(target, "default", r.name, CMD), refs))
        took = time.perf_counter() - t0
        assert all(g.status and g.status.get("status") == "Success" for g in got)
        return took

    rss0 = _rss_kb()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    ours()  # warm-up
    our_s = [ours() for _ in range(reps)]
    sampling.set()
    sampler.join()
    hwm = vm_hwm_kb()
    with ThreadPoolExecutor(n) as pool:
        floor(pool)
        floor_s = [floor(pool) for _ in range(reps)]
    return {
        "ours": our_s,
        "floor": floor_s,
        "peak_threads": peak["threads"] - base_threads,
        "rss_kb": rss0,
        "peak_rss_kb": hwm,
    }


def _run_child(url: str, n: int, reps: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_fanout_stub", "--child", url, str(n), str(reps)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"fan-out child for {n} pods failed: {proc.stderr[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(ctx: Context) -> list[Row]:
    """One child per size, against one stub; rows: time growth and per-pod cost, resources."""
    from trainjob_magics.engine.exec.pool import MAX_PARALLEL

    sizes = [2, 8] if ctx.smoke else [8, 64, 256]
    reps = 2 if ctx.smoke else 5
    with stub(COMMAND_TIME) as url:
        got = {n: _run_child(url, n, reps) for n in sizes}
    ours = {n: Stats(got[n]["ours"]) for n in sizes}
    floor = {n: Stats(got[n]["floor"]) for n in sizes}
    lo, hi = sizes[0], sizes[-1]
    growth = ours[hi].median / ours[lo].median
    per_pod = (ours[hi].median - ours[lo].median) / (hi - lo)
    floor_per_pod = (floor[hi].median - floor[lo].median) / (hi - lo)
    what = f"Fan-out `{' '.join(CMD[2:])}` to {'/'.join(map(str, sizes))} stub pods (n={reps})"
    times = ", ".join(f"{n}: {med_range(ours[n], secs)}" for n in sizes)
    floors = ", ".join(f"{n}: {secs(floor[n].median)}" for n in sizes)
    threads = ", ".join(f"{n}: {got[n]['peak_threads']}" for n in sizes)
    mem = ", ".join(
        f"{n}: +{(got[n]['peak_rss_kb'] - got[n]['rss_kb']) / 1024:.0f} MB" for n in sizes
    )
    bound_ok = all(got[n]["peak_threads"] <= min(n, MAX_PARALLEL) + 2 for n in sizes)
    stub_note = f"stub answers after {COMMAND_TIME:g} s, spawns nothing"
    return [
        Row(
            f"{what}: time",
            times,
            f"{lo} pods: {secs(ours[lo].median)}",
            f"{hi}/{lo} pods: {growth:.2f}x; engine cost {ms(per_pod)} per pod",
            f"{hi} pods <= 2x the time of {lo} ({stub_note})",
            yes_no(growth <= 2.0),
            bench=NAME,
            floor=f"raw reader, one thread per pod: {floors} ({ms(floor_per_pod)} per pod)",
        ),
        Row(
            f"{what}: peak threads and memory",
            f"threads above idle: {threads}; peak RSS above idle: {mem}",
            "-",
            "-",
            f"threads <= the pool bound ({MAX_PARALLEL}) + 2",
            yes_no(bound_ok),
            bench=NAME,
        ),
    ]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        raise SystemExit("usage: python -m benchmarks.bench_fanout_stub --child URL N REPS")
