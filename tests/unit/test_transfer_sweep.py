"""The sweep of staging directories whose transfer never ended (files/staging.py, and the pod's
side in pod_python.py / manifest.py), rule by rule: a lock held by a live process protects a
directory whatever its age; without a live holder, a download's goes at once and an upload's
once nothing in it changed for the bound; names that are not ours, links and files are left
alone; a sweep that stopped halfway is finished. The pod's scripts run here in a real ``sh``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainjob_magics.engine.files import manifest
from trainjob_magics.engine.files.archive import TarStream
from trainjob_magics.engine.files.manifest import upload_argv, upload_tar_argv
from trainjob_magics.engine.files.resume import SendLedger
from trainjob_magics.engine.files.staging import LocalStage, no_interrupt, sweep_local

UP = ".trainjob-upload-"
DOWN = ".trainjob-download-"


def sent(stream: TarStream) -> bytes:
    archive = stream.read()
    ledger = SendLedger()
    ledger.adopt(stream.starts, {n: f.size for n, f in stream.files.items()}, stream.marks)
    return archive + ledger.trailer()


@pytest.fixture
def holder() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes holding a lock (``hold(path, "sh"|"ex")``), ended at teardown."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def hold(procs: list[subprocess.Popen[str]], lock: Path, how: str) -> subprocess.Popen[str]:
    """Another process that holds ``lock`` (shared, as an upload's attempt; exclusive, as a
    download) until its stdin closes."""
    code = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT)\n"
        f"fcntl.flock(fd, fcntl.LOCK_{how.upper()})\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def stages(root: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(prefix))


def make_upload_stages(parent: Path) -> None:
    """What uploads that never ended leave, and what is not theirs."""
    for token in ("aaaa", "bbbb"):
        data = parent / f"{UP}{token}" / "data"
        data.mkdir(parents=True)
        (data / "part.bin").write_bytes(b"x" * 1000)
        (parent / f"{UP}{token}" / "lock").touch()
    (parent / f"{UP}notes").mkdir()  # not a token: a name of the user's
    (parent / "elsewhere").mkdir()
    (parent / f"{UP}cccc").symlink_to("elsewhere")  # a link: never followed, never removed
    (parent / f"{UP}dddd").write_text("a file")
    (parent / f"{UP}gone-1234").mkdir()  # a sweep that stopped halfway
    (parent / f"{UP}gone-1234" / "left").write_text("x")


KEPT = [f"{UP}cccc", f"{UP}dddd", f"{UP}notes"]


@pytest.mark.parametrize("way", ["python3", "sh"])
def test_an_upload_sweeps_what_nothing_holds_and_nothing_changed_in(
    tmp_path: Path, holder: list[subprocess.Popen[str]], way: str
) -> None:
    parent = tmp_path / "pod"
    parent.mkdir()
    make_upload_stages(parent)
    held = hold(holder, parent / f"{UP}bbbb" / "lock", "sh")  # an attempt runs there
    src = tmp_path / "f.txt"
    src.write_text("new")

    def upload(name: str, stale: float) -> subprocess.CompletedProcess[bytes]:
        if way == "python3":
            argv = upload_argv(str(parent), name, True, "eeee", "new", stale)
            stdin = sent(TarStream(src, name))
        else:
            argv = upload_tar_argv(str(parent), name, "eeee", True, stale)
            stdin = TarStream(src, name).read()
        done = subprocess.run(argv, input=stdin, capture_output=True, check=False)
        assert done.returncode == 0, done.stderr
        if way == "sh":  # tar's way: the client moves it into place once checked
            shutil.move(parent / f"{UP}eeee" / "data" / name, parent / name)
            shutil.rmtree(parent / f"{UP}eeee")
        return done

    upload("a.txt", 3600)  # everything younger than an hour: only the half-swept one goes
    assert stages(parent, UP) == sorted([f"{UP}aaaa", f"{UP}bbbb", *KEPT])
    done = upload("b.txt", 0)  # any age: what no process holds goes
    assert stages(parent, UP) == sorted([f"{UP}bbbb", *KEPT])
    assert b"#trainjob-swept " in done.stderr
    assert (parent / "elsewhere").is_dir() and (parent / f"{UP}dddd").read_text() == "a file"
    assert held.stdin is not None
    held.stdin.close()  # its attempt ended
    held.wait()
    upload("c.txt", 0)
    assert stages(parent, UP) == KEPT
    assert (parent / "c.txt").read_text() == "new"


def test_an_upload_attempt_holds_its_stage_and_a_swept_stage_is_not_resumed(
    tmp_path: Path,
) -> None:
    """A resumed attempt whose staging directory was swept meanwhile says so (the client then
    starts again): it never writes into a directory that is gone."""
    parent = tmp_path / "pod"
    parent.mkdir()
    src = tmp_path / "f.txt"
    src.write_text("x" * 100)
    argv = upload_argv(str(parent), "f.txt", True, "ffff", "resume")
    done = subprocess.run(argv, input=sent(TarStream(src, "f.txt")), capture_output=True)
    assert done.returncode == 4 and b"#trainjob-nostage" in done.stderr
    assert os.listdir(parent) == []


def test_a_download_sweeps_what_no_live_process_holds(
    tmp_path: Path, holder: list[subprocess.Popen[str]]
) -> None:
    parent = tmp_path / "local"
    parent.mkdir()
    mine = LocalStage(parent)  # this process's, live
    dead = parent / f"{DOWN}dead"  # its process was killed: the lock is free
    (dead / "data").mkdir(parents=True)
    (dead / "lock").touch()
    other = parent / f"{DOWN}other"  # another live process's
    (other / "data").mkdir(parents=True)
    held = hold(holder, other / "lock", "ex")
    old = parent / f"{DOWN}old"  # no lock file (an older version's): by its age
    (old / "data").mkdir(parents=True)
    (parent / f"{DOWN}gone-1").mkdir()
    (parent / f"{DOWN}file").write_text("not a directory")
    assert sweep_local(parent) == [dead.name]
    live = sorted([mine.path.name, other.name, old.name, f"{DOWN}file"])
    assert stages(parent, DOWN) == live
    assert sweep_local(parent, stale=0) == [old.name]
    assert held.stdin is not None
    held.stdin.close()
    held.wait()
    assert sweep_local(parent, stale=0) == [other.name]
    assert stages(parent, DOWN) == sorted([mine.path.name, f"{DOWN}file"])
    mine.remove()
    assert stages(parent, DOWN) == [f"{DOWN}file"]


def test_a_download_stage_is_locked_before_it_has_a_lock_file(tmp_path: Path) -> None:
    stage = LocalStage(tmp_path)
    try:
        assert sorted(os.listdir(stage.path)) == ["data", "lock"]
        fd = os.open(stage.path / "lock", os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        stage.remove()
    assert os.listdir(tmp_path) == []


def test_a_ctrl_c_waits_until_the_block_ends() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), no_interrupt():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("the block went on")
    assert done == ["the block went on"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_clean_script_removes_the_stage_of_its_token_only(tmp_path: Path) -> None:
    parent = tmp_path / "pod"
    (parent / f"{UP}abcd" / "data").mkdir(parents=True)
    (parent / f"{UP}abce" / "data").mkdir(parents=True)
    done = subprocess.run(manifest.clean_argv(str(parent), "x", "abcd"), capture_output=True)
    assert done.returncode == 0, done.stderr
    assert os.listdir(parent) == [f"{UP}abce"]
