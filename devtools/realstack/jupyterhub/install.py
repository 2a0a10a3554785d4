"""The hub's own software, installed once per version set into the real stack's cache: a venv
with JupyterHub, KubeSpawner and jupyterhub-idle-culler from PyPI, and configurable-http-proxy
(the hub's default proxy, a Node.js program) from npm. Nothing of it goes into the project's
venv or the system's Python."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from devtools.realstack.paths import cache_root
from devtools.realstack.procs import StackError

# reference.md section 12: the versions checked on these machines (2026-12-07)
HUB_PACKAGES = (
    "jupyterhub==6.1.1",
    "jupyterhub-kubespawner==7.1.0",
    "jupyterhub-idle-culler==2.0.0",
)
PROXY_PACKAGE = "configurable-http-proxy@5.3.0"


def _key(items: tuple[str, ...]) -> str:
    return hashlib.sha256(json.dumps([*items, sys.version_info[:2]]).encode()).hexdigest()[:12]


def _run(argv: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n--- {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
        out.flush()
        try:
            proc = subprocess.run(argv, stdout=out, stderr=out, env=env, stdin=subprocess.DEVNULL)
        except FileNotFoundError as exc:
            raise StackError(f"{what}: {argv[0]} is not installed") from exc
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise StackError(f"{what} failed (exit {proc.returncode}): {tail[0]} (log: {log})")


def _base_python() -> str:
    """The interpreter to make the hub's venv from: this one's base, not a venv's."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    return str(base) if base.exists() else sys.executable


def hub_venv(log: Path) -> Path:
    """The hub's venv (built on first use); returns its folder."""
    venv = cache_root() / "jupyterhub" / f"venv-{_key(HUB_PACKAGES)}"
    if (venv / "ok").is_file():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    _run([_base_python(), "-m", "venv", str(venv)], log, "the hub's venv")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-input"]
    _run([*pip, *HUB_PACKAGES], log, "pip install " + " ".join(HUB_PACKAGES))
    (venv / "ok").write_text("\n".join(HUB_PACKAGES))
    return venv


def proxy_bin(log: Path) -> Path:
    """The folder holding ``configurable-http-proxy`` (npm, built on first use)."""
    prefix = cache_root() / "jupyterhub" / f"chp-{_key((PROXY_PACKAGE,))}"
    exe = prefix / "node_modules" / ".bin" / "configurable-http-proxy"
    if (prefix / "ok").is_file() and exe.exists():
        return exe.parent
    if shutil.which("npm") is None:
        raise StackError("the hub's proxy (configurable-http-proxy) needs npm: apt-get install npm")
    shutil.rmtree(prefix, ignore_errors=True)
    prefix.mkdir(parents=True)
    (prefix / "package.json").write_text('{"name": "tjm-hub-proxy", "private": true}\n')
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false"}
    _run(
        ["npm", "install", "--no-audit", "--prefix", str(prefix), PROXY_PACKAGE],
        log,
        f"npm install {PROXY_PACKAGE}",
        env,
    )
    if not exe.exists():
        raise StackError(f"npm install {PROXY_PACKAGE} left no configurable-http-proxy in {prefix}")
    (prefix / "ok").write_text(PROXY_PACKAGE)
    return exe.parent
