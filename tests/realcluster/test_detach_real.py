"""Detached runs (``%%trainjob --detach`` / ``session.detach``) against a real cluster: a run
that outlives its kernel, holds the keep-alive watchdog while it lives, and ends the TrainJob
with its exit code on every pod. Same variables as test_e2e_real.py; CI runs it on the real stack
for each runtime, the normal suite on the local cluster (test_realcluster_suite.py).

The runs are short (24 lines at one a second where the issue says 60: enough to outlast the
12 s idle timeout with no kernel alive) to keep the suite's time modest.

A non-zero exit on a pod whose restartPolicy is OnFailure (JobSet's default for Trainer's
runtimes) restarts the container, and the Job fails only after its backoffLimit of restarts, at
the kubelet's crash back-off (10 s doubling). When that back-off adds up to more than
``FAILED_WAIT`` the exit-3 test checks that the restarted keep-alive ends with the run's code
again (what makes the Job fail) instead of waiting minutes for it, then deletes the job.
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from tests.helpers.kernels import Kernel
from tests.realcluster.settings import KUBECONFIG, NAMESPACE, NEEDS_CLUSTER, RUNTIMES, WAIT
from trainjob_magics import DetachedRunError, connect

# idle_timeout: a dead kernel's job would idle out within 13 s without its run (not shorter: an
# MPI launcher's keep-alive starts before connect returns and heartbeats begin, while the node
# pods get ready, which took 6 s on the real stack)
IDLE = 12
FAILED_WAIT = 150.0  # seconds of crash back-off this suite waits for a Failed job at most
SELECTOR = "jobset.sigs.k8s.io/jobset-name={}"

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.timeout(900),
    NEEDS_CLUSTER,
]


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def api() -> Any:
    return kubernetes.config.new_client_from_config(config_file=KUBECONFIG)


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        time.sleep(every)


def _trainjob(api: Any, ns: str, name: str) -> dict | None:
    custom = kubernetes.client.CustomObjectsApi(api)
    try:
        return custom.get_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", name
        )
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _state(job: dict | None) -> str:
    for c in (job or {}).get("status", {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return c["type"]
    return "Deleted" if job is None else "Running"


def _pods(api: Any, ns: str, name: str) -> list[Any]:
    core = kubernetes.client.CoreV1Api(api)
    return core.list_namespaced_pod(ns, label_selector=SELECTOR.format(name)).items


def _nothing_runs(api: Any, ns: str, name: str) -> bool:
    """Every pod of the job ended (Succeeded/Failed) or is gone, and no container runs."""
    for pod in _pods(api, ns, name):
        if pod.status.phase not in ("Succeeded", "Failed"):
            return False
        if any(cs.state.running for cs in pod.status.container_statuses or []):
            return False
    return True


def _log(api: Any, ns: str, pod: str) -> str:
    core = kubernetes.client.CoreV1Api(api)
    try:
        return core.read_namespaced_pod_log(pod, ns, container="node")
    except kubernetes.client.ApiException:
        return ""


def _crash_backoff(api: Any, ns: str, name: str, trainer_rjob: str, pods: int) -> float:
    """Seconds of kubelet crash back-off before the trainer's Job fails on a non-zero exit."""
    jobset = kubernetes.client.CustomObjectsApi(api).get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", name
    )
    for rjob in jobset["spec"]["replicatedJobs"]:
        if rjob["name"] != trainer_rjob:
            continue
        spec = rjob["template"]["spec"]
        limit = int(spec.get("backoffLimit", 6))
        if spec["template"]["spec"].get("restartPolicy") == "Never" or limit == 0:
            return 0.0
        restarts = math.ceil(limit / max(1, pods))  # the Job sums the restarts of its pods
        return float(sum(min(10 * 2 ** (i - 1), 300) for i in range(1, restarts)))
    return 0.0


def _setup(runtime: str) -> str:
    return (
        "import os\n"
        f"os.environ['KUBECONFIG'] = {KUBECONFIG!r}\n"
        "%load_ext trainjob_magics\n"
        "%config TrainJobMagics.widgets = 'off'\n"
        f"%config TrainJobMagics.idle_timeout = {IDLE}\n"
        f"%trainjob_connect {runtime} --nodes 2 --timeout {WAIT:g}"
        + (f" --namespace {NAMESPACE}" if NAMESPACE else "")
    )


