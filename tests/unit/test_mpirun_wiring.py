"""How the pods' mpirun finds and configures the real Open MPI (kubelet/mpirun.py), the rsh agent
that enters a pod (kubelet/rsh_agent.py) and the fork agent that maps the cwd
(kubelet/fork_agent.sh). No MPI needed: fake installations and the agents run directly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainjob_magics.localcluster.controller.podspec import build_jobset_spec
from trainjob_magics.localcluster.kubelet import mpirun, rsh_agent
from trainjob_magics.localcluster.runtimes.loader import load_builtin_runtimes

pytestmark = pytest.mark.timeout(60)

STANDARD = "/etc/mpi/hostfile"
needs_no_etc_mpi = pytest.mark.skipif(
    os.path.exists(STANDARD), reason="this machine has a real /etc/mpi/hostfile"
)


def executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def fake_openmpi(prefix: Path) -> Path:
    """bin/orterun + bin/orted + bin/mpirun -> orterun, as Open MPI 4 (and Debian) install it."""
    executable(prefix / "bin" / "orterun")
    executable(prefix / "bin" / "orted")
    (prefix / "bin" / "mpirun").symlink_to("orterun")
    return prefix / "bin"


# --- finding Open MPI -----------------------------------------------------------------------


def test_find_openmpi_skips_the_shims_and_wants_orterun(tmp_path: Path) -> None:
    bindir = fake_openmpi(tmp_path / "ompi")
    path = os.pathsep.join([mpirun.SHIMS_DIR, "", str(tmp_path / "empty"), str(bindir)])
    assert mpirun.find_openmpi(path) == str(bindir / "mpirun")
    assert mpirun.find_openmpi(mpirun.SHIMS_DIR) is None
    assert mpirun.find_openmpi(str(tmp_path / "empty")) is None


def test_find_openmpi_refuses_another_mpi_first_on_path(tmp_path: Path) -> None:
    executable(tmp_path / "mpich" / "mpirun")  # hydra: a plain mpirun, no orterun/orted
    executable(tmp_path / "mpich" / "orted")
    bindir = fake_openmpi(tmp_path / "ompi")
    assert mpirun.find_openmpi(f"{tmp_path / 'mpich'}{os.pathsep}{bindir}") is None
    (tmp_path / "broken" / "bin").mkdir(parents=True)
    executable(tmp_path / "broken" / "bin" / "orterun")
    (tmp_path / "broken" / "bin" / "mpirun").symlink_to("orterun")  # no orted next to it
    assert mpirun.find_openmpi(str(tmp_path / "broken" / "bin")) is None


# --- arguments and environment --------------------------------------------------------------


@needs_no_etc_mpi
@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["--hostfile", STANDARD, "-np", "2", "a"], ["--hostfile", "L", "-np", "2", "a"]),
        (["-hostfile", STANDARD, "a"], ["-hostfile", "L", "a"]),
        (["--machinefile", STANDARD, "a"], ["--machinefile", "L", "a"]),
        (["-default-hostfile", STANDARD, "a"], ["-default-hostfile", "L", "a"]),
        ([f"--hostfile={STANDARD}", "a"], ["--hostfile=L", "a"]),
        (["--hostfile", "/other", "a", STANDARD], ["--hostfile", "/other", "a", STANDARD]),
        (["cat", STANDARD], ["cat", STANDARD]),
    ],
)
def test_map_hostfile_args(argv: list[str], want: list[str]) -> None:
    assert mpirun.map_hostfile_args(argv, "L") == want
    assert mpirun.map_hostfile_args(argv, "") == argv


@needs_no_etc_mpi
def test_openmpi_environment_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    env = mpirun.openmpi_environment({"TRAINJOB_LOCAL_HOSTFILE": "/x/hostfile", "PATH": "/bin"})
    assert env["OMPI_MCA_plm_rsh_agent"] == f"{sys.executable} {mpirun.RSH_AGENT}"
    assert env["OMPI_MCA_orte_fork_agent"] == f"/bin/sh {mpirun.FORK_AGENT}"
    assert env["OMPI_MCA_oob_tcp_if_include"] == env["OMPI_MCA_btl_tcp_if_include"] == "lo"
    assert env["OMPI_MCA_btl"] == "self,tcp"
    assert env["OMPI_MCA_if_base_do_not_resolve"] == "1"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/x/hostfile"
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert env["PATH"] == "/bin"
    # Trainer's /etc/mpi/hostfile is the job's hostfile here
    trainer = {"TRAINJOB_LOCAL_HOSTFILE": "/x/hostfile", "OMPI_MCA_orte_default_hostfile": STANDARD}
    assert mpirun.openmpi_environment(trainer)["OMPI_MCA_orte_default_hostfile"] == "/x/hostfile"


def test_openmpi_environment_keeps_the_users_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    user = {
        "OMPI_MCA_plm_rsh_agent": "ssh",  # cannot reach a local pod: always the agent
        "OMPI_MCA_btl": "self,vader,tcp",
        "OMPI_MCA_oob_tcp_if_exclude": "docker0",
        "OMPI_MCA_orte_default_hostfile": "/mine",
        "TRAINJOB_LOCAL_HOSTFILE": "/x/hostfile",
    }
    env = mpirun.openmpi_environment(user)
    assert env["OMPI_MCA_plm_rsh_agent"].endswith("rsh_agent.py")
    assert env["OMPI_MCA_btl"] == "self,vader,tcp"
    assert "OMPI_MCA_oob_tcp_if_include" not in env  # exclusive with the user's exclude
    assert env["OMPI_MCA_btl_tcp_if_include"] == "lo"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/mine"
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in env
    assert "OMPI_MCA_orte_default_hostfile" not in mpirun.openmpi_environment({})


def test_setpgid_warning_filter() -> None:
    warning = b"[vm:15288] plm:rsh: Warning: setpgid(15295,15295) failed in parent with errno="
    warning += b"Permission denied(13)\n"
    assert mpirun.drop_setpgid_warnings(b"a\n" + warning + b"b" + warning) == b"a\nb"
    other = warning.replace(b"(15295,15295)", b"(15295,1)")
    assert mpirun.drop_setpgid_warnings(other) == other
    assert mpirun.drop_setpgid_warnings(b"partial line") == b"partial line"


def run_shim(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.path.join(mpirun.SHIMS_DIR, "mpirun"), *args],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_mode_switch(tmp_path: Path) -> None:
    out = run_shim({mpirun.MODE_ENV: "imitation"}, "--version")
    assert out.returncode == 0 and "local cluster shim" in out.stdout
    out = run_shim({mpirun.MODE_ENV: "bogus"}, "--version")
    assert out.returncode == 1 and "must be auto, openmpi or imitation" in out.stderr
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(sys.executable)
    no_mpi = {"PATH": f"{mpirun.SHIMS_DIR}{os.pathsep}{tmp_path / 'bin'}"}
    out = run_shim({**no_mpi, mpirun.MODE_ENV: "openmpi"}, "--version")
    assert out.returncode == 1 and "Open MPI (orterun) is not installed" in out.stderr
    out = run_shim(no_mpi, "--version")  # auto without Open MPI: the imitation
    assert out.returncode == 0 and "local cluster shim" in out.stdout


def test_launcher_pod_gets_trainers_openmpi_env() -> None:
    """kubeflow/trainer pkg/runtime/framework/plugins/mpi/mpi.go: the launcher's node container."""
    (runtime,) = [r for r in load_builtin_runtimes() if r["metadata"]["name"] == "mpi-interactive"]
    tj = {"metadata": {"name": "j"}, "spec": {"trainer": {"numNodes": 3, "numProcPerNode": 2}}}
    spec = build_jobset_spec(runtime, tj)
    env = {}
    for rjob in spec["replicatedJobs"]:
        (c,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
        env[rjob["name"]] = {e["name"]: e.get("value") for e in c.get("env") or []}
    assert env["launcher"] == {
        "OMPI_MCA_orte_default_hostfile": STANDARD,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_set_default_slots": "2",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
    }
    assert not any(k.startswith("OMPI_") for k in env["node"])
    tj["spec"]["trainer"]["env"] = [{"name": "OMPI_MCA_plm_rsh_args", "value": "-p 2222"}]
    spec = build_jobset_spec(runtime, tj)
    launcher = next(r for r in spec["replicatedJobs"] if r["name"] == "launcher")
    (c,) = launcher["template"]["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e["value"] for e in c["env"]}["OMPI_MCA_plm_rsh_args"] == "-p 2222"


# --- the rsh agent --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "host", "command"),
    [
        (["h", "orted", "-mca", "x"], "h", ["orted", "-mca", "x"]),
        (["-o", "ConnectionAttempts=10", "h", "orted"], "h", ["orted"]),
        (["-x", "-oBatchMode=yes", "-p2222", "-l", "u", "h", "a", "b"], "h", ["a", "b"]),
        (["-T", "--", "h", "-c"], "h", ["-c"]),
        (["h"], "h", []),
    ],
)
def test_agent_parses_ssh_command_lines(argv: list[str], host: str, command: list[str]) -> None:
    assert rsh_agent.parse(argv) == (host, command)


@pytest.fixture
def job(tmp_path: Path) -> dict[str, Path]:
    """Two pods' directories and a job hostfile sidecar naming them (one not running)."""
    root = tmp_path / "root"
    pod = root / "namespaces" / "ns" / "pods" / "job-node-0-0-abcde"
    pod.mkdir(parents=True)
    hostfile = root / "hostfile"
    sidecar = {
        "job-node-0-0": {
            "workdir": str(pod),
            "env": {"HOSTNAME": "job-node-0-0", "HOME": str(pod), "ROLE": "node"},
        },
        "job-node-0-1": {"workdir": None, "env": {"HOSTNAME": "job-node-0-1"}},
    }
    Path(f"{hostfile}.json").write_text(json.dumps(sidecar))
    return {"root": root, "pod": pod, "hostfile": hostfile}


def run_agent(job: dict[str, Path], *argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{mpirun.SHIMS_DIR}{os.pathsep}{os.environ['PATH']}",  # as in every pod
        "TRAINJOB_LOCAL_HOSTFILE": str(job["hostfile"]),
        "TRAINJOB_LOCAL_ROOT": str(job["root"]),
        "SECRET_OF_THE_CALLER": "x",
    }
    return subprocess.run(
        [sys.executable, mpirun.RSH_AGENT, *argv], env=env, capture_output=True, text=True
    )


def test_agent_runs_the_command_in_the_pod(job: dict[str, Path]) -> None:
    script = 'echo "$(pwd) $HOSTNAME $ROLE $HOME $TMPDIR ${SECRET_OF_THE_CALLER:-none}"'
    out = run_agent(job, "-o", "ConnectionAttempts=10", "job-node-0-0.j.ns.svc", "hostname")
    assert (out.returncode, out.stdout) == (0, "job-node-0-0\n")  # the pod's hostname shim
    out = run_agent(job, "job-node-0-0", script, "; exit 3")  # joined, as ssh does
    pod = job["pod"]
    assert out.returncode == 3
    assert out.stdout.split() == [str(pod), "job-node-0-0", "node", str(pod), f"{pod}/.tmp", "none"]
    assert (pod / ".tmp").is_dir()


def test_agent_fails_like_ssh(job: dict[str, Path]) -> None:
    out = run_agent(job, "nowhere", "true")
    assert out.returncode == 255
    assert out.stderr == "ssh: Could not resolve hostname nowhere: Name or service not known\n"
    out = run_agent(job, "job-node-0-1", "true")
    assert out.returncode == 255
    assert out.stderr == "ssh: connect to host job-node-0-1 port 22: Connection refused\n"


# --- the fork agent -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cwd", "want"),
    [
        ("pods/launcher/data/sub", "pods/node/data/sub"),  # exists in the rank's pod
        ("pods/launcher/only-here", "pods/node"),  # missing there: the pod's home
        ("pods/launcher", "pods/node"),
        ("pods/node/data", "pods/node/data"),  # already in the rank's own pod
        ("elsewhere", "elsewhere"),  # not a pod's directory: as it is
    ],
)
def test_fork_agent_maps_the_cwd_into_the_ranks_pod(tmp_path: Path, cwd: str, want: str) -> None:
    root = tmp_path.resolve()
    ns = root / "namespaces" / "ns"
    for d in ("pods/launcher/data/sub", "pods/launcher/only-here", "pods/node/data/sub"):
        (ns / d).mkdir(parents=True)
    (root / "elsewhere").mkdir()
    start = root / cwd if cwd == "elsewhere" else ns / cwd
    env = {
        "PATH": os.environ["PATH"],
        "TRAINJOB_LOCAL_ROOT": str(root),
        "HOME": str(ns / "pods/node"),
    }
    out = subprocess.run(
        ["/bin/sh", mpirun.FORK_AGENT, "sh", "-c", 'echo "$(pwd -P)|$PWD|$1"', "x", "a b"],
        cwd=start,
        env=env,
        capture_output=True,
        text=True,
    )
    expected = root / want if want == "elsewhere" else ns / want
    assert out.stdout == f"{expected}|{expected}|a b\n", out.stderr
