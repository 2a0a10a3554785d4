"""What only a real node shows: pods with their own network and hostname, `mpirun` from the
launcher reaching every pod over ssh, the interrupt of `mpirun` reaching the ranks on the other
pods (children of sshd there), a container's memory limit, an image without python3 or tar,
and the node's own faults (a restarted trainer container, a restarted kubelet, a kubelet
eviction).

Runs when ``TRAINJOB_MAGICS_E2E_KUBECONFIG`` names a kubeconfig (as test_e2e_real.py); the MPI
cases on the runtimes of ``TRAINJOB_MAGICS_E2E_RUNTIMES`` whose pods run sshd (Trainer's MPI
plugin: deepspeed-distributed, mlx-distributed). The kubelet restart needs the real stack
(``TRAINJOB_MAGICS_REALSTACK_DIR``); ``TRAINJOB_MAGICS_E2E_MINIMAL_IMAGE`` names an image with
only a shell (the real stack's ``trainjob-magics.local/minimal:1``).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.kernels import Kernel
from tests.realcluster.settings import KUBECONFIG, NAMESPACE, NEEDS_CLUSTER, RUNTIMES, WAIT
from trainjob_magics import connect
from trainjob_magics.engine import errors as E

MPI_RUNTIMES = [r for r in RUNTIMES if not r.startswith("torch")]
REALSTACK = os.environ.get("TRAINJOB_MAGICS_REALSTACK_DIR", "")
MINIMAL_IMAGE = os.environ.get("TRAINJOB_MAGICS_E2E_MINIMAL_IMAGE", "")

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.timeout(900),
    NEEDS_CLUSTER,
]


def _connect(runtime: str, **kw):
    kw.setdefault("num_nodes", 2)
    return connect(runtime, config_file=KUBECONFIG, namespace=NAMESPACE, timeout=WAIT, **kw)


def until(what: str, check, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module", params=MPI_RUNTIMES or [None])
def mpi_runtime(request: pytest.FixtureRequest) -> str:
    if request.param is None:
        pytest.skip(f"no MPI runtime among TRAINJOB_MAGICS_E2E_RUNTIMES ({','.join(RUNTIMES)})")
    return request.param


@pytest.fixture(scope="module")
def mpi4(mpi_runtime: str) -> Iterator:
    """An MPI session of four nodes (the launcher runs as a node: three sshd pods)."""
    s = _connect(mpi_runtime, num_nodes=4)
    yield s
    if not s.closed:
        s.close(timeout=300)


# --- the seed PR's end-to-end list, on four MPI nodes -------------------------------------------


def test_the_seed_end_to_end_list_through_the_python_api(mpi_runtime: str) -> None:
    t0 = time.monotonic()
    s = _connect(mpi_runtime, num_nodes=4)
    name = s.name
    try:
        connected = time.monotonic() - t0
        refs = s.pods("all")
        assert len(refs) == 4, refs
        # each pod's own hostname (JobSet's <job>-<replicatedJob>-<index>-<pod index>)
        names = {pod: res.stdout.strip() for pod, res in s.execute("hostname", pods="all").items()}
        assert len(set(names.values())) == 4 and all(
            pod.startswith(host) for pod, host in names.items()
        ), names
        r = s.execute("mpirun hostname")
        assert r.ok, r.output
        # mpirun from the launcher ran once on every pod, over ssh
        assert sorted(r.stdout.split()) == sorted(names.values()), (r.stdout, names)
        launcher = names[s.pod]
        r = s.execute("echo hello from $(hostname)")
        assert r.stdout == f"hello from {launcher}\n"
        assert s.execute("exit 3").returncode == 3
        r = s.execute("echo oops >&2; exit 1")
        assert (r.returncode, r.stderr) == (1, "oops\n")
        assert s.execute("hostname").stdout == f"{launcher}\n"
        ips = s.execute("hostname -i", pods="all")
        addresses = {res.stdout.strip() for res in ips.values()}
        assert len(addresses) == 4 and "127.0.0.1" not in addresses, addresses
        s.close(timeout=300)
        assert s.closed
        with pytest.raises(E.TrainJobError, match="closed"):
            s.execute("echo after close")
        again = _connect(mpi_runtime, num_nodes=1, name=name)
        try:
            r = again.execute("echo second session on $(hostname)")
            assert r.stdout == f"second session on {launcher}\n", r.output
        finally:
            again.close(timeout=300)
    finally:
        if not s.closed:
            s.close(timeout=300)
    assert connected < WAIT


def test_the_seed_end_to_end_list_through_the_magics(mpi_runtime: str) -> None:
    with Kernel() as kernel:
        setup = (
            "import os\n"
            f"os.environ['KUBECONFIG'] = {KUBECONFIG!r}\n"
            "%load_ext trainjob_magics\n"
            "%config TrainJobMagics.widgets = 'off'\n"
            f"%trainjob_connect {mpi_runtime} --nodes 4 --timeout {WAIT:g}"
            + (f" --namespace {NAMESPACE}" if NAMESPACE else "")
        )
        reply, out = kernel.run_text(setup, timeout=WAIT + 60)
        assert reply["status"] == "ok", out
        reply, out = kernel.run_text("%%trainjob\nmpirun hostname | sort\n", timeout=180)
        assert reply["status"] == "ok", out
        hosts = set(re.findall(r"^(\S+-(?:launcher|node)-\d+-\d+)$", out, re.M))
        assert len(hosts) == 4, out
        reply, out = kernel.run_text("%%trainjob\necho hello from $(hostname)\n", timeout=120)
        assert reply["status"] == "ok" and re.search(r"hello from \S+-launcher-0-0", out), out
        reply, out = kernel.run_text("%%trainjob\nexit 3\n", timeout=120)
        assert reply["status"] == "error" and "exited with code 3" in out, out
        reply, out = kernel.run_text("%%trainjob --pod all\nhostname; id -u\n", timeout=120)
        assert reply["status"] == "ok" and len(set(re.findall(r"-node-0-\d", out))) == 3, out
        reply, out = kernel.run_text("%trainjob_close", timeout=360)
        assert reply["status"] == "ok" and "deleted" in out, out


# --- mpirun across pods ----------------------------------------------------------------------


def _ranks(session, tag: str) -> dict[str, int]:
    """How many processes whose command line holds ``tag`` run in each pod."""
    multi = session.execute(f"ps -eo args | grep -c '^{tag}' || true", pods="all")
    return {pod: int(res.stdout.strip() or 0) for pod, res in multi.items()}


def test_mpirun_reaches_every_pod_over_ssh(mpi4) -> None:
    r = mpi4.execute("mpirun -npernode 1 sh -c 'echo $(hostname) $(id -un) $PPID'")
    assert r.ok, r.output
    lines = r.stdout.splitlines()
    hosts = {res.stdout.strip() for res in mpi4.execute("hostname", pods="all").values()}
    assert {line.split()[0] for line in lines} == hosts, r.stdout
    # on the node pods the rank is a grandchild of sshd (through orted), as on a cluster
    tree = mpi4.execute("ps -eo comm", pods="all")
    node_pods = [p for p in tree if p != mpi4.pod]
    assert node_pods and all("sshd" in tree[p].stdout for p in node_pods)


def test_an_interrupted_mpirun_leaves_no_rank_on_any_pod(mpi4) -> None:
    tag = f"sleep 60{os.getpid() % 10}"
    box: dict = {}

    def run() -> None:
        try:
            box["r"] = mpi4.execute(f"mpirun -npernode 1 {tag}")
        except E.TrainJobError as exc:
            box["e"] = exc

    t = threading.Thread(target=run)
    t.start()
    pods = {p.name for p in mpi4.pods("all")}
    until(
        "a rank on every pod",
        lambda: set(_ranks(mpi4, tag)) == pods and all(_ranks(mpi4, tag).values()),
    )
    reports = mpi4.interrupt()
    t.join(60)
    assert not t.is_alive() and reports
    deadline = time.monotonic() + 60
    counts = _ranks(mpi4, tag)
    while any(counts.values()) and time.monotonic() < deadline:
        time.sleep(1)
        counts = _ranks(mpi4, tag)
    assert not any(counts.values()), f"ranks left after the interrupt: {counts}"


# --- the container's limits and image ---------------------------------------------------------


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


def test_a_process_over_the_memory_limit_is_named_out_of_memory(runtime: str) -> None:
    s = _connect(runtime, num_nodes=1, memory="160Mi")
    try:
        r = s.execute("python3 -c 'b = bytearray(400 << 20)'")
        assert r.returncode == 137, r.output
        assert r.note and "out of memory" in r.note and "160Mi" in r.note, r.note
        assert s.execute("echo still here").ok  # the container and the session live on
    finally:
        s.close(timeout=300)


def test_an_image_without_python_or_tar_says_what_they_are_needed_for(runtime: str) -> None:
    if not MINIMAL_IMAGE:
        pytest.skip("set TRAINJOB_MAGICS_E2E_MINIMAL_IMAGE to an image with only a shell")
    s = _connect(runtime, num_nodes=1, image=MINIMAL_IMAGE)
    try:
        assert s.execute("echo shell works").stdout == "shell works\n"
        with pytest.raises(E.TrainJobError) as err:
            s.upload(__file__, "x/")
        text = str(err.value)
        assert "\n" not in text and "tar" in text, text
        with pytest.raises(E.TrainJobError) as err:
            s.python("print(1)")
        text = str(err.value)
        assert "\n" not in text and "python3" in text and "--python" in text, text
    finally:
        s.close(timeout=300)


# --- the node's faults --------------------------------------------------------------------------


def test_the_trainer_container_restarted_under_a_session(runtime: str) -> None:
    s = _connect(runtime, num_nodes=1)
    try:
        first = s.pod
        assert s.execute("echo before").ok
        # the trainer's main process (the keep-alive) ends: the container or its pod is replaced
        s.execute("kill -TERM 1 2>/dev/null; kill -TERM -1 2>/dev/null; sleep 30", timeout=60)
    except E.TrainJobError:
        pass
    try:
        r = until("the session to run a command again", lambda: _try(s, "echo after"), timeout=240)
        assert r.stdout == "after\n" and s.status().state == "Running"
        assert s.pod == first or s.pod.rsplit("-", 1)[0] == first.rsplit("-", 1)[0]
    finally:
        s.close(timeout=300)


def _try(session, command: str):
    try:
        r = session.execute(command, timeout=30)
    except E.TrainJobError:
        return None
    return r if r.ok else None


def test_the_kubelet_restarted_mid_cell(runtime: str) -> None:
    if not REALSTACK:
        pytest.skip("restarting the kubelet needs the real stack (TRAINJOB_MAGICS_REALSTACK_DIR)")
    from devtools.realstack.context import StackContext
    from devtools.realstack.realnode import kubelet

    ctx = StackContext.load(Path(REALSTACK))
    s = _connect(runtime, num_nodes=1)
    try:
        box: dict = {}

        def run() -> None:
            try:
                box["r"] = s.execute("for i in $(seq 20); do echo tick $i; sleep 1; done")
            except E.TrainJobError as exc:
                box["e"] = exc

        t = threading.Thread(target=run)
        t.start()
        time.sleep(3)
        kubelet.restart(ctx)
        t.join(120)
        assert not t.is_alive(), "the cell hung across the kubelet restart"
        # never an OK result without the command's end: Kubernetes 1.31's API server answered
        # Success for the cut stream (its stream translator; 1.36 proxies v5 to the kubelet)
        assert "r" not in box or ("tick 20" in box["r"].stdout and box["r"].ok), box["r"]
        if "e" in box:  # the stream went through the kubelet: one line, the output kept
            err = box["e"]
            assert "\n" not in str(err) and "tick 1" in (err.partial.stdout if err.partial else "")
        until("the kubelet's node to be Ready", lambda: kubelet.node_ready(ctx))
        r = until("a command after the kubelet restart", lambda: _try(s, "echo back"))
        assert r.stdout == "back\n"
        if "e" in box and "stopped the remote command" in str(box["e"]):
            # containerd killed the exec's own process (the wrapper) when the stream was cut;
            # the stopper found the loop it left in its process group
            left = s.execute("grep -l 'echo [t]ick' /proc/[0-9]*/cmdline || true").stdout
            assert left == "", left
    finally:
        s.close(timeout=300)


def test_a_pod_evicted_by_the_kubelet_is_named_so(runtime: str) -> None:
    s = _connect(runtime, num_nodes=1, volumes=["emptydir:/scratch:8Mi"])
    try:
        with pytest.raises(E.TrainJobError) as err:
            # over the emptyDir's sizeLimit: the kubelet's eviction manager evicts the pod
            s.execute("head -c 64M /dev/zero > /scratch/fill; sleep 300", timeout=360)
        text = str(err.value)
        assert "evicted by the kubelet" in text and "\n" not in text, text
    finally:
        s.close(timeout=300)
