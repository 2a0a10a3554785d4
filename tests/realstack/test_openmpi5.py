"""Open MPI 5 on the real node: kubeflow/trainer#4028 and what to set until Trainer fixes it.

Trainer's MPI plugin sets only ORTE-era variables on the launcher (``OMPI_MCA_orte_*``,
``OMPI_MCA_plm_rsh_args``). Open MPI 5 (PRRTE) ignores them: ``mpirun`` never reads the
hostfile, starts every rank on the launcher pod (one per core), and the TrainJob still ends
Complete. With PRRTE's names set (``openmpi5.PREAMBLE``) the ranks spread over every pod; the
same variables on the Open MPI 4 image change nothing, so the engine may set them itself.

The image (``trainjob-magics.local/mpi-openmpi5:1``, Debian trixie) is built once and cached by
content (the first build runs one mmdebstrap of trixie, under a minute here); the runtime is
Trainer's ``deepspeed-distributed`` on that image, a TrainingRuntime in a namespace of this
module's own, deleted at the end. Needs a running real stack (``python -m devtools.realstack
up``): without one these skip, and fail under ``TRAINJOB_MAGICS_REQUIRE_REALSTACK=1``.

When a Trainer release fixes #4028, ``test_trainer_env_runs_every_rank_on_the_launcher`` fails
saying so: then the preamble in docs/multinode.md can go.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools.realstack import controllers, images, openmpi5, paths, procs
from devtools.realstack.context import StackContext
from tests.helpers.kernels import Kernel
from trainjob_magics import connect

REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"
NAMESPACE = f"tjm-ompi5-{os.getpid()}"
NODES = 3  # the launcher (a node too: runLauncherAsNode) and two sshd pods
WAIT = 600.0
# Trainer's variables (pkg/constants/constants.go OpenMPIEnv*, set by plugins/mpi/mpi.go)
TRAINER_VARS = {
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_orte_set_default_slots": "1",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
}
PREAMBLE = openmpi5.PREAMBLE
# what stderr may hold besides the ranks' own: ssh's line for each pod it reaches
# (UserKnownHostsFile /dev/null; Open MPI 4 and 5 alike), and the ssh launcher losing a race with
# its child now and then (`[host:00194] plm:ssh: Warning: setpgid(197,197) failed in parent with
# errno=Permission denied(13)`; `plm:rsh:` in Open MPI 4; harmless)
NOTICE = re.compile(
    r"^(Warning: Permanently added '\[[^]]+\]:2222' \(\w+\) to the list of known hosts\."
    r"|\[[^]]+\] plm:(?:ssh|rsh): Warning: setpgid\(\d+,\d+\) failed in parent with errno=.*)$"
)
FAIL_RANK_1 = (
    'mpirun sh -c \'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then echo rank 1 fails >&2; exit 3; fi;'
    " echo rank $OMPI_COMM_WORLD_RANK ok'"
)

pytestmark = pytest.mark.timeout(1200)


def _missing(why: str) -> None:
    if REQUIRE:
        pytest.fail(f"real stack required (TRAINJOB_MAGICS_REQUIRE_REALSTACK=1): {why}")
    pytest.skip(why)


def until(what: str, check: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def stack() -> StackContext:
    run = paths.run_dir()
    if not (run / "state.json").exists():
        _missing(f"no real stack at {run} (python -m devtools.realstack up)")
    ctx = StackContext.load(run)
    if not ctx.admin_kubeconfig.exists():
        _missing(f"the real stack at {run} has no admin kubeconfig (control plane not up)")
    if controllers.kubectl(ctx, "get", "--raw", "/readyz", check=False, timeout=15).returncode != 0:
        _missing(f"kube-apiserver of the real stack at {run} does not answer")
    for name in ("containerd", "kubelet", "jobset", "trainer"):
        if procs.pid_of(run, name) is None:
            _missing(f"{name} of the real stack at {run} is not running")
    return ctx


@pytest.fixture(scope="module")
def namespace(stack: StackContext) -> Iterator[str]:
    """The Open MPI 5 image in the node's containerd (built once, cached by content) and
    ``deepspeed-openmpi5`` as a TrainingRuntime in a namespace of this module's own."""
    openmpi5.import_image(stack)
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    runtime = openmpi5.runtime_object(stack, namespace=NAMESPACE)
    controllers.apply(stack, [ns, runtime], f"test-openmpi5-{os.getpid()}")
    yield NAMESPACE
    controllers.kubectl(stack, "delete", "namespace", NAMESPACE, "--wait=false", check=False)
    until(
        f"namespace {NAMESPACE} gone",
        lambda: controllers.kubectl(stack, "get", "namespace", NAMESPACE, check=False).returncode,
        timeout=300,
    )


