"""Every way a transfer ends (issue 37), on the local cluster: none leaves a half-written file at
the destination or a staging directory on either side, and each failure is one line that says
what to do. Ctrl-C (a real SIGINT) in each phase, the API's and the magics' (the magics run the
copy in a worker thread, which must stop too), the session closed, the timeout; a process
killed with SIGKILL mid-upload and mid-download leaves its staging directory, which the next
transfer into the same directory sweeps; a live transfer of another process into the same
directory is never swept (files/staging.py).

The local cluster's pods are this machine's directories (``pod``), so the pod's side is read
here; a transfer is held at a quarter by its progress callback (which runs in the thread that
sends or receives), so each event lands mid-stream whatever the machine's speed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.polling import wait_until
from tests.helpers.shell import magics_shell
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine.errors import TransferError, TransferInterruptedError
from trainjob_magics.engine.files import archive, staging
from trainjob_magics.engine.files.staging import changed_since
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics.failures import TrainJobMagicError

pytestmark = pytest.mark.timeout(300)

MIB = 1 << 20
SIZE = 64 * MIB
UP = ".trainjob-upload-"
DOWN = ".trainjob-download-"


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[TrainJobSession]:
    s = connect(
        "torch-distributed",
        num_nodes=1,
        config_file=str(local_cluster.kubeconfig_path),
        timeout=60,
    )
    yield s
    s.close(timeout=30)


@pytest.fixture(scope="module")
def pod(session: TrainJobSession, local_cluster: LocalCluster) -> Path:
    return Path(local_cluster.pod_dir(session.namespace, session.pod))


@pytest.fixture(scope="module")
def big(pod: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A SIZE-byte file here, the same bytes in the pod as ``seed.bin``, and their sha256."""
    data = os.urandom(SIZE)
    local = tmp_path_factory.mktemp("ends") / "big.bin"
    local.write_bytes(data)
    (pod / "seed.bin").write_bytes(data)
    (pod / "small.txt").write_text("small\n")
    return local, hashlib.sha256(data).hexdigest()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def staged(root: Path, prefix: str) -> list[Path]:
    """The staging directories in ``root`` (``prefix``: an upload's or a download's)."""
    return sorted(p for p in root.iterdir() if p.name.startswith(prefix)) if root.exists() else []


