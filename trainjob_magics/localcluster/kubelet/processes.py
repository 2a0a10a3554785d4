"""Run a pod's commands as local processes, each pod in a working directory of its own.

Every process (the container's main command and every exec) starts in its own process group
(``start_new_session=True``), so ``kill -- -PGID`` stops its whole tree, and is registered with
the pod's :class:`PodSandbox` so :func:`kill_all` can stop everything when the pod is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .mount_namespace import MountNamespace, resolve_executable

SHIMS_DIR = Path(__file__).resolve().parent / "shims"
MPIRUN_MODE_ENV = "TRAINJOB_LOCAL_MPIRUN"  # auto | openmpi | imitation, see kubelet/mpirun.py
KILL_GRACE = 1.0  # seconds between SIGTERM and SIGKILL when a container task is cancelled


@dataclass
class PodSandbox:
    """Where and how a pod's processes run."""

    namespace: str
    name: str
    hostname: str
    workdir: Path
    env: dict[str, str]
    hostfile: Path | None
    log_path: Path
    pgids: set[int] = field(default_factory=set, repr=False)
    stopped: bool = False  # the container was killed (pod deleted/failed): no new execs
    # the pod's own mount namespace (kubelet/mount_namespace.py) when it mounts volumes;
    # None for every other pod, whose processes start directly
    mount_ns: MountNamespace | None = field(default=None, repr=False)


def _ensure_shims_executable() -> None:
    """Package data may lose its mode bits on install: make the shims executable again."""
    for shim in SHIMS_DIR.iterdir():
        mode = shim.stat().st_mode
        want = mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
        if shim.is_file() and mode != want:
            with contextlib.suppress(OSError):
                shim.chmod(want)


def make_sandbox(
    root: Path,
    namespace: str,
    pod_name: str,
    hostname: str,
    env: dict[str, str],
    hostfile: Path | None,
) -> PodSandbox:
    """Create ``<root>/namespaces/<ns>/pods/<pod>/`` and the pod's process environment."""
    root = Path(root).resolve()
    workdir = root / "namespaces" / namespace / "pods" / pod_name
    workdir.mkdir(parents=True, exist_ok=True)
    _ensure_shims_executable()
    host_path = os.environ.get("PATH", os.defpath)
    full_env = dict(env)
    # Every container has its own /tmp: give each pod its own temporary directory.
    tmpdir = workdir / ".tmp"
    tmpdir.mkdir(exist_ok=True)
    full_env.setdefault("TMPDIR", str(tmpdir))
    # ... and its own /dev/shm, which a real pod's containers share and which outlives a
    # container restart (the keep-alive keeps a detached run's exit code there)
    shm = workdir / ".shm"
    shm.mkdir(exist_ok=True)
    # The cluster's choice of mpirun (real Open MPI or the imitation, kubelet/mpirun.py).
    if MPIRUN_MODE_ENV in os.environ:
        full_env.setdefault(MPIRUN_MODE_ENV, os.environ[MPIRUN_MODE_ENV])
    full_env.update(
        {
            "HOSTNAME": hostname,
            "HOME": str(workdir),
            "PATH": f"{SHIMS_DIR}{os.pathsep}{host_path}",
            "TRAINJOB_LOCAL_ROOT": str(root),
            "TRAINJOB_LOCAL_HOSTFILE": str(hostfile) if hostfile else "",
            "TRAINJOB_LOCAL_SHM": str(shm),
            "POD_NAME": pod_name,
            "POD_NAMESPACE": namespace,
        }
    )
    log_dir = root / "namespaces" / namespace / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"{pod_name}.log").touch()
    return PodSandbox(
        namespace=namespace,
        name=pod_name,
        hostname=hostname,
        workdir=workdir,
        env=full_env,
        hostfile=hostfile,
        log_path=log_dir / f"{pod_name}.log",
    )