def _connect(stack: StackContext, runtime: str, namespace: str) -> Any:
    return connect(
        runtime,
        num_nodes=NODES,
        namespace=namespace,
        config_file=str(stack.admin_kubeconfig),
        timeout=WAIT,
    )


def _hosts(session: Any) -> dict[str, str]:
    """Every pod's hostname -> its pod."""
    out = session.execute("hostname", pods="all")
    return {res.stdout.strip(): pod for pod, res in out.items()}


def _run(session: Any, command: str) -> Any:
    """``command`` in the launcher; its stderr may only hold the NOTICE lines."""
    r = session.execute(command, timeout=180)
    noise = [ln for ln in r.stderr.splitlines() if not NOTICE.match(ln)]
    assert r.returncode == 0 and not noise, f"{command!r} exited {r.returncode}:\n{r.output}"
    return r


def _ranks(session: Any, command: str) -> list[str]:
    """The hostname each rank of ``... mpirun hostname`` printed (one line a rank), sorted."""
    return sorted(_run(session, command).stdout.split())


@pytest.fixture(scope="class")
def ompi5(stack: StackContext, namespace: str) -> Iterator[Any]:
    s = _connect(stack, openmpi5.RUNTIME, namespace)
    yield s
    if not s.closed:
        s.close(timeout=300)


