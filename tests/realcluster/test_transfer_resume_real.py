"""Transfers that survive a dropped stream, on a real cluster (the issue's case: a large
download whose exec stream through the API server ended early): a TCP proxy in front of the
API server (tests/helpers/faultproxy.py) resets the connection three times during a 1 GB
download and a 1 GB upload; each resumes by file and byte and is checked by sha256, each retry
said in one line. Out of retries: one line, nothing half-written here or in the pod. An upload
killed mid-stream (SIGKILL) or stopped by Ctrl-C (issue 37): the killed one's staging directory
is swept by the next upload there, the stopped one leaves nothing.

``TRAINJOB_MAGICS_E2E_TRANSFER_MB`` sets the size (default 1024). The trainer image needs
python3 (resume by byte) and ``head``/``sha256sum``; ``tests/integration/test_realcluster_suite.py``
runs this module against the local cluster too.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.faultproxy import FaultProxy
from tests.helpers.polling import wait_until
from tests.realcluster.settings import KUBECONFIG, NAMESPACE, NEEDS_CLUSTER, RUNTIMES, WAIT
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine.errors import TransferError, TransferInterruptedError
from trainjob_magics.engine.files import staging
from trainjob_magics.engine.files.resume import CHECKPOINT

RUNTIME = RUNTIMES[0]
MIB = 1 << 20
SIZE = int(os.environ.get("TRAINJOB_MAGICS_E2E_TRANSFER_MB", "1024")) * MIB
CUTS = (0.2, 0.45, 0.7)
RETRY = r"{what}: the stream ended at [\d.]+ [KMG]iB of [\d.]+ [MG]iB; resuming \(retry {n} of 3\)"

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800), NEEDS_CLUSTER]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy]:
    cfg = tmp_path_factory.mktemp("resume-real") / "kubeconfig"
    p = FaultProxy.for_kubeconfig(Path(KUBECONFIG), cfg)
    p.config = cfg  # type: ignore[attr-defined]
    yield p
    p.close()


@pytest.fixture(scope="module")
def session(proxy: FaultProxy) -> Iterator[TrainJobSession]:
    cfg = str(proxy.config)  # type: ignore[attr-defined]
    s = connect(RUNTIME, config_file=cfg, namespace=NAMESPACE, timeout=WAIT, num_nodes=1)
    yield s
    s.close(timeout=300)


@pytest.fixture(scope="module")
def seed(session: TrainJobSession) -> Iterator[str]:
    """SIZE random bytes in the pod (``seed-large.bin``, the issue's name); their sha256."""
    made = session.execute(
        f"mkdir -p resume && head -c {SIZE} /dev/urandom > resume/seed-large.bin && "
        "sha256sum resume/seed-large.bin",
        timeout=600,
    )
    assert made.ok, made.stderr
    yield made.stdout.split()[0]
    session.execute("rm -rf resume")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def cutter(proxy: FaultProxy, at: tuple[float, ...]) -> Callable[[int, int], None]:
    left = list(at)

    def progress(done: int, total: int) -> None:
        if left and total and done >= left[0] * total:
            left.pop(0)
            proxy.drop_established()

    return progress


def every(proxy: FaultProxy, step: float) -> Callable[[int, int], None]:
    last = [0]

    def progress(done: int, total: int) -> None:
        if total and done - last[0] >= step * total:
            last[0] = done
            proxy.drop_established()
        last[0] = min(last[0], done)

    return progress


def test_a_download_cut_three_times_resumes(
    session: TrainJobSession, proxy: FaultProxy, seed: str, tmp_path: Path
) -> None:
    lines: list[str] = []
    before = proxy.bytes_down
    out = tmp_path / "seed-large.bin"
    res = session.download(
        "resume/seed-large.bin",
        str(out),
        progress=cutter(proxy, CUTS),
        on_retry=lines.append,
        timeout=1200,
    )
    assert res.verified == "sha256" and res.bytes == SIZE
    assert sha256_of(out) == seed
    assert [
        re.fullmatch(RETRY.format(what="download", n=n), line) is not None
        for n, line in enumerate(lines, 1)
    ] == [True] * 3, lines
    assert proxy.bytes_down - before < SIZE + 3 * (CHECKPOINT + 32 * MIB)  # resumed
    assert [p.name for p in tmp_path.iterdir()] == ["seed-large.bin"]


def test_an_upload_cut_three_times_resumes(
    session: TrainJobSession, proxy: FaultProxy, seed: str, tmp_path: Path
) -> None:
    local = tmp_path / "up.bin"
    block, sha, left = os.urandom(16 * MIB + 7), hashlib.sha256(), SIZE
    with open(local, "wb") as fh:  # a random block, no multiple of the checkpoint, repeated
        while left:
            piece = block[: min(left, len(block))]
            fh.write(piece)
            sha.update(piece)
            left -= len(piece)
    lines: list[str] = []
    before = proxy.bytes_up
    res = session.upload(
        str(local),
        "resume/up/landed.bin",
        progress=cutter(proxy, CUTS),
        on_retry=lines.append,
        timeout=1200,
    )
    assert res.verified == "sha256" and res.bytes == SIZE
    assert [
        re.fullmatch(RETRY.format(what="upload", n=n), line) is not None
        for n, line in enumerate(lines, 1)
    ] == [True] * 3, lines
    # a cut resends a checkpoint plus what the API server, kubelet and sockets held in flight
    # (a restart would resend 20 % or more)
    assert proxy.bytes_up - before < SIZE + 3 * (CHECKPOINT + 32 * MIB)
    landed = session.execute("sha256sum resume/up/landed.bin && ls -A resume/up", timeout=600)
    assert landed.stdout.split()[0] == sha.hexdigest()
    assert landed.stdout.split()[2:] == ["landed.bin"]  # no staging directory left


def test_out_of_retries_fails_in_one_line_leaving_nothing(
    session: TrainJobSession, proxy: FaultProxy, seed: str, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(TransferError) as down:
        session.download(
            "resume/seed-large.bin", str(dest / "x.bin"), progress=every(proxy, 0.1), retries=1
        )
    assert "\n" not in str(down.value) and "2 times (retries: 1" in str(down.value), down.value
    assert os.listdir(dest) == []
    local = tmp_path / "x.bin"
    with open(local, "wb") as fh:
        fh.truncate(256 * MIB)  # sparse: enough to cut, quick to make
    with pytest.raises(TransferError) as up:
        session.upload(str(local), "resume/kept/x.bin", progress=every(proxy, 0.1), retries=1)
    assert "\n" not in str(up.value) and "nothing was left in the pod" in str(up.value), up.value
    assert session.execute("ls -A resume/kept").stdout == ""  # no copy, no staging directory


HELD = """
import sys, time
from trainjob_magics import attach
name, namespace, kubeconfig, src, dst = sys.argv[1:6]
s = attach(name, namespace=namespace or None, config_file=kubeconfig, timeout=120)
said = []
def progress(done, total):
    if total and done >= total // 4 and not said:
        said.append(1)
        print("held", flush=True)
        while True:  # until killed
            time.sleep(1)
s.upload(src, dst, progress=progress)
"""


def test_a_killed_upload_is_swept_and_a_stopped_one_leaves_nothing(
    session: TrainJobSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / "x.bin"
    with open(local, "wb") as fh:
        fh.truncate(256 * MIB)
    argv = [sys.executable, "-c", HELD, session.name, session.namespace, KUBECONFIG, str(local)]
    proc = subprocess.Popen([*argv, "resume/killed/x.bin"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    finally:
        proc.send_signal(signal.SIGKILL)  # a kernel killed mid-upload: no cleanup at all
        proc.wait()
    listed = session.execute("ls -A resume/killed").stdout.split()
    assert len(listed) == 1 and listed[0].startswith(".trainjob-upload-"), listed
    small = tmp_path / "small.txt"
    small.write_text("small")
    monkeypatch.setattr(staging, "STALE_AFTER", 2.0)  # (an hour otherwise)

    def swept() -> bool:
        session.upload(str(small), "resume/killed/small.txt")
        return session.execute("ls -A resume/killed").stdout.split() == ["small.txt"]

    wait_until(swept, timeout=120)
    fired: list[bool] = []

    def ctrl_c(done: int, total: int) -> None:
        if not fired and total and done >= total // 4:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        if fired:  # the stream goes no further until the Ctrl-C was handled
            wait_until(lambda: any(t.is_set() for t in list(session._transfers)))

    with pytest.raises(TransferInterruptedError) as info:
        session.upload(str(local), "resume/stopped/x.bin", progress=ctrl_c)
    message = str(info.value)
    assert "\n" not in message and message.endswith(
        "nothing was left in the pod; run it again to copy it"
    )
    assert session.execute("mkdir -p resume/stopped && ls -A resume/stopped").stdout == ""