def test_a_detached_run_outlives_a_killed_kernel_and_fails_the_job(runtime: str, api) -> None:
    body = "for i in $(seq 24); do echo line-$i; sleep 1; done; exit 3"
    with Kernel() as first:
        reply, out = first.run_text(_setup(runtime), timeout=WAIT + 60)
        assert reply["status"] == "ok", out
        t0 = time.monotonic()
        reply, out = first.run_text(f"%%trainjob --detach\n{body}\n", timeout=60)
        took = time.monotonic() - t0
        assert reply["status"] == "ok" and "Detached run 1 in TrainJob " in out, out
        assert "follow it with %trainjob_logs --follow" in out and took < 2.0, (took, out)
        _, handle = first.run_text("print(_trainjob.trainjob, _trainjob.namespace, "
                                   "*_trainjob.pods)")  # fmt: skip
        name, ns, *run_pods = handle.split()
        os.kill(first.pid(), signal.SIGKILL)  # no close, no heartbeat from here on
    # no kernel lives: the watchdog (idle_timeout 4 s) must hold while the run does
    wait_for(lambda: "line-16\n" in _log(api, ns, run_pods[0]), 60, "line 16 of the run")
    assert _state(_trainjob(api, ns, name)) == "Running"
    with Kernel() as second:
        attach = _setup(runtime).rsplit("\n", 1)[0] + f"\n%trainjob_connect --attach {name}"
        attach += f" --namespace {ns}"
        reply, out = second.run_text(attach, timeout=WAIT + 60)
        assert reply["status"] == "ok", out
        assert f"Detached run 1 in TrainJob {name}: running" in out and body in out, out
        reply, out = second.run_text("%trainjob_logs --follow", timeout=180)
        assert reply["status"] == "ok", out
        lines = [int(n) for n in re.findall(r"\bline-(\d+)$", out, re.M)]
        assert lines == list(range(1, 25)), out  # every line, followed to its end
        assert f"Detached run 1 in TrainJob {name}: ended with exit code 3" in out, out
        trainer_rjob = "launcher" if "launcher" in run_pods[0] else "node"
        backoff = _crash_backoff(api, ns, name, trainer_rjob, len(run_pods))
        if backoff <= FAILED_WAIT:
            wait_for(lambda: _state(_trainjob(api, ns, name)) == "Failed", backoff + 90, "Failed")
            wait_for(lambda: _nothing_runs(api, ns, name), 120, "every pod to end")
        else:
            # restartPolicy OnFailure: the container restarted, and its keep-alive ends with
            # the run's code again at once (until the Job's backoffLimit fails the job)
            def restarted_with_3() -> bool:
                for pod in _pods(api, ns, name):
                    for cs in pod.status.container_statuses or []:
                        last = cs.last_state.terminated if cs.last_state else None
                        if cs.restart_count >= 2 and last is not None and last.exit_code == 3:
                            return True
                return False

            wait_for(restarted_with_3, 60, "the restarted keep-alive to exit 3 again")
            assert _state(_trainjob(api, ns, name)) != "Complete"
        reply, out = second.run_text(f"%trainjob_close {name} --force", timeout=360)
        assert reply["status"] == "ok", out
    wait_for(lambda: not _pods(api, ns, name), 300, "the pods to be gone")


def test_exit_0_completes_the_job_on_every_pod(runtime: str, api) -> None:
    session = connect(
        runtime,
        config_file=KUBECONFIG,
        namespace=NAMESPACE,
        timeout=WAIT,
        num_nodes=2,
        idle_timeout=IDLE,
    )
    try:
        mpi = "launcher" in session.pod
        every = "mpirun hostname" if mpi else "hostname"
        t0 = time.monotonic()
        run = session.detach(f"for i in $(seq 8); do echo tick-$i; sleep 1; done; {every}")
        assert time.monotonic() - t0 < 2.0
        keepalive = [p.name for p in session.pods("all") if ("launcher" in p.name) == mpi]
        assert run.run == 1 and sorted(run.pods) == sorted(keepalive)
        with pytest.raises(DetachedRunError, match="already has detached run 1 running"):
            session.detach("echo a second run")
        assert session.execute("echo interactive").stdout == "interactive\n"  # still works
        with pytest.raises(DetachedRunError, match="closing would kill it"):
            session.close()
        assert session.detached().live
        session.leave()  # no heartbeats from here on, as after the kernel died
        wait_for(lambda: _state(_trainjob(api, session.namespace, session.name)) == "Complete",
                 120, "Complete")  # fmt: skip
        wait_for(lambda: _nothing_runs(api, session.namespace, session.name), 120, "pods end")
        ended = session.detached()
        assert ended is not None and not ended.live and ended.exit_code == 0
        assert set(ended.exit_codes.values()) <= {0}
        everyone = [p.metadata.name for p in _pods(api, session.namespace, session.name)]
        logs = {p: _log(api, session.namespace, p) for p in run.pods}
        for pod in run.pods:
            assert "tick-8" in logs[pod] and "exited with code 0" in logs[pod], logs[pod]
        shown = "".join(logs.values())
        for pod in everyone:  # mpirun's ranks reach every pod; torch runs in each node pod
            assert pod.rsplit("-", 1)[0] in shown, (pod, shown)
    finally:
        session.close(timeout=300, force=True)


def test_a_kernel_restart_leaves_the_job_and_close_asks_for_force(runtime: str, api) -> None:
    with Kernel() as kernel:
        reply, out = kernel.run_text(_setup(runtime), timeout=WAIT + 60)
        assert reply["status"] == "ok", out
        reply, out = kernel.run_text("%%trainjob --detach\nsleep 600\n", timeout=60)
        assert reply["status"] == "ok", out
        _, handle = kernel.run_text("print(_trainjob.trainjob, _trainjob.namespace)")
        name, ns = handle.split()
        kernel.restart()
        job = _trainjob(api, ns, name)
        assert job is not None and not job["metadata"].get("deletionTimestamp"), "deleted"
        attach = _setup(runtime).rsplit("\n", 1)[0] + f"\n%trainjob_connect --attach {name}"
        reply, out = kernel.run_text(attach + f" --namespace {ns}", timeout=WAIT + 60)
        assert reply["status"] == "ok" and "running" in out and "sleep 600" in out, out
        reply, out = kernel.run_text("%trainjob_sessions")
        assert "detached run 1" in out, out
        reply, out = kernel.run_text("%trainjob_close", timeout=120)
        assert reply["status"] == "error", out
        error = [line for line in out.splitlines() if "closing would kill it" in line]
        assert len(error) == 1 and "%trainjob_close --force" in error[0], out
        assert "sleep 600" in error[0] and "detached run 1" in error[0].lower(), out
        assert _trainjob(api, ns, name) is not None
        reply, out = kernel.run_text("%trainjob_close --force", timeout=360)
        assert reply["status"] == "ok" and f"TrainJob {name} deleted" in out, out
    wait_for(lambda: _trainjob(api, ns, name) is None and not _pods(api, ns, name), 300, "gone")
