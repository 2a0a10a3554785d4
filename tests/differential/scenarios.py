"""The scenarios: each runs the engine against one cluster as a user would, and records what is
seen at fixed points (after a condition, never after a fixed sleep). A scenario never fails on
what the cluster does: it records it, and the diff decides."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from tests.differential.recorder import Recorder
from tests.differential.targets import Target
from trainjob_magics import attach, close_trainjob, connect
from trainjob_magics.engine import errors as E

KUEUE = "kueue.x-k8s.io"
WAIT = float(os.environ.get("TRAINJOB_MAGICS_DIFF_TIMEOUT", "240"))
# every scenario runs on each runtime the real stack's suite runs: torch (one node replicated
# job) and the two MPI layouts Trainer ships (launcher + nodes over Open MPI)
RUNTIMES = ("torch-distributed", "deepspeed-distributed", "mlx-distributed")


class Background:
    """A call on a thread of its own: ``.value`` or ``.error`` once done."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()

        def run() -> None:
            try:
                self.value = fn()
            except BaseException as exc:  # recorded by the scenario
                self.error = exc
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()


def wait_for(check: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    """``check()`` once truthy, or None at the deadline (the recording shows what happened)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    return None


class Run:
    """One scenario on one cluster: its names, sessions and cleanup."""

    def __init__(self, target: Target, rec: Recorder, runtime: str) -> None:
        self.t = target
        self.rec = rec
        self.runtime = runtime
        self.sessions: list[Any] = []
        self.names: list[tuple[str, str]] = []
        self.last: dict[str, Any] = {}

    def name(self, what: str, namespace: str) -> str:
        name = f"d{what}-{uuid.uuid4().hex[:6]}"
        self.rec.job(name)
        self.names.append((name, namespace))
        return name

    def on_status(self, label: str) -> Callable[[Any], None]:
        record = self.rec.on_status(label)

        def both(st: Any) -> None:
            self.last[label] = st
            record(st)

        return both

    def connect(self, label: str, namespace: str, **kw: Any) -> Any:
        kw.setdefault("timeout", WAIT)
        kw.setdefault("cpu", "1")
        name = self.name(label, namespace)
        try:
            s = connect(
                self.runtime,
                name=name,
                config_file=self.t.kubeconfig,
                namespace=namespace,
                on_status=self.on_status(label),
                **kw,
            )
        except E.TrainJobError as exc:
            self.rec.error(label, exc)
            return None
        self.rec.error(label, None)
        self.sessions.append(s)
        return s

    def big(self) -> dict[str, Any]:
        """A session of 2 pods holding 60 % of the queue's cpu quota (the stack's nodes)."""
        milli = int(float(self.t.node_cpus) * 1000) * self.t.node_count * 6 // 10 // 2
        return {"cpu": f"{milli}m", "num_nodes": 2}

    def gone(self, name: str, namespace: str, timeout: float = 120) -> bool:
        return bool(
            wait_for(
                lambda: (
                    self.t.get_json("trainjobs.trainer.kubeflow.org", name, "-n", namespace) is None
                ),
                timeout,
            )
        )

    def cleanup(self) -> None:
        for s in self.sessions:
            with contextlib.suppress(Exception):
                s.close(timeout=120)
        for name, ns in self.names:
            with contextlib.suppress(Exception):
                close_trainjob(name, ns, config_file=self.t.admin_kubeconfig, timeout=120)
        for name, ns in self.names:
            # one the engine did not create (a raw TrainJob) it refuses to close
            if self.t.get_json("trainjobs.trainer.kubeflow.org", name, "-n", ns) is not None:
                self.t.kubectl("delete", "trainjob", name, "-n", ns, "--wait=false")
        for name, ns in self.names:
            self.gone(name, ns)


def _exec(rec: Recorder, label: str, session: Any, command: str) -> None:
    try:
        r = session.execute(command, timeout=120)
        rec.put(f"exec@{label}", {"stdout": r.stdout, "stderr": r.stderr, "rc": r.returncode})
        rec.error(f"exec@{label}", None)
    except E.TrainJobError as exc:
        rec.error(f"exec@{label}", exc)


# -- the scenarios ---------------------------------------------------------------------------


def plain_connect(run: Run) -> list[str]:
    t, rec = run.t, run.rec
    ns = t.namespace
    rec.watch(ns)
    s = run.connect("plain", ns)
    if s is None:
        return [ns]
    rec.snapshot("connected", s.name, ns)
    rec.job_status("connected", s.status())
    _exec(rec, "hello", s, "echo hello; echo err >&2; exit 3")
    return [ns]


def queued_then_admitted(run: Run) -> list[str]:
    t, rec = run.t, run.rec
    ns = t.queued_namespace
    rec.watch(ns)
    s = run.connect("queued", ns, queue=t.queue)
    if s is None:
        return [ns]
    rec.snapshot("admitted", s.name, ns)
    rec.job_status("admitted", s.status())
    rec.visibility("admitted", ns, t.queue)
    _exec(rec, "hello", s, "echo queued")
    return [ns]


def waiting_for_quota(run: Run) -> list[str]:
    t, rec = run.t, run.rec
    ns = t.queued_namespace
    rec.watch(ns)
    holder = run.connect("holder", ns, queue=t.queue, **run.big())
    if holder is None:
        return [ns]
    waiter = run.name("waiter", ns)
    status = run.on_status("waiter")
    waiting = Background(
        lambda: connect(
            run.runtime,
            name=waiter,
            queue=t.queue,
            config_file=t.kubeconfig,
            namespace=ns,
            timeout=WAIT,
            on_status=status,
            **run.big(),
        )
    )

    def positioned() -> Any:
        st = run.last.get("waiter")
        q = st.queue if st is not None else None
        return q is not None and q.position_in_local_queue is not None and "quota" in q.message

    wait_for(positioned, 120)
    if run.last.get("waiter") is not None:
        rec.job_status("waiting", run.last["waiter"])
    rec.snapshot("waiting", waiter, ns)
    rec.visibility("waiting", ns, t.queue)
    close_trainjob(waiter, ns, config_file=t.kubeconfig, timeout=120)
    waiting.done.wait(60)
    rec.error("waiter", waiting.error)
    if waiting.value is not None:
        run.sessions.append(waiting.value)
    return [ns]


def preemption(run: Run) -> list[str]:
    t, rec = run.t, run.rec
    ns = t.queued_namespace
    rec.watch(ns)
    low = run.connect("low", ns, queue=t.queue, priority_class="low", **run.big())
    if low is None:
        return [ns]
    chunks: list[str] = []
    running = Background(
        lambda: low.execute(
            "echo started; sleep 600", on_output=lambda _p, _s, text: chunks.append(text)
        )
    )
    wait_for(lambda: "started" in "".join(chunks), 60)
    # a bounded wait: a cluster that does not preempt leaves the higher one queued
    high = run.connect("high", ns, queue=t.queue, priority_class="high", timeout=90, **run.big())
    running.done.wait(90)
    rec.error("running", running.error if running.done.is_set() else None)
    rec.snapshot("preempted", low.name, ns)
    rec.job_status("preempted", low.status())
    if high is not None:
        high.close(timeout=120)
    attaching = Background(
        lambda: attach(low.name, namespace=ns, config_file=t.kubeconfig, timeout=120)
    )
    attaching.done.wait(150)
    rec.error("reattach", attaching.error)
    if attaching.value is not None:
        run.sessions.append(attaching.value)
        rec.job_status("readmitted", attaching.value.status())
    rec.snapshot("readmitted", low.name, ns)
    return [ns]


def unknown_priority_class(run: Run) -> list[str]:
    t, rec = run.t, run.rec
    ns = t.queued_namespace
    s = run.connect("nopc", ns, queue=t.queue, priority_class="tjm-no-such-priority", timeout=60)
    name = run.names[-1][0]
    if s is not None:
        rec.snapshot("after", name, ns)
    else:
        rec.put("left", {"trainjob_gone": run.gone(name, ns, 30)})
    # what Kueue itself does with such a job (the engine refuses before creating one): a
    # TrainJob made directly, as another client would
    raw = run.name("rawpc", ns)
    body = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": raw,
            "namespace": ns,
            "labels": {
                "kueue.x-k8s.io/queue-name": t.queue,
                "kueue.x-k8s.io/priority-class": "tjm-no-such-priority",
            },
        },
        "spec": {"runtimeRef": {"name": run.runtime}, "trainer": {"numNodes": 1}},
    }
    t.kubectl("create", "-f", "-", stdin=json.dumps(body))

    def settled() -> bool:
        evs = t.get_json("events", "-n", ns, "--field-selector", f"involvedObject.name={raw}")
        return bool((evs or {}).get("items")) or rec.workload(raw, ns, None) is not None

    wait_for(settled, 20)
    rec.snapshot("raw", raw, ns)
    return [ns]


def multikueue_refusal(run: Run) -> list[str]:
    """A LocalQueue whose ClusterQueue has a MultiKueue AdmissionCheck: Kueue's webhook sets
    ``spec.managedBy: kueue.x-k8s.io/multikueue`` (jobframework.ApplyDefaultForManagedBy at
    v0.19.2: the MultiKueue gate, beta and on since 0.9, and an AdmissionCheck of that
    controllerName in the cache, Active or not), the engine refuses at once and deletes the
    job. No MultiKueueConfig or worker cluster is needed for the webhook's decision."""
    t, rec = run.t, run.rec
    ns = t.queued_namespace
    tag = uuid.uuid4().hex[:6]
    check, cq, lq = f"dmk-{tag}-check", f"dmk-{tag}-cq", f"dmk-{tag}-lq"
    rec.norm.name(check, "<mk-check>")
    rec.norm.name(cq, "<mk-cq>")
    rec.norm.name(lq, "<mk-lq>")
    api = json.loads(t.kubectl("get", "--raw", "/apis/kueue.x-k8s.io").stdout or "{}")
    version = api["preferredVersion"]["groupVersion"]
    objs = [
        {
            "apiVersion": version,
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {"controllerName": "kueue.x-k8s.io/multikueue"},
        },
        {
            "apiVersion": version,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                **(
                    {"admissionChecks": [check]}
                    if version.endswith("v1beta1")
                    else {"admissionChecksStrategy": {"admissionChecks": [{"name": check}]}}
                ),
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "4"},
                                    {"name": "memory", "nominalQuota": "8Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": version,
            "kind": "LocalQueue",
            "metadata": {"name": lq, "namespace": ns},
            "spec": {"clusterQueue": cq},
        },
    ]
    made: list[tuple[str, ...]] = []
    try:
        for obj in objs:
            kind = f"{obj['kind'].lower()}s.kueue.x-k8s.io"
            t.kubectl("create", "-f", "-", stdin=json.dumps(obj), check=True)
            made.append(
                (kind, obj["metadata"]["name"])
                + (("-n", ns) if obj["kind"] == "LocalQueue" else ())
            )
        # the webhook reads Kueue's caches: the LocalQueue must be known there first
        wait_for(lambda: t.get_json(f"localqueues.{KUEUE}", lq, "-n", ns) is not None, 30)
        s = run.connect("mk", ns, queue=lq, timeout=60)
        name = run.names[-1][0]
        rec.put("left", {"trainjob_gone": run.gone(name, ns, 30)})
        if s is not None:
            rec.job_status("connected", s.status())
            rec.snapshot("connected", name, ns)
    finally:
        run.cleanup()
        for made_obj in reversed(made):
            t.kubectl("delete", *made_obj, "--wait=false")
        for made_obj in made:
            wait_for(lambda made_obj=made_obj: t.get_json(*made_obj) is None, 60)
    return [ns]


