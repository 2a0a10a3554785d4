"""Kueue against a real cluster: queued, admitted, waiting with a position, preempted by a
higher-priority session, readmitted, the ``default`` LocalQueue, an unknown priority class.

Runs when ``TRAINJOB_MAGICS_E2E_KUBECONFIG`` names a kubeconfig and ``TRAINJOB_MAGICS_E2E_QUEUE``
a LocalQueue. Optional:

- ``TRAINJOB_MAGICS_E2E_QUEUE_NAMESPACE``: the namespace of the queue (default
  ``TRAINJOB_MAGICS_E2E_NAMESPACE``, then the kubeconfig's).
- ``TRAINJOB_MAGICS_E2E_PRIORITIES``: two WorkloadPriorityClasses, lower first (default
  ``low,high``).
- ``TRAINJOB_MAGICS_E2E_QUEUE_CPU``: the cpu of each pod of a session that holds more than half
  of the ClusterQueue's cpu quota (default: read from the ClusterQueue, 60 % of it over
  ``TRAINJOB_MAGICS_E2E_QUEUE_NODES`` pods, default 2).
- ``TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG``: reads the ClusterQueue and WorkloadPriorityClasses
  (cluster-scoped) when the suite's user may not; default the suite's kubeconfig. With it (or
  a suite user allowed to), missing priority classes and the ``default`` LocalQueue are created
  for the test and deleted after it.

``TRAINJOB_MAGICS_E2E_RUNTIMES`` (a comma list) runs every test on each runtime, as
test_e2e_real.py does. The real stack (``python -m devtools.realstack env``) sets all of them.
Each test deletes what it created and checks that none of its TrainJobs is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.realcluster.settings import (
    ADMIN,
    KUBECONFIG,
    NEEDS_CLUSTER,
    QUEUE,
    RUNTIMES,
    WAIT,
)
from trainjob_magics import attach, close_trainjob, connect, list_trainjobs
from trainjob_magics.engine import errors as E

NAMESPACE = (
    os.environ.get("TRAINJOB_MAGICS_E2E_QUEUE_NAMESPACE")
    or os.environ.get("TRAINJOB_MAGICS_E2E_NAMESPACE")
    or None
)
PRIORITIES = [
    p.strip() for p in os.environ.get("TRAINJOB_MAGICS_E2E_PRIORITIES", "low,high").split(",")
]
QUEUE_CPU = os.environ.get("TRAINJOB_MAGICS_E2E_QUEUE_CPU") or None
QUEUE_NODES = int(os.environ.get("TRAINJOB_MAGICS_E2E_QUEUE_NODES", "2"))

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.timeout(1200),
    NEEDS_CLUSTER,
    pytest.mark.skipif(not QUEUE, reason="set TRAINJOB_MAGICS_E2E_QUEUE to a Kueue LocalQueue"),
]


# -- the cluster, through kubectl (a test peer) ---------------------------------------------


def kubectl(*args: str, config: str = KUBECONFIG, stdin: str | None = None) -> Any:
    """kubectl's JSON output, or None when it fails (forbidden, not found)."""
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", config, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else proc.stdout


def namespace() -> str:
    if NAMESPACE:
        return NAMESPACE
    out = kubectl("config", "view", "--minify", "-o", "jsonpath={..namespace}")
    return (out or "").strip() or "default"


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(every)


def cluster_queue_of(local_queue: str) -> str | None:
    lq = kubectl("get", "localqueues.kueue.x-k8s.io", local_queue, "-n", namespace(), "-o", "json")
    return ((lq or {}).get("spec") or {}).get("clusterQueue")


