"""Start the stack's processes detached (own session, log file, pid file) and stop them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


class StackError(RuntimeError):
    """A component could not be built, started or reached; the message says which and why."""


def log_path(run: Path, name: str) -> Path:
    return run / "logs" / f"{name}.log"


def pid_path(run: Path, name: str) -> Path:
    return run / "pids" / f"{name}.pid"


def start(
    run: Path,
    name: str,
    argv: Sequence[str | os.PathLike],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` in a session of its own, output to ``logs/NAME.log``; returns the pid."""
    stop(run, name)
    log = log_path(run, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_path(run, name).parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {})}
    with open(log, "ab") as out:
        out.write(f"--- start {time.strftime('%H:%M:%S')}: {' '.join(map(str, argv))}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
            # a CI shell may ignore SIGINT; the components get the default dispositions
            preexec_fn=_default_signals,
        )
    pid_path(run, name).write_text(str(proc.pid))
    spec = {
        "argv": [str(a) for a in argv],
        "env": dict(env or {}),
        "cwd": str(cwd) if cwd else None,
    }
    spec_path(run, name).write_text(json.dumps(spec))
    return proc.pid


def spec_path(run: Path, name: str) -> Path:
    return run / "pids" / f"{name}.json"


def spec(run: Path, name: str) -> dict:
    """How ``name`` was last started: ``argv``, ``env`` and ``cwd``."""
    try:
        return dict(json.loads(spec_path(run, name).read_text()))
    except (OSError, ValueError) as exc:
        raise StackError(f"{name} was never started in {run}") from exc


def restart(run: Path, name: str, argv: Sequence[str | os.PathLike] | None = None) -> int:
    """Stop ``name`` and start it again with the argv (or ``argv``: other flags), env and cwd
    it was started with. A new ``argv`` is what the next plain restart uses too."""
    started = spec(run, name)
    stop(run, name)
    cwd = Path(started["cwd"]) if started.get("cwd") else None
    return start(run, name, argv or started["argv"], env=started.get("env"), cwd=cwd)


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)


def pid_of(run: Path, name: str) -> int | None:
    path = pid_path(run, name)
    try:
        pid = int(path.read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def stop(run: Path, name: str, timeout: float = 10.0) -> bool:
    """SIGTERM the component's process group, SIGKILL after ``timeout``; True if it ran. Returns
    only when every process of the group is gone (a relay's forked children too)."""
    pid = pid_of(run, name)
    if pid is None:
        pid_path(run, name).unlink(missing_ok=True)
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and (alive(pid) or group_members(pid)):
            time.sleep(0.05)
        if not alive(pid) and not group_members(pid):
            break
    pid_path(run, name).unlink(missing_ok=True)
    return True


def _stat_fields(pid: str) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name)
        if fields and fields[0] != "Z" and fields[2] == str(pgid):
            found.append(int(entry.name))
    return found


def wait_gone(pids: set[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` is alive (at most ``timeout`` s); those still alive."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    return left


def running(run: Path) -> list[str]:
    """Names of the components whose pid file names a live process."""
    folder = run / "pids"
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.pid") if pid_of(run, p.stem) is not None)


def wait_for(
    what: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    run: Path | None = None,
    name: str | None = None,
) -> None:
    """Poll ``check`` until true; fail with the log tail if the component dies or time runs out."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        with contextlib.suppress(Exception):
            if check():
                return
        if run is not None and name is not None and pid_of(run, name) is None:
            raise StackError(f"{name} exited while waiting for {what}:\n{tail(run, name)}")
        if time.monotonic() > deadline:
            extra = f":\n{tail(run, name)}" if run is not None and name is not None else ""
            raise StackError(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def tail(run: Path, name: str, lines: int = 15) -> str:
    try:
        text = log_path(run, name).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def http_ok(url: str) -> bool:
    """True when GET ``url`` (plain HTTP, a component's health endpoint) answers 200."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status == 200


def https_ok(url: str, *, ca: Path, cert: Path | None = None, key: Path | None = None) -> bool:
    """True when GET ``url`` answers 200 over TLS verified against ``ca``."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key) if key else None)
    with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
        return resp.status == 200


def quiet_ok(argv: Sequence[str | os.PathLike], timeout: float = 10.0) -> bool:
    """True when ``argv`` exits 0 within ``timeout`` (its output is dropped)."""
    try:
        proc = subprocess.run(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def kill(run: Path, name: str) -> bool:
    """SIGKILL the component's process group at once (a machine that goes away); True if it
    ran. ``restart`` starts it again as it was."""
    pid = pid_of(run, name)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    return True
