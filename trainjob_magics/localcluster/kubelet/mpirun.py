"""``mpirun`` in the local cluster's pods: the real Open MPI wherever it is installed (stdlib only).

Run by the sh shims ``kubelet/shims/mpirun`` and ``mpiexec``, first on every pod's PATH. It finds
Open MPI's own ``mpirun`` further along PATH (ORTE, Open MPI 4.x: ``mpirun`` is ``orterun`` next
to ``orted``, as Debian's ``openmpi-bin`` installs it) and execs it in its place (same pid, so
signals reach it), with the environment that makes the local processes look like pods:

- ``OMPI_MCA_plm_rsh_agent``: :mod:`.rsh_agent`, which "sshes" into a pod by running the command
  in that pod's sandbox (its directory and environment, found in the job hostfile's
  ``<hostfile>.json`` sidecar). On a real cluster mpirun reaches the node pods through ssh; here
  every ``orted`` is started through the agent, in its pod.
- ``OMPI_MCA_orte_fork_agent``: ``fork_agent.sh``, which starts each rank in its own pod's copy
  of mpirun's working directory (every pod has a directory of its own here).
- Loopback only: ``oob_tcp_if_include`` and ``btl_tcp_if_include`` ``lo``, ``btl`` ``self,tcp``
  (all "nodes" are this machine), and ``if_base_do_not_resolve`` (pod hostnames are not in DNS:
  resolving them would cost a resolver time-out each).
- The job hostfile: ``/etc/mpi/hostfile`` (Trainer mounts it there and sets
  ``OMPI_MCA_orte_default_hostfile`` to it) is ``$TRAINJOB_LOCAL_HOSTFILE`` here, in that
  variable and in ``--hostfile``/``--machinefile``/``--default-hostfile`` arguments.
- Running as root (CI) is allowed, as with ``OMPI_ALLOW_RUN_AS_ROOT=1`` and
  ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` (pods run as user 1000 on a real cluster).
- stderr passes through a small filter that drops one warning that only this machine's low
  RLIMIT_NOFILE provokes (:func:`filter_stderr`).

Every setting but the agent is a default: a value already in the environment, or an ``--mca`` on
the command line, wins. ``TRAINJOB_LOCAL_MPIRUN`` chooses: ``auto`` (default) the real one when
installed, else the imitation (:mod:`.mpirun_imitation`, the quickstart without Open MPI);
``openmpi`` the real one or an error; ``imitation`` always the imitation.
"""

from __future__ import annotations

import os
import re
import runpy
import signal
import sys

MODE_ENV = "TRAINJOB_LOCAL_MPIRUN"
KUBELET_DIR = os.path.dirname(os.path.realpath(__file__))
SHIMS_DIR = os.path.join(KUBELET_DIR, "shims")
IMITATION = os.path.join(KUBELET_DIR, "mpirun_imitation.py")
RSH_AGENT = os.path.join(KUBELET_DIR, "rsh_agent.py")
FORK_AGENT = os.path.join(KUBELET_DIR, "fork_agent.sh")
STANDARD_HOSTFILE = "/etc/mpi/hostfile"
HOSTFILE_OPTS = {"hostfile", "machinefile", "default-hostfile"}
LOOPBACK = "lo"
SETPGID_WARNING = re.compile(
    rb"\[[^\]\n]*\] plm:rsh: Warning: setpgid\((\d+),\1\) failed in parent with "
    rb"errno=Permission denied\(13\)\n"
)


def find_openmpi(path: str) -> str | None:
    """Open MPI's (ORTE) ``mpirun`` on ``path``, skipping the shims; None if there is none."""
    shims = os.path.realpath(SHIMS_DIR)
    for entry in path.split(os.pathsep):
        if not entry or os.path.realpath(entry) == shims:
            continue
        candidate = os.path.join(entry, "mpirun")
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        real = os.path.realpath(candidate)
        orted = os.path.join(os.path.dirname(real), "orted")
        if os.path.basename(real) == "orterun" and os.access(orted, os.X_OK):
            return candidate
        return None  # the first mpirun on PATH is another MPI (MPICH, Open MPI 5): not ours
    return None


def _unusable(path: str) -> bool:
    """Open MPI splits agent values at spaces (and the rsh agent list at ':')."""
    return any(c.isspace() or c == ":" for c in path)