def lock_free(stage: Path) -> bool:
    """No process holds the staging directory's lock (its transfer's attempt ended)."""
    import fcntl

    if not (stage / "lock").exists():
        return True  # (before issue 37 there was no lock to tell by)
    fd = os.open(stage / "lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def stopped(session: TrainJobSession) -> bool:
    """A transfer of the session was told to stop (a Ctrl-C, its cancel event, close())."""
    return any(s.is_set() for s in list(getattr(session, "_transfers", ())))


def at_quarter(action: Callable[[], None], then: Callable[[], Any]) -> Callable[[int, int], None]:
    """A progress callback: once a quarter went, ``action()``; from then on each call waits
    until ``then()`` holds (the stream goes no further until the event was handled)."""
    fired: list[bool] = []

    def progress(done: int, total: int) -> None:
        if fired:
            wait_until(then, timeout=20)
        elif total and done >= total // 4:
            fired.append(True)
            action()
            wait_until(then, timeout=20)

    return progress


def ctrl_c() -> None:
    """A real SIGINT to this process (the main thread gets the KeyboardInterrupt)."""
    os.kill(os.getpid(), signal.SIGINT)


def raised(fn: Callable[[], Any]) -> BaseException:
    """What ``fn`` raised (a KeyboardInterrupt too: it must not end the test run)."""
    try:
        fn()
    except BaseException as exc:  # a KeyboardInterrupt too
        return exc
    raise AssertionError("it did not raise")


def one_line(message: str) -> str:
    assert "\n" not in message and message.strip() == message, repr(message)
    return message


def no_transfer_threads() -> bool:
    names = ("trainjob-upload", "trainjob-tar", "trainjob-unpack", "trainjob-magics-worker")
    return not [t for t in threading.enumerate() if t.name.startswith(names)]


# ------------------------------------------------------------------ Ctrl-C in the Python API


def test_ctrl_c_stops_an_upload_leaving_nothing_in_the_pod(
    session: TrainJobSession, pod: Path, big: tuple[Path, str]
) -> None:
    (pod / "int-up").mkdir()
    (pod / "int-up" / "x.bin").write_bytes(b"the copy that was there")
    error = raised(
        lambda: session.upload(
            str(big[0]), "int-up/x.bin", progress=at_quarter(ctrl_c, lambda: stopped(session))
        )
    )
    assert os.listdir(pod / "int-up") == ["x.bin"]  # no staging directory
    assert (pod / "int-up" / "x.bin").read_bytes() == b"the copy that was there"
    wait_until(no_transfer_threads)  # nothing goes on in the background
    assert isinstance(error, TransferInterruptedError), repr(error)
    message = one_line(str(error))
    assert message == (
        f"interrupted: upload of {big[0]} to int-up/x.bin stopped; nothing was left in the pod; "
        "run it again to copy it"
    )


def test_ctrl_c_stops_a_download_leaving_nothing_here(
    session: TrainJobSession, big: tuple[Path, str], tmp_path: Path
) -> None:
    error = raised(
        lambda: session.download(
            "seed.bin", str(tmp_path / "x.bin"), progress=at_quarter(ctrl_c, lambda: True)
        )
    )
    assert isinstance(error, TransferInterruptedError), repr(error)
    message = one_line(str(error))
    assert message.startswith("interrupted: download of seed.bin from pod ")
    assert message.endswith(
        f"stopped; nothing was written to {tmp_path / 'x.bin'}; run it again to copy it"
    )
    assert os.listdir(tmp_path) == []
    wait_until(no_transfer_threads)


def test_ctrl_c_while_a_download_is_moved_into_place_waits_until_it_is_whole(
    session: TrainJobSession, pod: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory merged into one that exists is moved file by file: a Ctrl-C on the way
    waits until every file is in place, and then says that it ended."""
    tree = pod / "tree"
    tree.mkdir()
    for i in range(6):
        (tree / f"f{i}").write_text(f"new {i}")
    dest = tmp_path / "tree"
    dest.mkdir()
    (dest / "kept").write_text("mine")
    replace = os.replace
    moved: list[str] = []

    def replace_then_ctrl_c(src: Any, dst: Any) -> None:
        if DOWN in str(src):
            moved.append(str(dst))
            if len(moved) == 2:
                ctrl_c()  # mid-merge
        replace(src, dst)

    monkeypatch.setattr(archive.os, "replace", replace_then_ctrl_c)
    error = raised(lambda: session.download("tree", str(dest)))
    monkeypatch.undo()
    assert len(moved) == 6, moved  # every file moved, none left behind
    assert sorted(os.listdir(dest)) == ["f0", "f1", "f2", "f3", "f4", "f5", "kept"]
    assert all((dest / f"f{i}").read_text() == f"new {i}" for i in range(6))
    assert staged(tmp_path, DOWN) == []
    assert isinstance(error, TransferInterruptedError), repr(error)
    assert one_line(str(error)).startswith("interrupted after the download of tree from pod ")
    assert str(error).endswith(f"had ended: it is in place in {dest}")


# ------------------------------------------------------------------ Ctrl-C in the magics


@pytest.fixture(scope="module")
def magics(local_cluster: LocalCluster, big: tuple[Path, str]) -> Iterator[InteractiveShell]:
    """The magics with a session of their own, ``ends`` (its pod holds ``seed.bin`` too)."""
    with magics_shell(local_cluster.kubeconfig_path, widgets="off") as sh:
        sh.run_line_magic("trainjob_connect", "torch-distributed --nodes 1 --as ends")
        s = magic_session(sh)
        (Path(local_cluster.pod_dir(s.namespace, s.pod)) / "seed.bin").write_bytes(
            big[0].read_bytes()
        )
        yield sh
        sh.run_line_magic("trainjob_close", "ends")


def magic_session(sh: InteractiveShell) -> TrainJobSession:
    registry = sh.magics_manager.registry["TrainJobMagics"].registry
    session: TrainJobSession = registry.get("ends").session
    return session


@pytest.mark.parametrize("kind", ["upload", "download"])
def test_ctrl_c_in_a_magic_stops_the_copy_in_its_worker(
    magics: InteractiveShell,
    local_cluster: LocalCluster,
    big: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    """The magic's copy runs in a worker thread: a Ctrl-C stops it there too (it used to go on
    and land after the cell said 'abandoned'), and the cell fails in one line."""
    s = magic_session(magics)
    pod = Path(local_cluster.pod_dir(s.namespace, s.pod))
    drops = at_quarter(ctrl_c, lambda: stopped(s))
    wrapped = s.upload if kind == "upload" else s.download

    def held(*args: Any, **kwargs: Any) -> Any:  # the magic's progress, held at a quarter
        outer = kwargs["progress"]

        def both(done: int, total: int) -> None:
            outer(done, total)
            drops(done, total)

        return wrapped(*args, **{**kwargs, "progress": both})

    monkeypatch.setattr(s, kind, held)
    (pod / "mag").mkdir(exist_ok=True)
    line = f"{big[0]} mag/x.bin" if kind == "upload" else f"seed.bin {tmp_path}/x.bin"
    error = raised(lambda: magics.run_line_magic(f"trainjob_{kind}", f"{line} --session ends"))
    assert isinstance(error, TrainJobMagicError), repr(error)
    message = one_line(str(error))
    assert message.startswith(f"interrupted: {kind} of ") and message.endswith(
        "run it again to copy it"
    )
    wait_until(no_transfer_threads)  # the worker has ended: nothing lands later
    assert os.listdir(pod / "mag") == [] and os.listdir(tmp_path) == []


# ------------------------------------------------------------------ the session closed


@pytest.mark.parametrize("kind", ["upload", "download"])
def test_closing_the_session_stops_its_transfers_first(
    local_cluster: LocalCluster, big: tuple[Path, str], tmp_path: Path, kind: str
) -> None:
    s = connect(
        "torch-distributed",
        num_nodes=1,
        config_file=str(local_cluster.kubeconfig_path),
        timeout=60,
    )
    pod = Path(local_cluster.pod_dir(s.namespace, s.pod))
    (pod / "seed.bin").write_bytes(big[0].read_bytes())
    (pod / "up").mkdir()
    half = threading.Event()
    box: dict[str, BaseException] = {}

    def work() -> None:
        progress = at_quarter(half.set, lambda: stopped(s) or s.closed)
        try:
            if kind == "upload":
                s.upload(str(big[0]), "up/x.bin", progress=progress)
            else:
                s.download("seed.bin", str(tmp_path / "x.bin"), progress=progress)
        except BaseException as exc:  # looked at below
            box["error"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    try:
        assert half.wait(60)
    finally:
        s.close(timeout=30)
    thread.join(60)
    if kind == "upload":
        assert os.listdir(pod / "up") == []  # removed before the pod went
    else:
        assert os.listdir(tmp_path) == []
    error = box.get("error")
    assert isinstance(error, TransferInterruptedError), repr(error)
    message = one_line(str(error))
    assert message.startswith(f"TrainJob session {s.name} was closed: {kind} of ")
    assert message.endswith("; connect a new session to copy it")
    if kind == "upload":
        assert "stopped; nothing was left in the pod" in message
    else:
        assert f"stopped; nothing was written to {tmp_path / 'x.bin'}" in message


# ------------------------------------------------------------------ the timeout


@pytest.mark.parametrize("kind", ["upload", "download"])
def test_a_transfer_past_its_timeout_fails_in_one_line_leaving_nothing(
    session: TrainJobSession, pod: Path, big: tuple[Path, str], tmp_path: Path, kind: str
) -> None:
    limit = 3.0
    started = time.monotonic()
    progress = at_quarter(lambda: None, lambda: time.monotonic() > started + limit)
    (pod / "to").mkdir(exist_ok=True)
    with pytest.raises(TransferError) as info:
        if kind == "upload":
            session.upload(str(big[0]), "to/x.bin", progress=progress, timeout=limit)
        else:
            session.download("seed.bin", str(tmp_path / "x.bin"), progress=progress, timeout=limit)
    message = one_line(str(info.value))
    assert f"did not finish within {limit:g}s (the timeout)" in message
    assert message.endswith("; run it again with a longer timeout (or none)")
    if kind == "upload":
        assert "nothing was left in the pod" in message
        assert os.listdir(pod / "to") == []  # the pod's attempt was stopped, its stage removed
    else:
        assert f"nothing was written to {tmp_path / 'x.bin'}" in message
        assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ a process killed


SCRIPT = """
import os, sys, time
from trainjob_magics import attach
kind, name, kubeconfig, src, dst, go = sys.argv[1:7]
s = attach(name, config_file=kubeconfig, timeout=60)
said = []
def progress(done, total):
    if total and done >= total // 4 and not said:
        said.append(1)
        print("held", flush=True)
        while not os.path.exists(go):  # held here until killed, or told to go on
            time.sleep(0.05)
getattr(s, kind)(src, dst, progress=progress)
print("ended", flush=True)
"""


@pytest.fixture
def other_process(
    local_cluster: LocalCluster, session: TrainJobSession, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start a transfer in another Python process (attached to the same TrainJob), held at a
    quarter until ``tmp_path/go`` exists; returns once it said so."""
    procs: list[subprocess.Popen[str]] = []

    def start(kind: str, src: str, dst: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-c", SCRIPT, kind, session.name]
        argv += [str(local_cluster.kubeconfig_path), src, dst, str(tmp_path / "go")]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n", proc.poll()
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_an_upload_killed_mid_stream_is_swept_by_the_next_upload_there(
    session: TrainJobSession,
    pod: Path,
    big: tuple[Path, str],
    tmp_path: Path,
    other_process: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    where = pod / "kill-up"
    where.mkdir()
    proc = other_process("upload", str(big[0]), "kill-up/x.bin")
    (stage,) = staged(where, UP)
    proc.send_signal(signal.SIGKILL)  # a kernel killed: no cleanup at all
    proc.wait()
    wait_until(lambda: lock_free(stage))  # the pod's attempt saw its stdin end and stopped
    assert not (where / "x.bin").exists() and stage.exists()
    small = tmp_path / "small.txt"
    small.write_text("small")
    # younger than the bound: it could be a live upload between two attempts
    session.upload(str(small), "kill-up/a.txt")
    assert staged(where, UP) == [stage]
    monkeypatch.setattr(staging, "STALE_AFTER", 1.0)
    wait_until(lambda: not changed_since(stage, time.time() - 1.0))
    with caplog.at_level(logging.INFO, logger="trainjob_magics.engine.files.transfer"):
        session.upload(str(small), "kill-up/b.txt")
    assert sorted(os.listdir(where)) == ["a.txt", "b.txt"]
    said = f"1 staging directory of uploads that never ended in kill-up in pod {session.pod}"
    assert f"{said}: {stage.name}" in caplog.text


def test_a_download_killed_mid_stream_is_swept_by_the_next_download_there(
    session: TrainJobSession,
    tmp_path: Path,
    other_process: Callable[..., subprocess.Popen[str]],
) -> None:
    where = tmp_path / "dl"
    where.mkdir()
    proc = other_process("download", "seed.bin", str(where / "x.bin"))
    (stage,) = staged(where, DOWN)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert staged(where, DOWN) == [stage] and not (where / "x.bin").exists()
    # its lock died with it: swept at once, whatever its age
    session.download("small.txt", str(where / "y.txt"))
    assert os.listdir(where) == ["y.txt"]


def test_a_live_download_of_another_process_into_the_same_directory_is_never_swept(
    session: TrainJobSession,
    big: tuple[Path, str],
    tmp_path: Path,
    other_process: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where = tmp_path / "dl"
    where.mkdir()
    proc = other_process("download", "seed.bin", str(where / "x.bin"))
    (stage,) = staged(where, DOWN)
    monkeypatch.setattr(staging, "STALE_AFTER", 0.0)  # any age: the lock alone protects it
    session.download("small.txt", str(where / "y.txt"))
    assert staged(where, DOWN) == [stage]
    (tmp_path / "go").touch()
    assert proc.stdout is not None and proc.stdout.readline() == "ended\n"
    assert proc.wait() == 0
    assert sorted(os.listdir(where)) == ["x.bin", "y.txt"]
    assert sha256_of(where / "x.bin") == big[1]


def test_a_live_upload_of_another_process_into_the_same_directory_is_never_swept(
    session: TrainJobSession,
    pod: Path,
    big: tuple[Path, str],
    tmp_path: Path,
    other_process: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Held mid-stream, the other upload's staging directory gets older than the bound; its
    attempt, running in the pod, holds the lock: the sweep leaves it."""
    where = pod / "live-up"
    where.mkdir()
    proc = other_process("upload", str(big[0]), "live-up/x.bin")
    (stage,) = staged(where, UP)
    monkeypatch.setattr(staging, "STALE_AFTER", 1.0)
    wait_until(lambda: not changed_since(stage, time.time() - 1.0))
    small = tmp_path / "small.txt"
    small.write_text("small")
    session.upload(str(small), "live-up/a.txt")
    assert staged(where, UP) == [stage]
    (tmp_path / "go").touch()
    assert proc.stdout is not None and proc.stdout.readline() == "ended\n"
    assert proc.wait() == 0
    assert sorted(os.listdir(where)) == ["a.txt", "x.bin"]
    assert sha256_of(where / "x.bin") == big[1]