def milli(quantity: str) -> int:
    q = str(quantity)
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def big_cpu() -> str:
    """The cpu per pod of a session (QUEUE_NODES pods) that holds more than half the quota."""
    if QUEUE_CPU:
        return QUEUE_CPU
    cq_name = cluster_queue_of(QUEUE or "")
    cq = kubectl("get", "clusterqueues.kueue.x-k8s.io", cq_name or "", "-o", "json", config=ADMIN)
    if not cq:
        pytest.skip(
            f"cannot read ClusterQueue {cq_name} (of LocalQueue {QUEUE}): set "
            "TRAINJOB_MAGICS_E2E_QUEUE_CPU (cpu per pod of a session holding more than half its "
            "cpu quota) or TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG"
        )
    quota = sum(
        milli(r["nominalQuota"])
        for group in cq["spec"].get("resourceGroups", [])
        for flavor in group.get("flavors", [])
        for r in flavor.get("resources", [])
        if r["name"] == "cpu"
    )
    return f"{quota * 6 // 10 // QUEUE_NODES}m"


# -- sessions the test made, and its cleanup ------------------------------------------------


class Made:
    """Every TrainJob name a test asked for; all deleted, and checked gone, at its end."""

    def __init__(self, runtime: str) -> None:
        self.runtime = runtime
        self.names: list[str] = []
        self.sessions: list[Any] = []
        self.objects: list[tuple[str, ...]] = []  # kubectl delete args, for created fixtures

    def name(self, what: str) -> str:
        name = f"kq-{what}-{uuid.uuid4().hex[:6]}"
        self.names.append(name)
        return name

    def connect(self, what: str, **kw: Any) -> Any:
        kw.setdefault("queue", QUEUE)
        kw.setdefault("timeout", WAIT)
        s = connect(
            self.runtime,
            name=self.name(what),
            config_file=KUBECONFIG,
            namespace=NAMESPACE,
            **kw,
        )
        self.sessions.append(s)
        return s

    def cleanup(self) -> None:
        for s in self.sessions:
            with contextlib.suppress(E.TrainJobError):
                s.close(timeout=120)
        ns = namespace()
        for name in self.names:
            with contextlib.suppress(E.TrainJobError):  # not found: closed already
                close_trainjob(name, ns, config_file=KUBECONFIG, timeout=120)
        wait_for(
            "the test's TrainJobs to be gone",
            lambda: (
                not {j.name for j in list_trainjobs(ns, config_file=KUBECONFIG)} & set(self.names)
            ),
            timeout=180,
        )
        for args in self.objects:
            kubectl("delete", "--ignore-not-found", *args, config=ADMIN)


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def made(runtime: str) -> Iterator[Made]:
    m = Made(runtime)
    try:
        yield m
    finally:
        m.cleanup()


def ensure(made: Made, kind: str, name: str, body: dict, ns: str | None = None) -> None:
    """``kind``/``name`` exists, or is created (with the admin kubeconfig) for this test."""
    where = ["-n", ns] if ns else []
    if kubectl("get", kind, name, *where, "-o", "json", config=ADMIN):
        return
    if kubectl("create", "-f", "-", "-o", "json", config=ADMIN, stdin=json.dumps(body)) is None:
        pytest.skip(
            f"the cluster has no {kind} {name}"
            + (f" in namespace {ns}" if ns else "")
            + " and TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG may not create it"
        )
    made.objects.append((kind, name, *where))


def kueue_version() -> str:
    group = kubectl("get", "--raw", "/apis/kueue.x-k8s.io") or {}
    return (group.get("preferredVersion") or {}).get("groupVersion") or "kueue.x-k8s.io/v1beta1"