def write_hostfile(
    path: Path,
    hostnames: list[str],
    pod_dirs: dict[str, Path],
    pod_envs: dict[str, dict[str, str]] | None = None,
    pod_enter: dict[str, list[str]] | None = None,
) -> None:
    """Write an MPI hostfile (``<host> slots=1`` lines) and its ``<path>.json`` sidecar.

    The sidecar maps each hostname to ``{"workdir": ..., "env": {...}}`` so the ``mpirun`` shim can
    run each rank "in" that pod. ``pod_envs`` (optional) adds the pod's own environment; HOSTNAME
    and HOME always come from the hostname and its directory. ``pod_enter`` (optional) gives,
    for a pod with a mount namespace, the argv prefix that runs a command inside it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sidecar: dict[str, Any] = {}
    for host in hostnames:
        workdir = Path(pod_dirs[host]) if host in pod_dirs else None
        host_env = dict((pod_envs or {}).get(host, {}))
        host_env["HOSTNAME"] = host
        if workdir is not None:
            host_env["HOME"] = str(workdir)
        sidecar[host] = {"workdir": str(workdir) if workdir else None, "env": host_env}
        if pod_enter and host in pod_enter:
            sidecar[host]["enter"] = list(pod_enter[host])
    _atomic_write(path, "".join(f"{h} slots=1\n" for h in hostnames))
    _atomic_write(Path(f"{path}.json"), json.dumps(sidecar, indent=1))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _prune(sandbox: PodSandbox) -> None:
    """Forget groups that have no member left (so a reused pid is never signalled)."""
    for pgid in list(sandbox.pgids):
        if not _group_alive(pgid):
            sandbox.pgids.discard(pgid)


async def spawn(
    sandbox: PodSandbox,
    argv: list[str],
    *,
    stdin: Any = asyncio.subprocess.DEVNULL,
    stdout: Any = asyncio.subprocess.DEVNULL,
    stderr: Any = asyncio.subprocess.DEVNULL,
) -> asyncio.subprocess.Process:
    """Start ``argv`` (no shell added) in the pod: its workdir, env and a new process group.

    Raises ``OSError`` (e.g. ``FileNotFoundError``) when the executable cannot be started.
    """
    if not argv:
        raise FileNotFoundError("exec: no command")
    _prune(sandbox)
    if sandbox.mount_ns is not None:
        # inside the pod's mount namespace (only pods with mounts pay for nsenter)
        resolve_executable(
            sandbox.mount_ns, argv[0], sandbox.env.get("PATH", os.defpath), sandbox.workdir
        )
        argv = sandbox.mount_ns.enter_argv(argv)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=sandbox.workdir,
        env=sandbox.env,
        start_new_session=True,
        limit=1 << 20,
    )
    sandbox.pgids.add(proc.pid)  # start_new_session: pid == pgid
    return proc


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


async def run_container(sandbox: PodSandbox, argv: list[str]) -> int:
    """Run the pod's main command; stdout+stderr append to ``log_path``; return its exit code.

    A process killed by signal N reports 128+N, as container runtimes do. If this task is
    cancelled the whole process group gets SIGTERM, then SIGKILL after ``KILL_GRACE`` seconds.
    """
    sandbox.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(sandbox.log_path, "ab", buffering=0) as log:
        try:
            proc = await spawn(sandbox, argv, stdout=log, stderr=asyncio.subprocess.STDOUT)
        except OSError as exc:
            # containerd reports a container that cannot start as StartError, exit code 128
            log.write(f"{describe_spawn_error(argv, exc)}\n".encode())
            return 128
        try:
            code = await proc.wait()
        except asyncio.CancelledError:
            await _terminate(proc)
            raise
    return exit_code(code)


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), KILL_GRACE)
    signal_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), KILL_GRACE)


def exit_code(returncode: int) -> int:
    """asyncio's ``-N`` (killed by signal N) -> 128+N, like a container runtime."""
    return 128 - returncode if returncode < 0 else returncode


def describe_spawn_error(argv: list[str], exc: OSError) -> str:
    """Message like runc's, e.g. ``exec: "foo": executable file not found in $PATH``."""
    name = argv[0] if argv else ""
    if isinstance(exc, FileNotFoundError):
        if "/" in name:
            return f'exec: "{name}": stat {name}: no such file or directory'
        return f'exec: "{name}": executable file not found in $PATH'
    if isinstance(exc, PermissionError):
        return f'exec: "{name}": permission denied'
    return f'exec: "{name}": {exc.strerror or exc}'


def kill_all(sandbox: PodSandbox, sig: int = signal.SIGKILL) -> None:
    """Kill every process group started in the sandbox (main command and execs)."""
    if sig == signal.SIGKILL:
        sandbox.stopped = True
    for pgid in list(sandbox.pgids):
        signal_group(pgid, sig)
        if sig == signal.SIGKILL:
            sandbox.pgids.discard(pgid)
