"""Row 5: readiness detection: pod marked Running by the cluster -> connect() returns.

The moment the cluster marks the pod Running is taken in-process from the local cluster's object
store: the benchmark wraps that store instance's event emitter (no change to the cluster's code),
so both sides read the same monotonic clock. The baseline polls pods every 2 s like the Kubeflow
SDK's wait loop.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from benchmarks import fixtures, k8s
from benchmarks.common import NOT_AVAILABLE, Context, Row, Stats, med_range, ms, ratio, yes_no

NAME = "readiness"
POLL_INTERVAL = 2.0


class RunningRecorder:
    """Records time.monotonic() when each pod's status.phase first becomes Running."""

    def __init__(self, cluster: Any) -> None:
        from trainjob_magics.localcluster.core.store import Store

        self.store = _find_store(cluster, Store)
        self.times: dict[str, float] = {}
        self.cond = threading.Condition()
        orig = self.store._emit

        def _emit(type_: str, kind: Any, obj: dict[str, Any], old: Any) -> None:
            t = time.monotonic()
            orig(type_, kind, obj, old)
            if getattr(kind, "kind", "") == "Pod" and getattr(kind, "group", "x") == "":
                phase = (obj.get("status") or {}).get("phase")
                name = obj.get("metadata", {}).get("name", "")
                if phase == "Running" and name not in self.times:
                    with self.cond:
                        self.times[name] = t
                        self.cond.notify_all()

        self._orig = orig
        self.store._emit = _emit

    def running_at(self, pod: str, timeout: float = 10.0) -> float:
        """When `pod` was marked Running (waits a little for the record)."""
        with self.cond:
            self.cond.wait_for(lambda: pod in self.times, timeout)
            return self.times[pod]

    def undo(self) -> None:
        self.store._emit = self._orig


def _find_store(cluster: Any, store_type: type) -> Any:
    """The Store instance reachable from the LocalCluster object (one or two attributes deep)."""
    seen: set[int] = set()
    todo = [cluster]
    for _ in range(3):
        nxt = []
        for o in todo:
            for v in list(vars(o).values()) if hasattr(o, "__dict__") else []:
                if isinstance(v, store_type):
                    return v
                if id(v) not in seen and hasattr(v, "__dict__") and not isinstance(v, type):
                    seen.add(id(v))
                    nxt.append(v)
        todo = nxt
    raise fixtures.Unavailable("cannot find the local cluster's object store")


def _poll_until_running(kubeconfig: str, ns: str, name: str) -> tuple[float, str]:
    """The SDK-style loop: list the job's pods every 2 s until one is Running."""
    core = k8s.core_api(kubeconfig)
    while True:
        names = k8s.running_pods(core, ns, name)
        if names:
            return time.monotonic(), names[0]
        time.sleep(POLL_INTERVAL)


def run(ctx: Context) -> list[Row]:
    """n connects (ours) and n create+poll loops (baseline), each a fresh TrainJob.

    Needs the cluster in this process (for the Running timestamp): uses ctx.cluster when the
    suite runs it in-process, else starts a second, in-process LocalCluster for this row.
    """
    if ctx.cluster is not None:
        return _run(ctx, ctx.cluster, ctx.kubeconfig, ctx.namespace)
    from trainjob_magics.localcluster import LocalCluster

    with LocalCluster(
        kubeconfig_path=str(ctx.workdir / "kubeconfig-readiness"),
        root_dir=str(ctx.workdir / "pods-readiness"),
    ) as cluster:
        return _run(ctx, cluster, str(cluster.kubeconfig_path), cluster.namespace)


def _run(ctx: Context, cluster: Any, kubeconfig: str, ns: str) -> list[Row]:
    reps = 2 if ctx.smoke else 10
    reps_base = 1 if ctx.smoke else 5
    rec = RunningRecorder(cluster)
    ours: list[float] = []
    base: list[float] = []
    why = ""
    try:
        try:
            tm = fixtures.engine_api()
        except fixtures.Unavailable as e:
            tm, why = None, str(e)
        for _ in range(reps if tm else 0):
            name = k8s.new_name("rdy")
            sess = tm.connect(
                "torch-distributed",
                num_nodes=1,
                name=name,
                namespace=ns,
                config_file=kubeconfig,
                timeout=60,
            )
            t_ret = time.monotonic()
            pod = k8s.wait_pods_running(kubeconfig, ns, name)[0]
            ours.append(t_ret - rec.running_at(pod))
            sess.close(timeout=30)
        for _ in range(reps_base):
            name = k8s.new_name("rdyb")
            k8s.create_trainjob(kubeconfig, ns, name)
            t_det, pod = _poll_until_running(kubeconfig, ns, name)
            base.append(t_det - rec.running_at(pod))
            k8s.delete_trainjob(kubeconfig, ns, name)
    finally:
        rec.undo()
    b = Stats(base)
    what = (
        f"Readiness: pod marked Running -> `connect()` returns (n={reps}, baseline n={reps_base})"
    )
    bcell = f"poll pods every 2 s: {med_range(b)}, p95 {ms(b.p95)}"
    if not ours:
        return [Row(what, f"{NOT_AVAILABLE}: {why}", bcell, "-", "<= 100 ms p95", "n/a", NAME)]
    o = Stats(ours)
    return [
        Row(
            what,
            f"watch: {med_range(o)}, p95 {ms(o.p95)}",
            bcell,
            f"{ratio(b.median / o.median)} faster (median)",
            "<= 100 ms p95",
            yes_no(o.p95 <= 0.100),
            bench=NAME,
        )
    ]
