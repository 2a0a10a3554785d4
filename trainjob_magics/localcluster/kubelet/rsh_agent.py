"""Open MPI's rsh agent in the local cluster: ``ssh`` into a pod, by entering its sandbox.

On a real cluster the launcher's ``mpirun`` reaches the node pods with ``ssh <host> orted ...``
(Trainer sets ``OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10``; the node pods run sshd). Here
``mpirun`` (see :mod:`.mpirun`) sets ``OMPI_MCA_plm_rsh_agent`` to this script, which takes the
same command line as ssh -- ``[ssh options] host command...`` -- and, like sshd, runs the command
words joined by spaces with the login shell (``<shell> -c "<command>"``), in that pod:

- its working directory (the pod's directory, ssh's landing place ``$HOME``);
- its environment: the pod's own env from the job hostfile's ``<hostfile>.json`` sidecar
  (``$TRAINJOB_LOCAL_HOSTFILE``), including ``HOSTNAME``, ``HOME`` and ``TMPDIR`` (every pod has
  its own, so each orted gets its own session directory), plus ``PATH``, the login variables
  sshd sets (``USER``, ``LOGNAME``, ``SHELL``), and the local cluster's own
  ``TRAINJOB_LOCAL_ROOT`` and ``TRAINJOB_LOCAL_HOSTFILE`` when the sidecar lacks them. Nothing
  else of the caller's environment passes, as with ssh: Open MPI puts what the daemon needs on
  its command line.

stdin, stdout and stderr stay connected (the shell is exec'd in place of this process, so the pid
mpirun waits for is the remote command itself). An unknown host, or a pod that is not running,
fails the way ssh does: a ``ssh: ...`` line on stderr and exit code 255.

Stdlib only: run as ``python3 rsh_agent.py``, never imported by the package.
"""

from __future__ import annotations

import json
import os
import pwd
import sys

SSH_FAILURE = 255
# ssh(1) options that take an argument (OpenSSH 9: "46AaCfGgKkMNnqsTtVvXxYy" take none).
SSH_VALUE_OPTS = set("BbcDEeFIiJLlmOopQRSWw")
SAFE_SHELLS = {"sh", "bash", "dash", "zsh", "ksh"}


class AgentError(Exception):
    """ssh's own failure: printed as ``ssh: <message>``, exit code 255."""


def parse(argv: list[str]) -> tuple[str, list[str]]:
    """``[options] host command...`` -> (host, command words)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        letter = arg[1:2]
        if letter in SSH_VALUE_OPTS and len(arg) == 2:
            i += 2  # "-o ConnectionAttempts=10"
        else:
            i += 1  # "-x", "-oBatchMode=yes", "-p2222"
    if i >= len(argv):
        raise AgentError("usage: rsh_agent.py [options] host command")
    return argv[i], argv[i + 1 :]


def load_sidecar(env: dict[str, str]) -> dict[str, dict]:
    hostfile = env.get("TRAINJOB_LOCAL_HOSTFILE") or ""
    if not hostfile:
        return {}
    try:
        with open(f"{hostfile}.json") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def lookup(sidecar: dict[str, dict], host: str) -> dict | None:
    """The pod of ``host``: exactly, or by its first label (``job-node-0-0.job.ns.svc``)."""
    if host in sidecar:
        return sidecar[host]
    return sidecar.get(host.split(".", 1)[0])


def login_shell() -> str:
    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = ""
    if os.path.basename(shell) in SAFE_SHELLS and os.access(shell, os.X_OK):
        return shell
    return "/bin/sh"


def pod_environment(entry: dict, caller: dict[str, str], shell: str) -> dict[str, str]:
    env = {k: str(v) for k, v in (entry.get("env") or {}).items()}
    workdir = entry["workdir"]
    env.setdefault("HOME", workdir)
    env.setdefault("TMPDIR", os.path.join(workdir, ".tmp"))
    env["PATH"] = caller.get("PATH") or os.defpath
    for plumbing in ("TRAINJOB_LOCAL_ROOT", "TRAINJOB_LOCAL_HOSTFILE"):  # the same in every pod
        if plumbing in caller:
            env.setdefault(plumbing, caller[plumbing])
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = str(os.getuid())
    env.setdefault("USER", user)
    env.setdefault("LOGNAME", user)
    env["SHELL"] = shell
    return env


def main(argv: list[str]) -> int:
    try:
        host, command = parse(argv)
        entry = lookup(load_sidecar(dict(os.environ)), host)
        if entry is None:
            raise AgentError(f"Could not resolve hostname {host}: Name or service not known")
        workdir = entry.get("workdir")
        if not workdir or not os.path.isdir(workdir):
            raise AgentError(f"connect to host {host} port 22: Connection refused")
    except AgentError as exc:
        sys.stderr.write(f"ssh: {exc}\n")
        return SSH_FAILURE
    shell = login_shell()
    env = pod_environment(entry, dict(os.environ), shell)
    tmpdir = env["TMPDIR"]
    if not os.path.isdir(tmpdir):
        os.makedirs(tmpdir, exist_ok=True)
    os.chdir(workdir)
    # a pod with a mount namespace: run inside it (nsenter; its root and working directory)
    enter = [str(a) for a in entry.get("enter") or []]
    if not command:  # ssh without a command opens a login shell
        if enter:
            os.execve(enter[0], [*enter, shell, "-l"], env)
        os.execve(shell, ["-" + os.path.basename(shell)], env)
    if enter:
        os.execve(enter[0], [*enter, shell, "-c", " ".join(command)], env)
    os.execve(shell, [shell, "-c", " ".join(command)], env)
    return SSH_FAILURE  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
