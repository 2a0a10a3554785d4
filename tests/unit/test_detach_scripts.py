"""The keep-alive watchdog with detached runs (exec/scripts.py, exec/detach_scripts.py), run
with the local /bin/sh (dash here) as a container would: the watchdog's stdout is the
container's log."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainjob_magics.engine.detach.state import parse_reading
from trainjob_magics.engine.exec import detach_scripts as D
from trainjob_magics.engine.exec import scripts as R

pytestmark = pytest.mark.timeout(60)

COUNT = "for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.5; done; exit {code}"


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[dict[str, str]]:
    host = f"tjm-test-{secrets.token_hex(6)}"
    shm = tmp_path / "shm"  # the pod's /dev/shm (what the local cluster gives each pod)
    shm.mkdir()
    yield {**os.environ, "TMPDIR": str(tmp_path), "HOSTNAME": host, "TRAINJOB_LOCAL_SHM": str(shm)}


def _watchdog(env: dict[str, str], log: Path, idle: float = 2) -> subprocess.Popen:
    proc = subprocess.Popen(R.keep_alive_command(idle), env=env, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT)  # fmt: skip
    pid_file = Path(env["TMPDIR"]) / "trainjob-magics" / "keepalive-pid"
    wait_for(pid_file.exists, 5, "the watchdog's pid file")
    return proc


def _detach(env: dict[str, str], body: str) -> subprocess.CompletedProcess:
    return subprocess.run(D.start_argv(body, ["sh", "-c", body]), env=env, capture_output=True,
                          text=True, timeout=10)  # fmt: skip


def _read(env: dict[str, str]):
    r = subprocess.run(D.read_argv("--sep--", 3), env=env, capture_output=True, text=True)
    return parse_reading(r.stdout, "--sep--")


@pytest.mark.parametrize("code", [3, 0])
def test_a_detached_run_holds_the_watchdog_then_ends_it_with_its_code(pod, tmp_path, code) -> None:
    log = tmp_path / "container.log"
    dog = _watchdog(pod, log, idle=2)
    body = COUNT.format(code=code)
    started = _detach(pod, body)
    assert started.returncode == 0 and started.stdout.startswith("started 1 "), started
    t0 = time.monotonic()
    reading = _read(pod)
    assert reading.run == 1 and reading.alive and reading.command == body
    # no heartbeat comes, yet the watchdog (idle_timeout 2 s) holds while the run lives
    wait_for(lambda: "line-6" in log.read_text(), 20, "the run's last line in the log")
    assert time.monotonic() - t0 > 2 and dog.poll() is None
    assert dog.wait(5) == code
    text = log.read_text()
    assert f"detached run 1 started on {pod['HOSTNAME']}: {body}" in text
    assert re.findall(r"^line-\d$", text, re.M) == [f"line-{i}" for i in range(1, 7)]
    assert f"detached run 1 ended with exit code {code}: ending the trainer" in text
    run_log = tmp_path / "trainjob-magics" / "detached" / "1" / "log"
    assert run_log.read_text().split() == [f"line-{i}" for i in range(1, 7)]
    ended = _read(pod)
    assert (
        not ended.alive
        and ended.exit_code == code
        and ended.tail.split() == ["line-4", "line-5", "line-6"]
    )


def test_a_restarted_watchdog_exits_with_the_runs_nonzero_code_at_once(pod, tmp_path) -> None:
    log = tmp_path / "container.log"
    dog = _watchdog(pod, log, idle=2)
    assert _detach(pod, "exit 5").returncode == 0
    assert dog.wait(10) == 5
    # restartPolicy OnFailure: the kubelet starts the container again in the same pod, whose
    # /dev/shm it keeps (a new writable layer: $TMPDIR is empty again)
    fresh = {**pod, "TMPDIR": str(tmp_path / "restarted")}
    Path(fresh["TMPDIR"]).mkdir()
    again = subprocess.run(R.keep_alive_command(2), env=fresh, capture_output=True, text=True,
                           timeout=5)  # fmt: skip
    assert again.returncode == 5 and "ended with exit code 5" in again.stdout
    marker = Path(pod["TRAINJOB_LOCAL_SHM"]) / f"trainjob-magics.{pod['HOSTNAME']}.exit"
    assert marker.read_text().strip() == "5"
    assert not Path(f"/dev/shm/trainjob-magics.{pod['HOSTNAME']}.exit").exists()


def test_one_detached_run_at_a_time(pod, tmp_path) -> None:
    dog = _watchdog(pod, tmp_path / "container.log", idle=30)
    try:
        assert _detach(pod, "sleep 30").returncode == 0
        busy = _detach(pod, "echo second")
        assert busy.returncode == D.BUSY_EXIT and busy.stdout.strip() == "busy 1"
    finally:
        dog.terminate()
        assert dog.wait(5) == 143
        subprocess.run(["pkill", "-f", "-x", "sleep 30"], check=False)


def test_a_pod_without_the_watchdog_refuses_to_detach(pod) -> None:
    refused = _detach(pod, "echo hi")
    assert refused.returncode == D.NO_WATCHDOG_EXIT, refused
    assert "no keep-alive watchdog" in refused.stdout


def test_a_run_killed_without_its_code_ends_the_watchdog_with_137(pod, tmp_path) -> None:
    dog = _watchdog(pod, tmp_path / "container.log", idle=2)
    started = _detach(pod, "sleep 40")
    runner = int(started.stdout.split()[2])
    subprocess.run(["sh", "-c", f"kill -9 {runner}; pkill -KILL -P {runner}"], check=False)
    assert dog.wait(20) in (137, 143)


def test_the_keep_alive_is_left_alone_by_the_kubelets_expansion() -> None:
    """The kubelet expands "$(NAME)" and turns "$$" into "$" in a container's command
    (kubecontainer.ExpandContainerCommandAndArgs): the keep-alive must hold neither."""
    for arg in R.keep_alive_command(1800):
        assert "$$" not in arg and not re.search(r"\$\([A-Za-z_][A-Za-z0-9_.-]*\)", arg), arg
