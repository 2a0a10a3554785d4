"""The POSIX-sh scripts of engine/remote.py, run with the local /bin/sh (dash here)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

import pytest

from tests.helpers.end_marks import unmarked
from trainjob_magics.engine.errors import InvalidInputError
from trainjob_magics.engine.exec import scripts as R

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp_path)}


def test_wrapper_keeps_argv_exit_code_and_removes_pid_file(env, tmp_path) -> None:
    eid = R.new_exec_id()
    weird = "a 'b' \"c\" \\d $(e) `f` \n\0g".replace("\0", "")
    r = subprocess.run(R.wrap(eid, ["sh", "-c", 'printf "%s" "$1"; exit 7', "x", weird]), env=env,
                       capture_output=True)  # fmt: skip
    r = unmarked(r, eid)  # the end marks, each with the exit code, on both streams
    assert r.returncode == 7 and r.stdout == weird.encode() and r.stderr == b""
    state = tmp_path / "trainjob-magics"
    assert (state / "heartbeat").exists() and not list(state.glob("*.pid"))


def test_stopper_without_pid_file_reports_nothing_to_stop(env) -> None:
    r = subprocess.run(R.stop_argv("nope", 0.1, 0.1), env=env, capture_output=True, text=True)
    assert r.returncode == 3 and "nothing to stop" in r.stdout


def test_stopper_escalates_to_sigterm_for_sigint_ignoring_children(env) -> None:
    eid = R.new_exec_id()
    p = subprocess.Popen(R.wrap(eid, ["sh", "-c", "sleep 1000 & sleep 1000; wait"]), env=env,
                         start_new_session=True)  # fmt: skip
    time.sleep(0.4)
    t0 = time.monotonic()
    r = subprocess.run(R.stop_argv(eid, 0.3, 0.3), env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "SIGTERM" in r.stdout, r.stdout
    assert p.wait(5) != 0 and time.monotonic() - t0 < 3


def _gone(pid: int) -> bool:
    """No such process, or only its zombie left."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_stopper_without_proc_kills_the_whole_process_group(env, tmp_path) -> None:
    """On a host without /proc the stopper signals the wrapper's process group, not the wrapper
    alone: the command's shell and its background child (which ignores SIGINT, as a
    non-interactive shell's `&` children do) go too."""
    eid = R.new_exec_id()
    child = tmp_path / "child.pid"
    cmd = f'sleep 1000 & echo $$ $! >"{child}"; wait'
    p = subprocess.Popen(R.wrap(eid, ["sh", "-c", cmd]), env=env,
                         start_new_session=True)  # fmt: skip
    reaper = threading.Thread(target=p.wait, daemon=True)  # a pod's exec parent reaps it too
    reaper.start()
    deadline = time.monotonic() + 5
    while not child.exists() or len(child.read_text().split()) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pids = [p.pid, *map(int, child.read_text().split())]
    try:
        argv = R.stop_argv(eid, 0.3, 0.3, proc=str(tmp_path / "no-proc"))
        r = subprocess.run(argv, env=env, capture_output=True, text=True)
        assert r.returncode == 0 and "without /proc" in r.stdout, r.stdout
        deadline = time.monotonic() + 3
        while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [pid for pid in pids if not _gone(pid)] == [], "survived the stopper"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        reaper.join(5)


def test_stopper_stops_what_a_killed_wrapper_left(env, tmp_path) -> None:
    """containerd SIGKILLs an exec's own process, the wrapper, when its stream is cut (a kubelet
    restart, seen on the real stack): the command, reparented, runs on in the wrapper's
    process group, where the stopper finds it. Once that is gone too, nothing is left."""
    eid = R.new_exec_id()
    child = tmp_path / "child.pid"
    cmd = f'echo $$ >"{child}"; while :; do sleep 0.1; done'
    p = subprocess.Popen(R.wrap(eid, ["sh", "-c", cmd]), env=env,
                         start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 5
        while not child.exists() or not child.read_text().strip():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        shell = int(child.read_text())
        os.kill(p.pid, signal.SIGKILL)
        p.wait(5)
        assert not _gone(shell)
        r = subprocess.run(R.stop_argv(eid, 0.3, 0.3), env=env, capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.startswith("stopped"), r.stdout
        deadline = time.monotonic() + 3
        while not _gone(shell) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(shell), "the command left by the killed wrapper survived the stopper"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    (tmp_path / "trainjob-magics" / f"{eid}.pid").write_text(f"{p.pid}\n")  # all of it gone
    r = subprocess.run(R.stop_argv(eid, 0.3, 0.3), env=env, capture_output=True, text=True)
    assert r.returncode == 3 and "nothing to stop" in r.stdout, r.stdout


def test_watchdog_exits_without_heartbeat_and_stays_with_one(env) -> None:
    p = subprocess.Popen(R.keep_alive_command(2), env=env, stdout=subprocess.PIPE, text=True)
    for _ in range(6):
        time.sleep(0.5)
        subprocess.run(R.heartbeat_argv(), env=env, check=True)
    assert p.poll() is None
    assert p.wait(8) == 0 and "no heartbeat" in p.stdout.read()


def test_watchdog_ends_at_once_on_sigterm_as_a_killed_process(env) -> None:
    """143, not 0: a deleted or evicted pod must end Failed, so its Job replaces it; a 0 would
    complete the Job's index and the TrainJob with it."""
    p = subprocess.Popen(R.keep_alive_command(600), env=env, stdout=subprocess.PIPE, text=True)
    assert "idle watchdog" in (p.stdout.readline() if p.stdout else "")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(5) == 143 and time.monotonic() - t0 < 3


def test_idle_timeout_validation_and_off() -> None:
    assert R.validate_idle_timeout(None) is None and R.validate_idle_timeout(0) is None
    assert R.validate_idle_timeout(60) == 60.0
    for bad in (-1, 1, "10", True, float("inf")):
        with pytest.raises(InvalidInputError):
            R.validate_idle_timeout(bad)
    assert R.keep_alive_command(None) == ["sleep", "infinity"]
    assert R.wants_wrapper(["sh", "-c", "x"]) and not R.wants_wrapper(["python", "x.py"])