def default_local_queue(run: Run) -> list[str]:
    t, rec = run.t, run.rec
    ns = t.queued_namespace
    s = run.connect("defq", ns)
    if s is None:
        return [ns]
    rec.snapshot("admitted", s.name, ns)
    rec.job_status("admitted", s.status())
    return [ns]


def queued_with_volumes(run: Run) -> list[str]:
    """A queued session whose runtime patch mounts a volume (issue 21 item 9: Kueue <= 0.19's
    full Update on unsuspend against Trainer's CEL immutability rules, kubeflow/trainer#3888)."""
    t, rec = run.t, run.rec
    ns = t.queued_namespace
    rec.watch(ns)
    s = run.connect("vol", ns, queue=t.queue, volumes=["emptydir:/scratch:64Mi"], timeout=90)
    name = run.names[-1][0]
    rec.snapshot("after", name, ns)
    if s is not None:
        rec.job_status("connected", s.status())
        _exec(rec, "ls", s, "ls -d /scratch")
    return [ns]


def max_runtime(run: Run) -> list[str]:
    """``max_runtime`` under Kueue (the max-exec-time label, Kueue deactivates) and without
    (spec.activeDeadlineSeconds, Trainer fails the job)."""
    t, rec = run.t, run.rec
    for label, ns, kw in (
        ("kueue", t.queued_namespace, {"queue": t.queue}),
        ("plain", t.namespace, {}),
    ):
        rec.watch(ns)
        s = run.connect(f"max{label}", ns, max_runtime=20, **kw)
        if s is None:
            continue
        rec.snapshot(f"{label}-connected", s.name, ns)

        def over(s: Any = s) -> bool:
            st = s.status()
            return st.state in ("Failed", "Suspended", "Deleted") or (
                st.queue is not None and st.queue.state in ("Deactivated", "Finished", "Evicted")
            )

        def settled(s: Any = s, ns: str = ns) -> bool:
            if s.status().state not in ("Failed", "Suspended", "Deleted"):
                return False
            job = t.get_json("trainjobs.trainer.kubeflow.org", s.name, "-n", ns) or {}
            # the admission's pod labels leave the job's patch once Kueue restored it
            return "kueue.x-k8s.io/workload" not in json.dumps(job.get("spec") or {})

        # Kueue deactivates the Workload, suspends the TrainJob and restores its patch in
        # separate steps: on a loaded real stack they can be seconds apart, so record once the
        # job settled.
        if wait_for(over, 90, every=1):
            wait_for(settled, 60, every=1)
        rec.job_status(f"{label}-over", s.status())
        rec.snapshot(f"{label}-over", s.name, ns)
        _exec(rec, f"{label}-after", s, "echo after")
    return [t.queued_namespace, t.namespace]