def openmpi_environment(env: dict[str, str]) -> dict[str, str]:
    """The environment the real mpirun runs with (see the module docstring)."""
    env = dict(env)
    python = sys.executable if sys.executable and not _unusable(sys.executable) else "python3"
    env["OMPI_MCA_plm_rsh_agent"] = f"{python} {RSH_AGENT}"
    env.setdefault("OMPI_MCA_orte_fork_agent", f"/bin/sh {FORK_AGENT}")
    for layer in ("oob_tcp", "btl_tcp"):
        if not any(f"OMPI_MCA_{layer}_if_{w}" in env for w in ("include", "exclude")):
            env[f"OMPI_MCA_{layer}_if_include"] = LOOPBACK
    env.setdefault("OMPI_MCA_btl", "self,tcp")
    env.setdefault("OMPI_MCA_if_base_do_not_resolve", "1")
    local = env.get("TRAINJOB_LOCAL_HOSTFILE") or ""
    default = env.get("OMPI_MCA_orte_default_hostfile")
    if local and (default is None or _is_standard_hostfile(default)):
        env["OMPI_MCA_orte_default_hostfile"] = local
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def _is_standard_hostfile(path: str) -> bool:
    return path == STANDARD_HOSTFILE and not os.path.exists(STANDARD_HOSTFILE)


def map_hostfile_args(argv: list[str], local: str) -> list[str]:
    """``--hostfile /etc/mpi/hostfile`` (any spelling, also ``=``) -> the job's local hostfile."""
    if not local:
        return list(argv)
    out: list[str] = []
    expect_value = False
    for arg in argv:
        if expect_value and _is_standard_hostfile(arg):
            arg = local
        expect_value = False
        name, eq, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name in HOSTFILE_OPTS:
            if eq and _is_standard_hostfile(value):
                arg = arg[: len(arg) - len(value)] + local
            expect_value = not eq
        out.append(arg)
    return out


def drop_setpgid_warnings(data: bytes) -> bytes:
    return SETPGID_WARNING.sub(b"", data)


def filter_stderr() -> None:
    """Make fd 2 a pipe to a child that copies it to the real stderr without Open MPI's spurious
    ``plm:rsh: Warning: setpgid(N,N) failed in parent with errno=Permission denied(13)``.

    plm_rsh_module.c calls setpgid() on each agent child from the parent too, and warns when the
    child has already exec'd. The child first closes every fd up to RLIMIT_NOFILE, so how often
    the parent loses depends on the machine: rarely with a pod's 1048576 (containerd 1.x), about
    1 run in 5 at 20000, 4 in 5 at a desktop's 1024. The filter exits at EOF, when mpirun and
    its orteds have closed the pipe, and ignores the signals meant for mpirun (a SIGINT to the
    process group must not cut off mpirun's last words). Each warning is one write() of less
    than PIPE_BUF, so it arrives whole within one read.
    """
    read_end, write_end = os.pipe()
    if os.fork() == 0:  # the filter
        os.close(write_end)
        devnull = os.open(os.devnull, os.O_RDWR)  # keep only stderr of the exec's streams
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        while chunk := os.read(read_end, 1 << 20):
            out = drop_setpgid_warnings(chunk)
            while out:
                out = out[os.write(2, out) :]
        os._exit(0)
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)


def exec_openmpi(mpirun: str, argv: list[str], env: dict[str, str]) -> None:
    """Replace this process with the real mpirun. argv[0] stays a bare ``mpirun``: Open MPI
    takes an absolute argv[0] as ``--prefix``, which would put its bin directory before the pod's
    shims on every node's PATH."""
    local = env.get("TRAINJOB_LOCAL_HOSTFILE") or ""
    env = openmpi_environment(env)
    sys.stderr.flush()
    filter_stderr()
    os.execve(mpirun, ["mpirun", *map_hostfile_args(argv, local)], env)


def main(argv: list[str]) -> int:
    mode = os.environ.get(MODE_ENV, "auto") or "auto"
    if mode not in ("auto", "openmpi", "imitation"):
        sys.stderr.write(f"mpirun: {MODE_ENV} must be auto, openmpi or imitation, not {mode!r}\n")
        return 1
    if mode != "imitation":
        usable = not _unusable(KUBELET_DIR)
        real = find_openmpi(os.environ.get("PATH", os.defpath)) if usable else None
        if real is not None:
            exec_openmpi(real, argv, dict(os.environ))
        if mode == "openmpi":
            why = "is not installed" if usable else f"cannot use agents under {KUBELET_DIR!r}"
            sys.stderr.write(f"mpirun: {MODE_ENV}=openmpi, but Open MPI (orterun) {why}\n")
            return 1
    sys.argv = [IMITATION, *argv]
    runpy.run_path(IMITATION, run_name="__main__")  # exits with the imitation's code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