class TestOpenMPI5:
    def test_the_image_has_open_mpi_5_and_trainer_sets_only_orte_variables(self, ompi5) -> None:
        assert "mpirun (Open MPI) 5.0." in _run(ompi5, "mpirun --version").stdout
        env = dict(
            line.split("=", 1)
            for line in _run(ompi5, "env").stdout.splitlines()
            if line.startswith(("OMPI_MCA_", "PRTE_MCA_"))
        )
        assert env == TRAINER_VARS, env
        hostfile = _run(ompi5, "cat /etc/mpi/hostfile").stdout.splitlines()
        assert len(hostfile) == NODES and all(ln.endswith(" slots=1") for ln in hostfile)
        # PRRTE's own names for what Trainer means (prte_info of the image), none of ORTE's
        params = _run(ompi5, "prte_info --all").stdout
        for name in ("prte_default_hostfile", "plm_ssh_args", "prte_keep_fqdn_hostnames"):
            assert f'"{name}"' in params, name
        assert "orte_" not in _run(ompi5, "ompi_info --all").stdout

    def test_trainer_env_runs_every_rank_on_the_launcher(self, stack, ompi5) -> None:
        """kubeflow/trainer#4028, reproduced: Trainer's variables alone put every rank on the
        launcher pod (as many as it has cores), none on the node pods."""
        env = _run(ompi5, "env").stdout
        fixed = sorted(
            {ln.split("=")[0] for ln in env.splitlines()} & set(openmpi5.PRTE_EQUIVALENTS)
        )
        hosts = _hosts(ompi5)
        launcher = _run(ompi5, "hostname").stdout.strip()
        ranks = _ranks(ompi5, "mpirun hostname")
        if fixed or set(ranks) != {launcher}:
            pytest.fail(
                f"kubeflow/trainer#4028 looks fixed in Trainer {stack.versions.trainer}: the "
                f"launcher has {fixed or 'no PRTE_MCA_* variable'}, the ranks ran on "
                f"{sorted(set(ranks))} of {sorted(hosts)}. Drop the Open MPI 5 preamble from "
                "docs/multinode.md and turn this test around."
            )
        assert ranks and len(hosts) == NODES

    def test_prte_equivalents_spread_the_ranks_over_every_pod(self, ompi5) -> None:
        hosts = _hosts(ompi5)
        assert len(hosts) == NODES, hosts
        assert _ranks(ompi5, f"{PREAMBLE}; mpirun hostname") == sorted(hosts)
        assert _ranks(ompi5, f"{PREAMBLE}; mpirun -np {NODES} hostname") == sorted(hosts)
        # the hostfile alone is what decides; ssh's arguments only make ssh retry
        only = "export PRTE_MCA_prte_default_hostfile=$OMPI_MCA_orte_default_hostfile"
        assert _ranks(ompi5, f"{only}; mpirun hostname") == sorted(hosts)

    def test_keep_fqdn_hostnames_as_trainer_sets_it_breaks_open_mpi_5(self, ompi5) -> None:
        """Why the preamble leaves prte_keep_fqdn_hostnames out: Trainer's ``true`` makes PRRTE
        ssh to the launcher's own hostfile entry, where no sshd listens."""
        keep = "export PRTE_MCA_prte_keep_fqdn_hostnames=$OMPI_MCA_orte_keep_fqdn_hostnames"
        # (the hostfile only: with Trainer's ConnectionAttempts=10 ssh tries for 10 s)
        only = "export PRTE_MCA_prte_default_hostfile=$OMPI_MCA_orte_default_hostfile"
        r = ompi5.execute(f"{only}; {keep}; mpirun hostname", timeout=180)
        assert r.returncode != 0, r.output
        assert "port 2222: Connection refused" in r.stderr, r.output
        assert "PRTE has lost communication with a remote daemon" in r.stderr, r.output

    def test_tagged_output_and_a_failing_rank(self, ompi5) -> None:
        """What a parser of Open MPI 5's output meets (PRRTE 3.0, the image's 5.0.x)."""
        hosts = _hosts(ompi5)
        r = _run(ompi5, f"{PREAMBLE}; mpirun --tag-output hostname")
        tagged = sorted(re.findall(r"^\[1,(\d+)\]<stdout>: (\S+)$", r.stdout, re.M))
        assert [t[0] for t in tagged] == [str(n) for n in range(NODES)], r.stdout
        assert sorted(t[1] for t in tagged) == sorted(hosts)
        r = _run(ompi5, f"{PREAMBLE}; mpirun --output tag-detailed hostname")
        detailed = re.findall(
            r"^\[1,(\d+)\]\[([^:\]]+):(\d+|unknown)\]<stdout>: (\S+)$", r.stdout, re.M
        )
        assert len(detailed) == NODES and all(d[1] == d[3] for d in detailed), r.stdout
        # rank 1 exits 3: mpirun exits 3; PRRTE's "prterun detected that one or more processes
        # exited with non-zero status" block follows only when it raced the other ranks' end
        r = ompi5.execute(f"{PREAMBLE}; {FAIL_RANK_1}", timeout=180)
        assert r.returncode == 3, r.output
        assert "rank 1 fails" in r.stderr and "rank 0 ok" in r.stdout, r.output
        if "prterun detected" in r.stderr:
            assert re.search(r"Process name: \[prterun-\S+@1,1\]\n\s+Exit code:\s+3", r.stderr)


def test_the_cell_warns_of_4028_and_the_preamble_silences_it(
    stack: StackContext, namespace: str
) -> None:
    """The magics on the real image: the world check names kubeflow/trainer#4028 after an
    ``mpirun -np 2`` whose ranks both ran on the launcher (``-np 2``: this machine's 2 cores
    are the launcher's slots when the hostfile is not read), and with the preamble the ranks
    ran on two pods and nothing is said."""
    with Kernel() as kernel:
        setup = (
            "import os\n"
            f"os.environ['KUBECONFIG'] = {str(stack.admin_kubeconfig)!r}\n"
            "%load_ext trainjob_magics\n"
            "%config TrainJobMagics.widgets = 'off'\n"
            f"%trainjob_connect {openmpi5.RUNTIME} --nodes {NODES} --namespace {namespace}"
            f" --timeout {WAIT:g}"
        )
        reply, out = kernel.run_text(setup, timeout=WAIT + 60)
        assert reply["status"] == "ok", out
        reply, out = kernel.run_text("%%trainjob\nmpirun -np 2 hostname\n", timeout=180)
        assert reply["status"] == "ok", out
        warning = [ln for ln in out.splitlines() if ln.startswith("warning:")]
        assert len(warning) == 1 and f"2 ranks ran on 1 of the job's {NODES} pods" in warning[0]
        assert "(kubeflow/trainer#4028)" in warning[0], warning
        reply, out = kernel.run_text(f"%%trainjob\n{PREAMBLE}\nmpirun -np 2 hostname\n", 180)
        assert reply["status"] == "ok" and "warning:" not in out, out
        assert re.search(r"rank 1 · \S+-node-0-0-\w+ · exit 0", out), out
        reply, out = kernel.run_text("%trainjob_close", timeout=360)
        assert reply["status"] == "ok" and "deleted" in out, out