def _trainer_pod(run: Run, session: Any) -> str | None:
    return session.status().trainer_pod


def pod_disrupted(run: Run, how: str) -> list[str]:
    t, rec = run.t, run.rec
    ns = t.namespace
    rec.watch(ns)
    s = run.connect(how, ns)
    if s is None:
        return [ns]
    chunks: list[str] = []
    running = Background(
        lambda: s.execute(
            "echo started; sleep 300", on_output=lambda _p, _s, text: chunks.append(text)
        )
    )
    wait_for(lambda: "started" in "".join(chunks), 60)
    pod = _trainer_pod(run, s)
    if how == "deleted":
        t.kubectl("delete", "pod", pod or "?", "-n", ns, "--wait=false")
    else:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": ns},
        }
        proc = t.kubectl(
            "create",
            "--raw",
            f"/api/v1/namespaces/{ns}/pods/{pod}/eviction",
            "-f",
            "-",
            stdin=json.dumps(body),
        )
        rec.put("eviction", {"rc": proc.returncode, "err": proc.stderr.strip()[:200]})
    running.done.wait(120)
    rec.error("running", running.error if running.done.is_set() else None)
    rec.job_status("after", s.status())
    _exec(rec, "next", s, "echo next")
    rec.snapshot("after", s.name, ns)
    return [ns]


