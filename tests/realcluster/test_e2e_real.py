"""Every capability against a real cluster (Kubeflow Trainer v2 and JobSet installed).
docs/real-cluster.md says how to set one up with kind; Kueue is test_kueue_real.py's.

Runs only when ``TRAINJOB_MAGICS_E2E_KUBECONFIG`` names a kubeconfig. Optional:
``TRAINJOB_MAGICS_E2E_RUNTIME`` (default mpi-interactive), ``TRAINJOB_MAGICS_E2E_RUNTIMES`` (a
comma list: every test runs on each; default the one runtime), ``TRAINJOB_MAGICS_E2E_NAMESPACE``
(default: the kubeconfig's). ``tests/integration/test_realcluster_suite.py`` runs this module
against the local cluster, so it is known to work wherever the API behaves as Kubernetes does.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from tests.helpers.kernels import Kernel
from tests.helpers.ports import fetch, free_port
from tests.realcluster.settings import KUBECONFIG, NAMESPACE, NEEDS_CLUSTER, RUNTIMES, WAIT
from trainjob_magics import attach, close_trainjob, connect, list_trainjobs
from trainjob_magics.engine import errors as E

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.timeout(1200),
    NEEDS_CLUSTER,
]


def _connect(runtime: str, **kw):
    return connect(
        runtime, config_file=KUBECONFIG, namespace=NAMESPACE, timeout=WAIT, num_nodes=2, **kw
    )


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def session(runtime: str) -> Iterator:
    s = _connect(runtime)
    yield s
    s.close(timeout=300)
    assert s.closed


def test_connect_execute_and_close(session) -> None:
    r = session.execute("hostname; echo to-stderr >&2; echo ok")
    assert r.ok and r.stdout.endswith("ok\n") and r.stderr == "to-stderr\n"
    assert session.execute("exit 7").returncode == 7
    seen: list[tuple[str, str, str]] = []
    session.execute("echo live", on_output=lambda *event: seen.append(event))
    assert seen and seen[0][0] == session.pod and seen[0][1] == "stdout"
    assert session.status().state == "Running"


def test_every_pod_files_and_logs(session, tmp_path: Path) -> None:
    refs = session.pods("all")
    assert len(refs) >= 2
    multi = session.execute("hostname", pods="all")
    assert multi.ok and set(multi.pods) == {r.name for r in refs}
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    payload = os.urandom(1 << 20)
    (src / "sub" / "blob.bin").write_bytes(payload)
    (src / "a.txt").write_text("hello\n")
    up = session.upload(str(src), "e2e-upload/", pods="all")
    assert up.ok and up.verified == "sha256", up.summary()
    down = session.download("e2e-upload/src", f"{tmp_path / 'back'}/", pod=refs[-1].name)
    assert down.ok
    got = (tmp_path / "back" / "src" / "sub" / "blob.bin").read_bytes()
    assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    logs = session.logs("all")
    assert set(logs) == {r.name for r in refs} and not logs.errors


def test_interrupt_stops_the_remote_tree(session) -> None:
    box: dict = {}
    # a duration of its own: pods that share a host (the local cluster, the real stack) see
    # each other's processes, and another test's `sleep 1000` is not this one's
    naps = f"sleep 1000.{os.getpid()}{int(time.time()) % 1000}"

    def run() -> None:
        try:
            box["r"] = session.execute(f"echo started; {naps} & {naps}; wait")
        except E.TrainJobError as exc:
            box["e"] = exc

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not session._inflight:
        time.sleep(0.2)
    time.sleep(1)
    reports = session.interrupt()
    t.join(30)
    assert not t.is_alive()
    assert reports and all(r.stopped for r in reports), reports
    left = session.execute(f"ps -eo args 2>/dev/null | grep -c '^{naps}$' || true")
    assert left.stdout.strip() in ("0", "")


def test_python_state_stays_on_every_pod(session) -> None:
    """``%%trainjob --python``'s engine: one persistent interpreter per pod (the image needs
    python3), the last value, the remote error, push and pull, and reset."""
    refs = session.pods("all")
    first = session.python("import os\nhost = os.environ['HOSTNAME']\nsteps = 1", pods="all")
    assert first.ok and set(first) == {r.name for r in refs}, first.summary()
    second = session.python("steps += 1\nsteps", pods="all")
    assert {r.value for r in second.values()} == {"2"}, second.summary()
    failed = session.python("1 / 0")
    assert not failed.ok and failed.error is not None
    assert failed.error.type == "ZeroDivisionError"
    session.push(config={"lr": 0.1, "layers": [1, 2]}, pods="all")
    assert session.pull("config") == {"lr": 0.1, "layers": [1, 2]}
    hosts = session.pull("host", pods="all")
    assert set(hosts) == {r.name for r in refs} and len(set(hosts.values())) == len(refs)
    session.python_reset(pods="all")
    gone = session.python("steps")
    assert not gone.ok and gone.error is not None and gone.error.type == "NameError"


def _until(what: str, cond, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout:g} s")


def test_forward_serves_the_pod_and_survives_refusals(session) -> None:
    """session.forward() through pods/portforward: a page and 8 MB byte for byte, 8 clients at
    once, a port where nothing listens reported once, and the local port free after close."""
    port = free_port()
    start = session.execute(
        "printf fwd-ok > fwd.txt && head -c 8388608 /dev/urandom > fwd.bin && "
        f"nohup python3 -m http.server {port} --bind 127.0.0.1 > fwd.log 2>&1 < /dev/null &"
    )
    assert start.ok, start.stderr
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2).close()"
    _until("the pod's HTTP server", lambda: session.execute(["python3", "-c", probe]).ok)
    digest = session.execute("sha256sum fwd.bin").stdout.split()[0]
    with session.forward(port) as fwd:
        assert fetch(fwd.url + "fwd.txt") == b"fwd-ok"
        assert hashlib.sha256(fetch(fwd.url + "fwd.bin")).hexdigest() == digest
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            pages = list(pool.map(lambda _i: fetch(fwd.url + "fwd.txt"), range(16)))
        assert pages == [b"fwd-ok"] * 16
        assert not fwd.errors, fwd.errors
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", fwd.local_port), timeout=5)
    idle = free_port()
    problems: list[str] = []
    with session.forward(idle, on_error=problems.append) as quiet:
        for _ in range(2):
            with pytest.raises((OSError, urllib.error.URLError, http.client.HTTPException)):
                fetch(quiet.url)
        _until("the refusal report", lambda: any("nothing accepts" in p for p in problems))
        assert sum("nothing accepts" in p for p in problems) == 1, problems


def test_attach_and_orphans(session) -> None:
    jobs = {j.name: j for j in list_trainjobs(NAMESPACE, config_file=KUBECONFIG)}
    assert session.name in jobs and jobs[session.name].mine
    other = attach(session.name, namespace=NAMESPACE, config_file=KUBECONFIG, timeout=WAIT)
    assert other.execute("echo attached").stdout == "attached\n"


def test_magics_in_a_real_kernel(runtime: str, tmp_path: Path) -> None:
    with Kernel() as kernel:
        setup = (
            "import os\n"
            f"os.environ['KUBECONFIG'] = {KUBECONFIG!r}\n"
            "%load_ext trainjob_magics\n"
            "%config TrainJobMagics.widgets = 'off'\n"  # text output: what run_text reads
            f"%trainjob_connect {runtime} --nodes 2 --timeout {WAIT:g}"
            + (f" --namespace {NAMESPACE}" if NAMESPACE else "")
        )
        reply, out = kernel.run_text(setup, timeout=WAIT + 60)
        assert reply["status"] == "ok", out
        reply, out = kernel.run_text("%%trainjob\necho from-a-cell\n", timeout=120)
        assert reply["status"] == "ok" and "from-a-cell" in out, out
        reply, out = kernel.run_text("%%trainjob --pod all\nhostname\n", timeout=120)
        assert reply["status"] == "ok", out
        reply, out = kernel.run_text("%%trainjob\nexit 3\n", timeout=120)
        assert reply["status"] == "error" and "exited with code 3" in out, out
        reply, out = kernel.run_text("%trainjob_close", timeout=360)
        assert reply["status"] == "ok" and "deleted" in out, out


def test_idle_release_with_a_short_timeout(runtime: str) -> None:
    s = _connect(runtime, idle_timeout=20)
    try:
        assert s.execute("echo alive").ok
        s._heartbeat.stop()  # what a dead kernel does: no more heartbeats
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and s.status().state != "Complete":
            time.sleep(2)
        assert s.status().state == "Complete"
        with pytest.raises(E.IdleReleasedError):
            s.execute("echo too-late")
    finally:
        s.close(timeout=300)


def _pods_seen_while(session, action) -> tuple[set[str], set[str]]:
    """The uids of the session's pods before ``action()``, and of every pod of it that a watch
    saw while ``action()`` ran."""
    api = kubernetes.config.new_client_from_config(config_file=KUBECONFIG)
    core = kubernetes.client.CoreV1Api(api)
    selector = f"jobset.sigs.k8s.io/jobset-name={session.name}"
    listed = core.list_namespaced_pod(session.namespace, label_selector=selector)
    before = {p.metadata.uid for p in listed.items}
    seen: set[str] = set()
    failed: list[BaseException] = []
    done = threading.Event()

    def follow() -> None:
        try:
            for event in kubernetes.watch.Watch().stream(
                core.list_namespaced_pod,
                session.namespace,
                label_selector=selector,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=600,
            ):
                seen.add(event["object"].metadata.uid)
                if done.is_set():
                    return
        except Exception as exc:  # the watch broke before the action ended: the test says so
            if not done.is_set():
                failed.append(exc)

    threading.Thread(target=follow, daemon=True).start()
    try:
        action()
    finally:
        done.set()
    assert not failed, f"the pod watch broke: {failed[0]!r}"
    return before, seen


def test_orphan_closed_by_name(runtime: str) -> None:
    """Closing by name deletes the TrainJob and its pods, and no new pod appears meanwhile
    (Trainer applies the JobSet of a TrainJob that is held for a foreground deletion again:
    lifecycle.DELETE_BODY)."""
    s = _connect(runtime)
    lines: list[str] = []
    before, seen = _pods_seen_while(
        s,
        lambda: lines.append(
            close_trainjob(s.name, NAMESPACE, config_file=KUBECONFIG, timeout=300)
        ),
    )
    assert "Closed TrainJob" in lines[0], lines
    assert before and seen <= before, f"pods created while closing: {seen - before}"
    assert s.name not in {j.name for j in list_trainjobs(NAMESPACE, config_file=KUBECONFIG)}


def _trainjob_names() -> set[str]:
    return {j.name for j in list_trainjobs(NAMESPACE, config_file=KUBECONFIG)}


def _wait_gone(name: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while name in _trainjob_names():
        assert time.monotonic() < deadline, f"{name} still there {timeout:g} s after {what}"
        time.sleep(0.5)


def test_cleanup_at_kernel_restart_and_exit(runtime: str) -> None:
    """Kernel > Restart and the kernel's shutdown each delete the kernel's TrainJob."""
    suffix = os.urandom(3).hex()
    with Kernel() as kernel:

        def connect_in_kernel(name: str) -> None:
            code = (
                "import os\n"
                f"os.environ['KUBECONFIG'] = {KUBECONFIG!r}\n"
                "%load_ext trainjob_magics\n"
                "%config TrainJobMagics.widgets = 'off'\n"
                f"%trainjob_connect {runtime} --nodes 1 --name {name} --timeout {WAIT:g}"
                + (f" --namespace {NAMESPACE}" if NAMESPACE else "")
            )
            reply, out = kernel.run_text(code, timeout=WAIT + 60)
            assert reply["status"] == "ok", out
            assert name in _trainjob_names()

        restarted = f"kr-restart-{suffix}"
        connect_in_kernel(restarted)
        kernel.restart()
        _wait_gone(restarted, 60, "the kernel restarted")
        exited = f"kr-exit-{suffix}"
        connect_in_kernel(exited)
    # leaving the block shut the kernel down (a shutdown_request: its exit hooks run)
    _wait_gone(exited, 60, "the kernel exited")
