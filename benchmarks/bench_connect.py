"""Connect: ``connect()`` to the first command's output, on a local cluster with zero simulated
delays (its own child process), broken down into create, watch and first exec, vs the floor:
the same three steps with the fewest round trips (plain client POST, a pods watch, a raw exec).

Create ends when the TrainJob POST is answered (seen in urllib3's request log, which names
every round trip; their count is reported too); watch ends when ``connect()`` returns; first
exec ends with the first output of ``execute("echo hi")``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import watch

from benchmarks import baselines, fixtures, k8s
from benchmarks.common import Context, Row, Stats, med_range, ms, yes_no

NAME = "connect"
RUNTIME = "torch-distributed"
PHASES = ("create", "watch", "exec", "total")


class RequestLog(logging.Handler):
    """Timestamps of the API requests urllib3 logs (one line per response)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[float, str]] = []
        self._mu = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if '"' in msg:
            with self._mu:
                self.lines.append((time.perf_counter(), msg))

    def since(self, t0: float) -> list[tuple[float, str]]:
        with self._mu:
            return [(t, m) for t, m in self.lines if t >= t0]


@contextlib.contextmanager
def request_log() -> Iterator[RequestLog]:
    """urllib3's request log, at DEBUG, collected while the block runs."""
    log = RequestLog()
    urllib3_log = logging.getLogger("urllib3.connectionpool")
    old_level = urllib3_log.level
    urllib3_log.addHandler(log)
    urllib3_log.setLevel(logging.DEBUG)
    try:
        yield log
    finally:
        urllib3_log.removeHandler(log)
        urllib3_log.setLevel(old_level)


def _ours(
    tm: Any, kubeconfig: str, namespace: str, log: RequestLog
) -> tuple[dict[str, float], int, Any]:
    first: list[float] = []
    t0 = time.perf_counter()
    sess = tm.connect(RUNTIME, namespace=namespace, config_file=kubeconfig, timeout=120)
    t_ready = time.perf_counter()
    sess.execute("echo hi", on_output=lambda *_: first.append(time.perf_counter()))
    t_out = first[0] if first else time.perf_counter()
    requests = log.since(t0)
    posted = next((t for t, m in requests if '"POST ' in m and "/trainjobs " in m), t0)
    before = [m for t, m in requests if t <= t_ready]
    phases = {
        "create": posted - t0,
        "watch": t_ready - posted,
        "exec": t_out - t_ready,
        "total": t_out - t0,
    }
    return phases, len(before), sess


def _floor(kubeconfig: str, namespace: str) -> dict[str, float]:
    """POST the TrainJob, watch its pods until one is Running, raw exec `echo hi`."""
    core = k8s.core_api(kubeconfig)
    custom = k8s.custom_api(kubeconfig)
    target = k8s.read_kubeconfig(kubeconfig)
    name = k8s.new_name("floor")
    t0 = time.perf_counter()
    custom.create_namespaced_custom_object(
        k8s.TRAINJOB_GROUP,
        k8s.TRAINJOB_VERSION,
        namespace,
        "trainjobs",
        k8s.trainjob_body(name, RUNTIME),
    )
    t_created = time.perf_counter()
    pod = ""
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_pod,
        namespace,
        label_selector=f"{k8s.JOBSET_NAME_LABEL}={name}",
        timeout_seconds=120,
    ):
        obj = event["object"]
        if obj.status and obj.status.phase == "Running":
            pod = obj.metadata.name
            w.stop()
            break
    t_ready = time.perf_counter()
    res = baselines.raw_exec(target, namespace, pod, ["sh", "-c", "echo hi"])
    t_out = time.perf_counter()
    assert res.stdout_len == 3, res
    k8s.delete_trainjob(kubeconfig, namespace, name)
    return {
        "create": t_created - t0,
        "watch": t_ready - t_created,
        "exec": t_out - t_ready,
        "total": t_out - t0,
    }


def measure(
    kubeconfig: str, namespace: str, reps: int
) -> tuple[dict[str, Stats], dict[str, Stats], list[int]]:
    """Alternate ours and the floor ``reps`` times after one warm-up round of each: the phases
    of both, and our API request count before ``connect()`` returned."""
    tm = fixtures.engine_api()
    ours: dict[str, list[float]] = {k: [] for k in PHASES}
    floor: dict[str, list[float]] = {k: [] for k in PHASES}
    counts: list[int] = []
    with request_log() as log:
        for i in range(reps + 1):  # the first round warms both up
            phases, n_requests, sess = _ours(tm, kubeconfig, namespace, log)
            sess.close(timeout=60)
            fl = _floor(kubeconfig, namespace)
            if i == 0:
                continue
            counts.append(n_requests)
            for k in PHASES:
                ours[k].append(phases[k])
                floor[k].append(fl[k])
    return (
        {k: Stats(v) for k, v in ours.items()},
        {k: Stats(v) for k, v in floor.items()},
        counts,
    )


def row(
    o: dict[str, Stats],
    f: dict[str, Stats],
    counts: list[int],
    what: str,
    limit: float = 1.5,
    bench: str = NAME,
) -> Row:
    """Ours vs the floor: total and the three phases (medians)."""
    ratio_total = o["total"].median / f["total"].median
    split = ", ".join(f"{k} {ms(o[k].median)}" for k in ("create", "watch", "exec"))
    fsplit = ", ".join(f"{k} {ms(f[k].median)}" for k in ("create", "watch", "exec"))
    return Row(
        f"{what} (n={len(counts)})",
        f"{med_range(o['total'])}: {split}; {min(counts)}-{max(counts)} API requests "
        "before connect() returns",
        "-",
        f"{ratio_total:.2f}x the floor's time",
        f"<= {limit}x the floor (median)",
        yes_no(ratio_total <= limit),
        bench=bench,
        floor=f"plain client POST + pods watch + raw exec: {med_range(f['total'])}: {fsplit}",
    )


def run(ctx: Context) -> list[Row]:
    """Alternate ours and the floor on a zero-delay cluster of its own."""
    from benchmarks.run import cluster_process

    fixtures.engine_api()
    workdir = ctx.workdir / "connect"
    kubeconfig = workdir / "kubeconfig"
    with cluster_process(Path(kubeconfig), workdir / "pods", pending_delay=0.0, start_delay=0.0):
        o, f, counts = measure(str(kubeconfig), "default", 3 if ctx.smoke else 9)
    what = "Connect: `connect()` -> first output of `echo hi`, zero simulated delays"
    return [row(o, f, counts, what)]