def test_prte_equivalents_are_harmless_on_open_mpi_4(stack: StackContext, namespace: str) -> None:
    """The engine may set them itself: Open MPI 4.1 (the bookworm ``mpi`` image of
    ``deepspeed-distributed``) reads only the ORTE names, with or without PRRTE's."""
    s = _connect(stack, "deepspeed-distributed", namespace)
    try:
        assert "mpirun (Open MPI) 4." in _run(s, "mpirun --version").stdout
        hosts = _hosts(s)
        assert len(hosts) == NODES, hosts
        assert _ranks(s, "mpirun hostname") == sorted(hosts)
        assert _ranks(s, f"{PREAMBLE}; mpirun hostname") == sorted(hosts)
        assert _ranks(s, f"{PREAMBLE}; mpirun -np {NODES} hostname") == sorted(hosts)
        # (Open MPI 4's "mpirun detected that one or more processes exited with non-zero
        # status" block, like PRRTE's, is there only when it won a race with the ranks' end)
        r = s.execute(f"{PREAMBLE}; {FAIL_RANK_1}", timeout=180)
        assert r.returncode == 3 and "rank 1 fails" in r.stderr, r.output
    finally:
        s.close(timeout=300)


def test_an_openmpi5_trainjob_ends_complete_with_every_rank_on_the_launcher(
    stack: StackContext, namespace: str
) -> None:
    """The symptom as users meet it: the TrainJob of ``mpirun hostname`` on three nodes ends
    Complete, and its launcher's log names only the launcher."""
    name = f"ompi5-complete-{os.getpid() % 100000}"
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeRef": {"name": openmpi5.RUNTIME, "kind": "TrainingRuntime"},
            "trainer": {
                "numNodes": NODES,
                "command": ["sh", "-c", "mpirun hostname && echo LAUNCHER=$(hostname)"],
            },
        },
    }
    controllers.kubectl(stack, "create", "-f", "-", input=json.dumps(job))

    def finished() -> str:
        got = json.loads(
            controllers.kubectl(
                stack, "get", "trainjob", name, "-n", namespace, "-o", "json"
            ).stdout
        )
        for c in got.get("status", {}).get("conditions", []):
            if c["type"] in ("Complete", "Failed") and c["status"] == "True":
                return c["type"]
        return ""

    try:
        assert until(f"TrainJob {name} finished", finished, timeout=WAIT) == "Complete"
        selector = (
            f"jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/replicatedjob-name=launcher"
        )
        words = controllers.kubectl(
            stack, "logs", "-n", namespace, "-l", selector, "-c", "node", "--tail=-1"
        ).stdout.split()
        launcher = next(w.split("=", 1)[1] for w in words if w.startswith("LAUNCHER="))
        ranks = [w for w in words if not w.startswith("LAUNCHER=")]
        assert ranks and set(ranks) == {launcher}, words
    finally:
        controllers.kubectl(
            stack, "delete", "trainjob", name, "-n", namespace, "--wait=false", check=False
        )


def test_the_image_is_built_once(namespace: str) -> None:
    """Cached by content: asking again (another session, another test run) only touches the
    OCI tar; the trixie base's mmdebstrap time stays recorded beside it."""
    t0 = time.monotonic()
    images.build_openmpi5(paths.run_dir() / "logs" / "openmpi5.log")
    assert time.monotonic() - t0 < 10
    assert images.base_build_seconds(images.OPENMPI5_SUITE) is not None
