"""Soak: many cells, many kernel restarts, many kernel SIGKILLs, against one local cluster.

- 2,000 ``%%trainjob`` cells across 4 sessions in one real kernel: the kernel's RSS, threads
  and open fds stay flat after a warm-up;
- 20 kernel restarts, each deleting every TrainJob of the kernel within 10 s;
- 20 kernels SIGKILLed, each TrainJob ended by its idle watchdog within idle_timeout plus the
  watchdog's check interval (the jobs run down concurrently).

The figures are printed (``-s``) for the report; the bounds are generous on purpose (a loaded
2-core machine), they catch leaks and hangs, not speed.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.kernels import Kernel, load_magics_code
from tests.helpers.kube import list_trainjobs
from tests.helpers.polling import wait_until
from trainjob_magics.engine.exec.scripts import watchdog_step
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(300)
RUNTIME = "mpi-interactive"
CELLS, BATCHES, WARMUP = 2000, 10, 2  # cells in batches; the first batches warm up
ALIASES = ("a", "b", "c", "d")
IDLE = 3  # seconds: the SIGKILLed kernels' idle_timeout


@pytest.fixture
def soak_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(root_dir=tmp_path / "cluster", bookmark_interval=0.5) as c:
        yield c


def _proc(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_kib": int(fields["VmRSS"].split()[0]),
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def _jobs(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j for j in list_trainjobs(cluster.kubeconfig_path)}


def _complete(job: dict[str, Any] | None) -> bool:
    conds = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conds)


def _connect(kernel: Kernel, alias: str = "default") -> str:
    _reply, out = kernel.run_text(f"%trainjob_connect {RUNTIME} --as {alias}")
    assert f"Session '{alias}' ready" in out, out
    _reply, name = kernel.run_text(
        "from trainjob_magics.magics.extension import loaded_magics\n"
        f"print(loaded_magics(get_ipython()).host.registry.get({alias!r}).session.name)"
    )
    return name.strip()


def test_2000_cells_in_4_sessions_stay_flat(soak_cluster: LocalCluster) -> None:
    with Kernel() as kernel:
        kernel.run_text(load_magics_code(soak_cluster.kubeconfig_path, widgets="off"))
        for alias in ALIASES:
            _connect(kernel, alias)
        pid = kernel.pid()
        per_batch = CELLS // BATCHES
        loop = (
            "ip = get_ipython()\n"
            f"for i in range({per_batch}):\n"
            f"    ip.run_cell_magic('trainjob', {ALIASES!r}[i % 4], f'echo cell-{{i}}')\n"
            "print('batch-done', _trainjob.stdout.strip())\n"
        )
        samples = []
        started = time.monotonic()
        for _ in range(BATCHES):
            reply, out = kernel.run_text(loop, timeout=240)
            assert reply["status"] == "ok", out
            assert f"batch-done cell-{per_batch - 1}" in out
            assert out.count("exit code 0") == per_batch  # every cell ran and showed its footer
            samples.append(_proc(pid))
        took = time.monotonic() - started
        print(f"\nSOAK cells: {CELLS} in {took:.1f}s ({took / CELLS * 1000:.1f} ms/cell)")
        for i, s in enumerate(samples):
            print(f"SOAK after {(i + 1) * per_batch} cells: {s}")
        warm, last = samples[WARMUP - 1], samples[-1]
        steady = samples[WARMUP - 1 :]
        assert max(s["threads"] for s in steady) <= warm["threads"] + 4, samples
        assert max(s["fds"] for s in steady) <= warm["fds"] + 8, samples
        assert last["rss_kib"] - warm["rss_kib"] <= 40 * 1024, samples  # < 40 MiB over 1,600
        _reply, out = kernel.run_text("%trainjob_close --all")
        assert out.count("deleted).") == len(ALIASES), out
    assert not _jobs(soak_cluster)


def _in_threads(count: int, fn: Any) -> None:
    """Run ``fn(i)`` in ``count`` threads; their failures are raised here."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            fn(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]


def test_20_kernel_restarts_each_delete_every_job(soak_cluster: LocalCluster) -> None:
    took: list[float] = []

    def restarts(_i: int) -> None:  # four kernels, five restarts each
        with Kernel() as kernel:
            for _ in range(5):
                kernel.run_text(load_magics_code(soak_cluster.kubeconfig_path, widgets="off"))
                name = _connect(kernel)
                assert name in _jobs(soak_cluster)
                started = time.monotonic()
                kernel.restart()
                wait_until(lambda n=name: n not in _jobs(soak_cluster), timeout=10)
                took.append(time.monotonic() - started)

    _in_threads(4, restarts)
    assert len(took) == 20
    print(
        f"\nSOAK restarts: 20, job gone after max {max(took):.1f}s (median {sorted(took)[10]:.1f}s)"
    )
    assert not _jobs(soak_cluster)


def test_20_kernel_sigkills_each_job_ends_by_the_watchdog(soak_cluster: LocalCluster) -> None:
    killed: dict[str, float] = {}
    ended: dict[str, float] = {}
    stop = threading.Event()

    def watch() -> None:  # the jobs run down concurrently: note when each one completes
        while not stop.is_set():
            for name, job in _jobs(soak_cluster).items():
                if name in killed and name not in ended and _complete(job):
                    ended[name] = time.monotonic()
            time.sleep(0.1)

    def kills(_i: int) -> None:  # four at a time, five each
        for _ in range(5):
            with Kernel() as kernel:
                kernel.run_text(
                    load_magics_code(soak_cluster.kubeconfig_path, widgets="off", idle_timeout=IDLE)
                )
                name = _connect(kernel)
                pid = kernel.pid()
                os.kill(pid, signal.SIGKILL)
                killed[name] = time.monotonic()
                wait_until(lambda k=kernel: not k.km.is_alive(), timeout=10)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _in_threads(4, kills)
        wait_until(lambda: set(ended) == set(killed), timeout=IDLE + 15)
    finally:
        stop.set()
        watcher.join(5)
    assert len(killed) == 20
    delays = sorted(ended[n] - killed[n] for n in killed)
    bound = IDLE + watchdog_step(IDLE)
    print(
        f"\nSOAK sigkills: 20, idle_timeout {IDLE}s + check {watchdog_step(IDLE)}s; ended "
        f"after min {delays[0]:.1f}s, median {delays[10]:.1f}s, max {delays[-1]:.1f}s"
    )
    # + 1.5 s: the pod's exit reaching the TrainJob's status, and this poll
    assert delays[-1] <= bound + 1.5, delays
    jobs = _jobs(soak_cluster)
    assert all(_complete(jobs[n]) for n in killed)