def ensure_priorities(made: Made) -> tuple[str, str]:
    if len(PRIORITIES) != 2 or not all(PRIORITIES):
        pytest.skip("TRAINJOB_MAGICS_E2E_PRIORITIES must name two priority classes, lower first")
    for value, name in ((100, PRIORITIES[0]), (1000, PRIORITIES[1])):
        body = {
            "apiVersion": kueue_version(),
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        ensure(made, "workloadpriorityclasses.kueue.x-k8s.io", name, body)
    return PRIORITIES[0], PRIORITIES[1]


def pending_positions(local_queue: str) -> dict[str, tuple[int, int]]:
    """Workload name -> (position in LocalQueue, in ClusterQueue), from the visibility API."""
    for version in ("v1beta2", "v1beta1"):
        path = (
            f"/apis/visibility.kueue.x-k8s.io/{version}/namespaces/{namespace()}"
            f"/localqueues/{local_queue}/pendingworkloads"
        )
        got = kubectl("get", "--raw", path)
        if got:
            return {
                i["metadata"]["name"]: (i["positionInLocalQueue"], i["positionInClusterQueue"])
                for i in got.get("items", [])
            }
    return {}


class Background:
    """A call on a thread of its own: ``.value`` or ``.error`` once done."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.value = fn()
            except BaseException as exc:  # read by the test
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"still running after {timeout:g} s"
        return self


# -- the tests --------------------------------------------------------------------------------


def test_queued_then_admitted(made: Made) -> None:
    seen: list = []
    s = made.connect("admitted", on_status=seen.append)
    assert s.queue == QUEUE
    assert any(st.queue is not None for st in seen), "the queue state was reported"
    status = s.status()
    assert status.queue is not None and status.queue.state == "Admitted", status.queue
    assert status.queue.local_queue == QUEUE and status.queue.workload
    assert status.queue.cluster_queue == cluster_queue_of(QUEUE or "")
    assert s.execute("echo queued").stdout == "queued\n"


def test_waiting_for_quota_with_a_position(made: Made) -> None:
    """A session holds the quota; a second one waits, with its position (the visibility API's)
    and Kueue's message, until it leaves the queue."""
    big = {"cpu": big_cpu(), "num_nodes": QUEUE_NODES}
    holder = made.connect("holder", **big)
    assert holder.status().queue.state == "Admitted"
    seen: list = []
    waiter_name = made.name("waiter")
    waiting = Background(
        lambda: connect(
            made.runtime,
            name=waiter_name,
            queue=QUEUE,
            config_file=KUBECONFIG,
            namespace=NAMESPACE,
            timeout=WAIT,
            on_status=seen.append,
            **big,
        )
    )

    def queued_with_position() -> Any:
        return next(
            (
                st.queue
                for st in reversed(seen)
                if st.queue is not None
                and st.queue.position_in_local_queue is not None
                # Kueue writes its reason once the scheduler has tried the Workload: before
                # that the state is "waiting for Kueue to evaluate the Workload"
                and "quota" in st.queue.message
            ),
            None,
        )

    qs = wait_for("the second session's queue position", queued_with_position, timeout=120)
    assert qs.state == "Queued", qs
    assert "insufficient unused quota for cpu" in qs.message, qs.message
    assert f"position {qs.position_in_local_queue + 1} in LocalQueue {QUEUE}" in (
        seen[-1].message
    ), seen[-1].message
    positions = pending_positions(QUEUE or "")
    assert positions.get(qs.workload) == (
        qs.position_in_local_queue,
        qs.position_in_cluster_queue,
    ), positions
    assert qs.position_in_local_queue == 0, positions  # nothing else waits in the queue
    # leave the queue: deleting the waiting job ends its connect at once, saying so
    close_trainjob(waiter_name, namespace(), config_file=KUBECONFIG, timeout=120)
    waiting.join(30)
    assert isinstance(waiting.error, E.PodNotRunningError), waiting.error or waiting.value
    assert f"TrainJob {waiter_name} was deleted" in str(waiting.error)


def test_preempted_by_a_higher_priority_session_then_readmitted(made: Made) -> None:
    """A higher-priority session preempts a lower one, whose running command and next execute
    say so; ``attach`` waits for its readmission, which comes when the higher one closes."""
    cq_name = cluster_queue_of(QUEUE or "")
    cq = kubectl("get", "clusterqueues.kueue.x-k8s.io", cq_name or "", "-o", "json", config=ADMIN)
    within = (((cq or {}).get("spec") or {}).get("preemption") or {}).get("withinClusterQueue")
    if within not in ("LowerPriority", "LowerOrNewerEqualPriority"):
        pytest.skip(
            f"ClusterQueue {cq_name} does not preempt by priority "
            f"(spec.preemption.withinClusterQueue is {within!r}, not LowerPriority)"
        )
    low_pc, high_pc = ensure_priorities(made)
    big = {"cpu": big_cpu(), "num_nodes": QUEUE_NODES}
    low = made.connect("low", priority_class=low_pc, **big)
    assert low.status().queue.state == "Admitted"
    # -- a higher-priority session preempts the first ----------------------------------------
    chunks: list[str] = []
    running = Background(
        lambda: low.execute(
            "echo started; sleep 600", on_output=lambda _p, _s, text: chunks.append(text)
        )
    )
    wait_for("the command to start", lambda: "started" in "".join(chunks), timeout=60)
    high = made.connect("high", priority_class=high_pc, **big)
    assert high.status().queue.state == "Admitted"
    running.join(120)
    assert isinstance(running.error, E.SessionPreemptedError), running.error or running.value
    assert "started" in (running.error.partial.stdout if running.error.partial else "")
    with pytest.raises(E.SessionPreemptedError, match="preempted") as info:
        low.execute("true")
    assert "wait_ready()" in str(info.value)
    assert low.status().queue.state != "Admitted"

    # -- attach waits for readmission, which comes once the higher one closes ---------------
    attach_seen: list = []
    attaching = Background(
        lambda: attach(
            low.name,
            namespace=NAMESPACE,
            config_file=KUBECONFIG,
            timeout=WAIT,
            on_status=attach_seen.append,
        )
    )
    wait_for(
        "attach to report the job waiting",
        lambda: any(st.queue is not None and st.queue.waiting for st in attach_seen),
        timeout=60,
    )
    assert attaching.thread.is_alive(), attaching.error or attaching.value
    high.close(timeout=180)
    attaching.join(WAIT)
    assert attaching.error is None, attaching.error
    again = attaching.value
    made.sessions.append(again)
    assert again.status().queue.state == "Admitted"
    assert again.status().queue.evictions >= 1
    assert again.execute("echo back").stdout == "back\n"


def test_default_local_queue_queues_without_a_queue(made: Made) -> None:
    ns = namespace()
    body = {
        "apiVersion": kueue_version(),
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": ns},
        "spec": {"clusterQueue": cluster_queue_of(QUEUE or "")},
    }
    ensure(made, "localqueues.kueue.x-k8s.io", "default", body, ns)
    s = made.connect("default-queue", queue=None)
    assert s.queue == "default"
    status = s.status()
    assert status.queue is not None and status.queue.local_queue == "default", status.queue
    assert status.queue.state == "Admitted", status.queue
    assert s.execute("echo default").stdout == "default\n"


WPC = "workloadpriorityclasses.kueue.x-k8s.io"


def test_unknown_priority_class_fails_fast(made: Made) -> None:
    """One clear error before anything waits. Kueue 0.14-0.19 create no Workload for an unknown
    class and record no Event (only their log says so), so connect reads the class first."""
    pc = f"tjm-no-such-priority-{uuid.uuid4().hex[:4]}"
    probe = subprocess.run(
        ["kubectl", "--kubeconfig", KUBECONFIG, "get", f"{WPC}/{pc}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "NotFound" not in probe.stderr:  # Forbidden: the class cannot be read
        pytest.skip(
            "the suite's user may not get workloadpriorityclasses.kueue.x-k8s.io (cluster-scoped), "
            "and Kueue 0.14-0.19 record no Event for an unknown class: nothing tells it apart"
        )
    started = time.monotonic()
    with pytest.raises(E.QueueUnavailableError) as info:
        made.connect("no-priority", priority_class=pc, timeout=60)
    assert time.monotonic() - started < 60
    text = str(info.value)
    assert f'WorkloadPriorityClass "{pc}" not found' in text, text
    assert text.count("\n") == 0, text  # one line
    ns = namespace()
    assert made.names[-1] not in {j.name for j in list_trainjobs(ns, config_file=KUBECONFIG)}