def unschedulable(run: Run) -> list[str]:
    t, rec = run.t, run.rec
    ns = t.namespace
    rec.watch(ns)
    too_big = str(int(float(t.node_cpus) * t.node_count * 2))
    s = run.connect("unsched", ns, cpu=too_big, num_nodes=1, timeout=45)
    name = run.names[-1][0]
    rec.put("left", {"trainjob_gone": run.gone(name, ns, 5)})
    if s is not None:
        rec.job_status("connected", s.status())
    return [ns]


_EXIT_SCRIPT = """
import sys
from trainjob_magics import connect
from trainjob_magics.magics.registry import SessionRegistry
reg = SessionRegistry()
s = connect(sys.argv[1], name=sys.argv[2], namespace=sys.argv[3], config_file=sys.argv[4],
            cpu="1", timeout=float(sys.argv[5]))
reg.add("exit", s)
print("connected", flush=True)
"""


def close_and_exit(run: Run) -> list[str]:
    """``close()``, and a process that exits with a session open (the registry's atexit, as
    at kernel exit)."""
    t, rec = run.t, run.rec
    ns = t.namespace
    rec.watch(ns)
    s = run.connect("close", ns)
    if s is not None:
        s.close(timeout=120)
        rec.put("close", {"gone": run.gone(s.name, ns)})
        rec.snapshot("closed", s.name, ns)
    name = run.name("exit", ns)
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, run.runtime, name, ns, t.kubeconfig, str(WAIT)],
        capture_output=True,
        text=True,
        timeout=WAIT + 120,
    )
    rec.put(
        "exit",
        {
            "rc": proc.returncode,
            "stdout": proc.stdout.strip(),
            "stderr": [line for line in proc.stderr.strip().splitlines() if line][-2:],
            # the registry deletes the TrainJob at exit; its pods may take a while to go
            "gone": run.gone(name, ns, 30),
        },
    )
    return [ns]


SCENARIOS: dict[str, Callable[[Run], list[str]]] = {
    "plain-connect": plain_connect,
    "queued-admitted": queued_then_admitted,
    "waiting-for-quota": waiting_for_quota,
    "preemption": preemption,
    "unknown-priority-class": unknown_priority_class,
    "default-local-queue": default_local_queue,
    "multikueue-refusal": multikueue_refusal,
    "queued-with-volumes": queued_with_volumes,
    "max-runtime": max_runtime,
    "pod-deleted": lambda run: pod_disrupted(run, "deleted"),
    "pod-evicted": lambda run: pod_disrupted(run, "evicted"),
    "unschedulable": unschedulable,
    "close-and-exit": close_and_exit,
}


def record(target: Target, scenario: str, runtime: str) -> dict[str, Any]:
    """Run ``scenario`` on ``target``: its normalised recording."""
    rec = Recorder(target, scenario)
    run = Run(target, rec, runtime)
    namespaces: list[str] = []
    try:
        namespaces = SCENARIOS[scenario](run)
    finally:
        run.cleanup()
        for name, ns in run.names:
            rec.put(f"cleanup/{rec.norm.text(name)}", {"gone": run.gone(name, ns, 5)})
    return rec.finish(namespaces or [target.namespace])
