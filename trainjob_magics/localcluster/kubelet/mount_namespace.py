"""A pod's own mount namespace: started by its holder process (``kubelet/mount_holder.py``),
joined by every process of the pod (the container's command, each exec) with ``nsenter``.

Only pods that mount something get one (``volumes.needs_mount_namespace``): the others run
exactly as before, and their execs pay nothing. As root the namespace is a plain mount
namespace; a user who is not root gets a user and mount namespace where the kernel allows
unprivileged user namespaces. Where neither works, ``MountNamespaceError`` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from .volumes import Mount

HOLDER = Path(__file__).resolve().parent / "mount_holder.py"
START_TIMEOUT = 30.0
NEEDS_NAMESPACES = (
    "the local cluster needs mount namespaces to mount a pod's volumes: {error} (run it as "
    "root, or allow unprivileged user namespaces, e.g. sysctl kernel.unprivileged_userns_clone=1 "
    "or kernel.apparmor_restrict_unprivileged_userns=0)"
)


class MountNamespaceError(Exception):
    """The namespace could not be made (the message says why and what to do)."""


@dataclass
class MountNamespace:
    """The holder process of a pod's mount namespace."""

    pid: int
    mode: str  # "root" or "userns"
    proc: asyncio.subprocess.Process

    def enter_argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace with the holder's root and working directory
        (the pod's). ``--wd=DIR`` would resolve DIR below the namespace's root mount, not
        below the tmpfs that may cover "/" (getcwd then fails)."""
        nsenter = shutil.which("nsenter") or "nsenter"
        prefix = [nsenter, "-t", str(self.pid)]
        if self.mode == "userns":
            prefix += ["-U", "--preserve-credentials"]
        return [*prefix, "-m", "-r", "-w", "--", *argv]

    def path(self, path: str) -> str:
        """``path`` as this namespace sees it, reachable from outside it."""
        return f"/proc/{self.pid}/root{path}"

    async def close(self) -> None:
        """End the holder (the namespace goes with the pod's last process)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.proc.wait(), 5)


async def create(
    mounts: list[Mount], state_dir: Path, workdir: Path, working_dir: str = ""
) -> MountNamespace:
    """Start the holder with ``mounts`` (parents first) in ``workdir``, or in the container's
    ``working_dir`` when that is a directory inside the namespace (e.g. a volume's);
    MountNamespaceError on failure."""
    state_dir.mkdir(parents=True, exist_ok=True)
    staging = state_dir / "root-staging"
    staging.mkdir(exist_ok=True)
    plan = state_dir / "mounts.json"
    plan.write_text(
        json.dumps(
            {
                "staging": str(staging),
                "workdir": str(workdir),
                "working_dir": working_dir,
                "mounts": [m.as_json() for m in mounts],
            }
        )
    )
    if shutil.which("nsenter") is None:
        raise MountNamespaceError(NEEDS_NAMESPACES.format(error="nsenter (util-linux) not found"))
    try:
        proc = await asyncio.create_subprocess_exec(
            _interpreter(),
            "-I",
            str(HOLDER),
            str(plan),
            str(os.getpid()),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        raise MountNamespaceError(f"cannot start the mount namespace's holder: {exc}") from None
    assert proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT)).decode().strip()
    except asyncio.TimeoutError:
        line = "error: the mount namespace did not start in time"
    if not line.startswith("ready "):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        error = line.removeprefix("error: ") or "the holder process exited"
        if "unshare" in error:
            raise MountNamespaceError(NEEDS_NAMESPACES.format(error=error))
        raise MountNamespaceError(error)
    return MountNamespace(proc.pid, line.split()[1], proc)


def _interpreter() -> str:
    """A Python that can run the holder (stdlib only): this one, else python3 on PATH."""
    if os.access(sys.executable, os.X_OK):
        return sys.executable
    return shutil.which("python3") or sys.executable


def resolve_executable(ns: MountNamespace, name: str, path_env: str, cwd: Path) -> None:
    """Raise what exec(3) would (FileNotFoundError, PermissionError) when ``name`` cannot be
    run inside the namespace, so that errors read as without one."""
    if "/" in name:
        candidates = [name if name.startswith("/") else str(Path(cwd) / name)]
    else:
        candidates = [os.path.join(d or ".", name) for d in path_env.split(os.pathsep)]
    for candidate in candidates:
        seen = ns.path(candidate if candidate.startswith("/") else str(Path(cwd) / candidate))
        if os.path.isfile(seen):
            if not os.access(seen, os.X_OK):
                raise PermissionError(13, "Permission denied", name)
            return
    raise FileNotFoundError(2, "No such file or directory", name)


__all__ = ["MountNamespace", "MountNamespaceError", "create", "resolve_executable"]
