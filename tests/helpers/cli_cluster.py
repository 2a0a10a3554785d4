"""``trainjob-magics local-cluster`` started as the README starts it, for notebook tests."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.polling import wait_until


def start_cli_cluster(tmp: Path) -> subprocess.Popen[str]:
    """``trainjob-magics local-cluster --kubeconfig KC`` (the venv's console script), started
    and ready: its kubeconfig written and "press Ctrl-C to stop" said."""
    script = Path(sys.executable).with_name("trainjob-magics")
    argv = [str(script)] if script.is_file() else [sys.executable, "-m", "trainjob_magics.cli"]
    argv += ["local-cluster", "--kubeconfig", str(tmp / "kubeconfig")]
    argv += ["--root-dir", str(tmp / "root")]
    log = (tmp / "cluster.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: proc.poll() is not None or "press Ctrl-C" in _log(tmp), timeout=90)
    except AssertionError:
        stop_cli_cluster(proc)
        raise
    assert proc.poll() is None, f"local-cluster exited:\n{_log(tmp)}"
    return proc


def _log(tmp: Path) -> str:
    return (tmp / "cluster.log").read_text(errors="replace")


def stop_cli_cluster(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C, as the README stops it (then SIGKILL if it hangs)."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
