"""Transfers that survive a dropped stream (files/resume.py), on the local cluster: a real TCP
proxy in front of the API server (tests/helpers/faultproxy.py) resets the exec's connection
several times during a large upload and download; each resumes by file and byte, the result is
checked by sha256 and each retry was said in one line. When the retries run out the transfer
fails in one line and nothing is left half-written, here or in the pod; a user's error is not
retried. The magics take ``--retries`` and print the retry lines.

SIZE is the largest that keeps the module under ~30 s on this shared 2-core machine: 512 MiB
took 24.6 s at load 8 (the two cut transfers 7.6 s each, sha256 included); 1 GB took 19-22 s
per transfer. The 1 GB case is the benchmark's (benchmarks/bench_transfer_resume.py) and the
real cluster's (tests/realcluster/test_transfer_resume_real.py, run on the real stack too).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.faultproxy import FaultProxy
from tests.helpers.shell import magics_shell
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine.errors import TransferError
from trainjob_magics.engine.files.resume import CHECKPOINT
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics.views.progress import ProgressView

pytestmark = pytest.mark.timeout(300)

MIB = 1 << 20
SIZE = 512 * MIB
CUTS = (0.2, 0.45, 0.7)  # of the transfer: where the proxy resets the connection
RETRY = r"{what}: the stream ended at [\d.]+ [MG]iB of [\d.]+ [MG]iB; resuming \(retry {n} of 3\)"


@pytest.fixture(scope="module")
def proxy(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    cfg = tmp_path_factory.mktemp("resume") / "kubeconfig"
    p = FaultProxy.for_kubeconfig(Path(local_cluster.kubeconfig_path), cfg)
    p.config = cfg  # type: ignore[attr-defined]
    yield p
    p.close()


@pytest.fixture(scope="module")
def session(proxy: Any) -> Iterator[TrainJobSession]:
    s = connect("torch-distributed", num_nodes=1, config_file=str(proxy.config), timeout=60)
    yield s
    s.close(timeout=30)


@pytest.fixture(scope="module")
def pod(session: TrainJobSession, local_cluster: LocalCluster) -> Path:
    return Path(local_cluster.pod_dir(session.namespace, session.pod))


@pytest.fixture(scope="module")
def big(pod: Path) -> tuple[Path, str]:
    """A SIZE-byte file in the pod (the local cluster's pods are this machine's directories)
    and its sha256: a random block whose length is no multiple of the checkpoint, repeated,
    so a resume from a wrong byte cannot go unnoticed."""
    block = os.urandom(16 * MIB + 7)
    path = pod / "seed-large.bin"
    sha = hashlib.sha256()
    with open(path, "wb") as fh:
        left = SIZE
        while left:
            piece = block[: min(left, len(block))]
            fh.write(piece)
            sha.update(piece)
            left -= len(piece)
    return path, sha.hexdigest()


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def cutter(proxy: FaultProxy, at: tuple[float, ...]) -> Callable[[int, int], None]:
    """A progress callback that resets every connection through the proxy once the transfer
    passes each fraction of ``at`` (the exec's own socket among them, mid-stream)."""
    left = list(at)

    def progress(done: int, total: int) -> None:
        if left and total and done >= left[0] * total:
            left.pop(0)
            proxy.drop_established()

    return progress


def every(proxy: FaultProxy, step: float) -> Callable[[int, int], None]:
    """Reset the connection each time another ``step`` of the transfer arrived: every attempt
    is cut."""
    last = [0]

    def progress(done: int, total: int) -> None:
        if total and done - last[0] >= step * total:
            last[0] = done
            proxy.drop_established()
        last[0] = min(last[0], done)

    return progress


def staging_left(root: Path) -> list[str]:
    return [p.name for p in root.rglob(".trainjob-*")]


def test_a_download_cut_three_times_resumes_and_is_verified(
    session: TrainJobSession, proxy: FaultProxy, big: tuple[Path, str], tmp_path: Path
) -> None:
    lines: list[str] = []
    before = proxy.bytes_down
    out = tmp_path / "back.bin"
    res = session.download(
        big[0].name, str(out), progress=cutter(proxy, CUTS), on_retry=lines.append
    )
    assert res.verified == "sha256" and res.bytes == SIZE
    assert sha256_of(out) == big[1]
    assert len(lines) == 3, lines
    for n, line in enumerate(lines, 1):
        assert re.fullmatch(RETRY.format(what="download", n=n), line), line
    # resumed, not started again: at most a checkpoint per cut was received twice
    assert proxy.bytes_down - before < SIZE + 3 * CHECKPOINT + 16 * MIB
    assert staging_left(tmp_path) == []


def test_an_upload_cut_three_times_resumes_and_is_verified(
    session: TrainJobSession, proxy: FaultProxy, big: tuple[Path, str], pod: Path, tmp_path: Path
) -> None:
    local = tmp_path / "up.bin"
    os.link(big[0], local)  # the same bytes, read from here
    lines: list[str] = []
    before = proxy.bytes_up
    res = session.upload(
        str(local), "up/landed.bin", progress=cutter(proxy, CUTS), on_retry=lines.append
    )
    assert res.verified == "sha256" and res.bytes == SIZE
    assert sha256_of(pod / "up" / "landed.bin") == big[1]
    assert len(lines) == 3, lines
    for n, line in enumerate(lines, 1):
        assert re.fullmatch(RETRY.format(what="upload", n=n), line), line
    assert proxy.bytes_up - before < SIZE + 3 * CHECKPOINT + 16 * MIB
    assert os.listdir(pod / "up") == ["landed.bin"]  # the staging directory went


def test_a_download_out_of_retries_fails_in_one_line_leaving_nothing(
    session: TrainJobSession, proxy: FaultProxy, big: tuple[Path, str], tmp_path: Path
) -> None:
    lines: list[str] = []
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(TransferError) as info:
        session.download(
            big[0].name,
            str(dest / "x.bin"),
            progress=every(proxy, 0.1),
            retries=2,
            on_retry=lines.append,
        )
    message = str(info.value)
    assert "\n" not in message and "3 times (retries: 2" in message, message
    assert f"nothing was written to {dest / 'x.bin'}" in message
    assert len(lines) == 2
    assert os.listdir(dest) == []  # no copy, no staging directory


def test_an_upload_out_of_retries_leaves_nothing_in_the_pod(
    session: TrainJobSession, proxy: FaultProxy, big: tuple[Path, str], pod: Path, tmp_path: Path
) -> None:
    local = tmp_path / "up.bin"
    os.link(big[0], local)
    (pod / "kept").mkdir()
    (pod / "kept" / "x.bin").write_bytes(b"the copy that was there")
    lines: list[str] = []
    with pytest.raises(TransferError) as info:
        session.upload(
            str(local), "kept/x.bin", progress=every(proxy, 0.1), retries=2, on_retry=lines.append
        )
    message = str(info.value)
    assert "\n" not in message and "3 times (retries: 2)" in message, message
    assert "nothing was left in the pod" in message
    assert len(lines) == 2
    assert os.listdir(pod / "kept") == ["x.bin"]  # no staging directory
    assert (pod / "kept" / "x.bin").read_bytes() == b"the copy that was there"


def test_a_users_error_is_not_retried(
    session: TrainJobSession, proxy: FaultProxy, pod: Path, tmp_path: Path
) -> None:
    lines: list[str] = []
    with pytest.raises(TransferError, match="does not exist in pod"):
        session.download("no/such/file", str(tmp_path / "x"), on_retry=lines.append)
    (pod / "a-file").write_text("plain")
    src = tmp_path / "f.txt"
    src.write_text("x")
    with pytest.raises(TransferError, match="unpacking into a-file/sub failed"):
        session.upload(str(src), "a-file/sub/f.txt", on_retry=lines.append)
    assert lines == []
    assert (pod / "a-file").read_text() == "plain" and staging_left(pod) == []


@pytest.fixture
def magics(proxy: Any) -> Iterator[InteractiveShell]:
    with magics_shell(proxy.config, widgets="off") as sh:
        sh.run_line_magic("trainjob_connect", "torch-distributed --nodes 1 --as resume")
        yield sh
        sh.run_line_magic("trainjob_close", "resume")


def test_the_magics_take_retries_and_say_each_retry(
    magics: InteractiveShell,
    proxy: FaultProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = tmp_path / "m.bin"
    src.write_bytes(os.urandom(128 * MIB))
    drops = cutter(proxy, (0.5,))
    update = ProgressView.update

    def cut_on_update(self: ProgressView, done: int, total: int) -> None:
        drops(done, total)  # the magic's progress goes to its bar: cut from there
        update(self, done, total)

    monkeypatch.setattr(ProgressView, "update", cut_on_update)
    capsys.readouterr()
    magics.run_line_magic("trainjob_upload", f"{src} m.bin --retries 2")
    out = capsys.readouterr().out
    assert re.search(r"upload: the stream ended at .*; resuming \(retry 1 of 2\)\n", out), out
    assert "copied" in out and "verified by sha256" in out
    with pytest.raises(Exception, match="--retries must be 0 or more"):
        magics.run_line_magic("trainjob_download", f"m.bin {tmp_path}/x --retries -1")
