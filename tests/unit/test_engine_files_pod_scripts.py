"""The pod-side transfer scripts, run here in a real ``sh`` (the pod's half without the
transport): python3 unpacking/packing while hashing, and the tar fallback without python3."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from trainjob_magics.engine.exec import frames
from trainjob_magics.engine.files import manifest
from trainjob_magics.engine.files.archive import ChunkStream, TarStream, unpack
from trainjob_magics.engine.files.manifest import (
    compare,
    download_argv,
    handover_argv,
    parse_files,
    upload_argv,
    upload_tar_argv,
)
from trainjob_magics.engine.files.resume import CUT, SendLedger

NO_PYTHON = ("/nonexistent/python3",)
FALLBACK_TOOLS = ["#trainjob-openssl", "#trainjob-sha256sum"]


def with_pythons(argv: list[str], pythons: tuple[str, ...] | None) -> list[str]:
    """``argv`` with other python3 candidates (the last arguments of the verified scripts)."""
    if pythons is None:
        return argv
    return argv[: -len(manifest.PYTHONS)] + list(pythons)


def sent(stream: TarStream) -> bytes:
    """What the client sends an upload's pod: the tar stream, then its trailer (the sha256 of
    every file it sent, which the pod checks before anything is moved into place)."""
    archive = stream.read()
    ledger = SendLedger()
    ledger.adopt(stream.starts, {n: f.size for n, f in stream.files.items()}, stream.marks)
    return archive + ledger.trailer()


def make_src(root: Path) -> Path:
    src = root / "src"
    (src / "sub dir").mkdir(parents=True)
    (src / "sub dir" / "big.bin").write_bytes(os.urandom(3 << 20) + b"tail")
    (src / "-dash").write_text("dash")
    (src / "empty").write_bytes(b"")
    (src / "é ünï").write_text("non-ascii")
    (src / ("long" * 40)).write_text("a name longer than ustar's 100 bytes")
    (src / "ln").symlink_to("-dash")
    (src / "z-hard").hardlink_to(src / "-dash")
    os.chmod(src / "-dash", 0o751)
    return src


def digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize("pythons", [None, NO_PYTHON], ids=["python3", "no python3"])
def test_upload_script_unpacks_and_lists_every_file(
    tmp_path: Path, pythons: tuple[str, ...] | None
) -> None:
    src = make_src(tmp_path)
    stream = TarStream(src, "dst")
    archive = sent(stream)
    pod = tmp_path / "pod"
    (pod / "p" / "dst").mkdir(parents=True)
    (pod / "p" / "dst" / "-dash").symlink_to("/etc/hostname")  # replaced, not followed
    (pod / "p" / "dst" / "stale").write_text("kept: tar merges into what is there")
    argv = with_pythons(upload_argv(str(pod / "p"), "dst", True), pythons)
    done = subprocess.run(argv, input=archive, capture_output=True, check=False)
    if pythons is not None:  # no python3: it says so before reading; tar's way goes next
        assert done.returncode == 5 and b"#trainjob-nopython" in done.stderr
        assert not (pod / "p" / ".trainjob-upload-0").exists()
        argv = upload_tar_argv(str(pod / "p"), "dst", "0")
        done = subprocess.run(argv, input=archive, capture_output=True, check=False)
        assert done.returncode == 0, done.stderr
        assert not (pod / "p" / "dst" / "empty").exists()  # staged: moved once checked
        moved = subprocess.run(handover_argv(str(pod / "p"), "0", "dst"), capture_output=True)
        assert moved.returncode == 0, moved.stderr
    assert done.returncode == 0, done.stderr
    assert os.listdir(pod / "p") == ["dst"]  # the staging directory went
    tool = done.stdout.decode().splitlines()[0]
    assert tool == "#trainjob-python" if pythons is None else tool in FALLBACK_TOOLS
    method, landed = parse_files(done.stdout.decode())
    assert method == "sha256" and compare(stream.files, landed) == []
    out = pod / "p" / "dst"
    assert digests(out) == {**digests(src), "stale": digests(out)["stale"]}
    assert not (out / "-dash").is_symlink() and (out / "-dash").stat().st_mode & 0o777 == 0o751
    assert (out / "ln").readlink() == Path("-dash")
    assert (out / "z-hard").stat().st_ino == (out / "-dash").stat().st_ino


@pytest.mark.parametrize("pythons", [None, NO_PYTHON], ids=["python3", "no python3"])
def test_download_script_packs_and_lists_every_file(
    tmp_path: Path, pythons: tuple[str, ...] | None
) -> None:
    src = make_src(tmp_path)
    argv = with_pythons(download_argv(str(tmp_path), "src", True), pythons)
    done = subprocess.run(argv, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    report = done.stderr.decode()
    assert report.startswith("#trainjob-kind dir ")
    tools = ["#trainjob-python"] if pythons is None else FALLBACK_TOOLS
    assert any(f"\n{tool}\n" in report for tool in tools)
    method, listed = parse_files(report)
    staging = tmp_path / "staging"
    staging.mkdir()
    links: dict[str, str] = {}
    received = unpack(io.BytesIO(done.stdout), "src", staging, links)
    received.update({n: received[t] for n, t in links.items()})
    assert method == "sha256" and compare(listed, received) == []
    assert set(listed) | set(links) == {f"src/{name}" for name in digests(src)}
    assert digests(staging / "src") == digests(src)
    assert (staging / "src" / "ln").readlink() == Path("-dash")


def test_download_script_carries_a_fifo_for_the_client_to_refuse(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    os.mkfifo(tmp_path / "src" / "pipe")
    done = subprocess.run(download_argv(str(tmp_path), "src", True), capture_output=True)
    assert done.returncode == 0, done.stderr
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        assert [m.isfifo() for m in tar.getmembers()] == [False, True]


def test_upload_script_keeps_a_cut_stream_staged_and_nothing_in_place(tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(1 << 20))
    archive = TarStream(src, "f.bin").read()
    done = subprocess.run(
        upload_argv(str(tmp_path / "pod"), "f.bin", True, "t0"),
        input=archive[: 600 << 10],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 3
    message = done.stderr.decode().strip()
    assert "\n" not in message and message.startswith(CUT)
    assert os.listdir(tmp_path / "pod") == [".trainjob-upload-t0"]  # for a retry
    staged = tmp_path / "pod" / ".trainjob-upload-t0" / "data" / "f.bin"
    assert 0 < staged.stat().st_size < 600 << 10


def test_upload_script_goes_on_past_a_file_it_cannot_write(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_text("a")
    (src / "b").write_text("b")
    pod = tmp_path / "pod"
    (pod / "src" / "a").mkdir(parents=True)  # a directory where the file must go
    stream = TarStream(src, "src")
    done = subprocess.run(
        upload_argv(str(pod), "src", True), input=sent(stream), capture_output=True
    )
    assert done.returncode == 2 and b"src/a" in done.stderr
    _, landed = parse_files(done.stdout.decode())
    assert compare(stream.files, landed) == ["src/a is missing"]
    assert (pod / "src" / "b").read_text() == "b"


def test_chunk_stream_reads_across_chunks_and_only_forward() -> None:
    data = bytes(range(256)) * 40
    chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    stream = ChunkStream(iter([*chunks, None]).__next__)
    assert stream.read(1500) == data[:1500] and stream.tell() == 1500
    assert b"".join(stream.views(700)) == data[1500:2200]
    stream.seek(2100)  # back within the current chunk
    assert stream.read(10) == data[2100:2110]
    stream.seek(5000)
    assert stream.read(3) == data[5000:5003]
    with pytest.raises(tarfile.ReadError, match="out of order"):
        stream.seek(100)
    assert stream.read() == data[5003:] and stream.read(1) == b""


@pytest.mark.parametrize("numpy_mask", [True, False], ids=["numpy", "translate"])
def test_large_frames_masked_either_way(monkeypatch: pytest.MonkeyPatch, numpy_mask: bool) -> None:
    if numpy_mask:
        np = pytest.importorskip("numpy", reason="numpy (the optional fast mask) is missing")
    monkeypatch.setitem(frames._numpy_state, "module", np if numpy_mask else False)
    payload = os.urandom(frames.FAST_MASK + 7)
    frame = bytes(frames.client_frame(payload))
    assert frame[0] == 0x82 and frame[1] == 0x80 | 127
    assert int.from_bytes(frame[2:10], "big") == len(payload)
    key, body = frame[10:14], frame[14:]
    assert len(set(key)) == 1  # one random byte, repeated
    assert bytes(b ^ key[0] for b in body) == payload


def kinds_and_sizes(archive: bytes) -> list[tuple[str, int]]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return [
            (
                "dir" if m.isdir() else "symlink" if m.issym() else "file",
                m.size if m.isreg() else -1,
            )
            for m in tar.getmembers()
        ]


def test_both_sides_stream_directories_then_links_then_small_files_first(tmp_path: Path) -> None:
    """The receiver creates the many small files while the large ones are still arriving."""
    src = make_src(tmp_path)
    sent = TarStream(src, "src").read()
    packed = subprocess.run(download_argv(str(tmp_path), "src", True), capture_output=True)
    for archive in (sent, packed.stdout):
        order = kinds_and_sizes(archive)
        kinds = [kind for kind, _ in order]
        assert kinds == sorted(kinds, key=["dir", "symlink", "file"].index)  # hard links: files
        sizes = [size for _, size in order if size >= 0]
        assert sizes == sorted(sizes) and sizes[-1] == (3 << 20) + 4
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            names = tar.getnames()
        assert names.index("src") < names.index("src/sub dir")  # parents before children


@pytest.mark.parametrize("direction", ["upload", "download"])
def test_headers_for_long_and_undecodable_names(tmp_path: Path, direction: str) -> None:
    """ustar fields where they fit, PAX records where not (long names and link targets), and
    names that are not UTF-8 survive byte for byte, their hashes listed under the same name."""
    src = tmp_path / "src"
    deep = src / ("d" * 120) / ("e" * 120)
    deep.mkdir(parents=True)
    (deep / ("f" * 120)).write_text("deep")
    (src / "ln").symlink_to("x" * 150)
    raw = os.fsencode(src) + b"/bad-\xff-name"
    with open(raw, "wb") as fh:
        fh.write(b"not utf-8")
    os.utime(deep / ("f" * 120), (1e9, 1e9))
    if direction == "upload":
        stream = TarStream(src, "src")
        pod = tmp_path / "pod"
        done = subprocess.run(
            upload_argv(str(pod), "src", True), input=sent(stream), capture_output=True
        )
        assert done.returncode == 0, done.stderr
        _, landed = parse_files(done.stdout.decode())
        assert compare(stream.files, landed) == [] and len(landed) == 2
        got = pod / "src"
    else:
        done = subprocess.run(download_argv(str(tmp_path), "src", True), capture_output=True)
        assert done.returncode == 0, done.stderr
        _, listed = parse_files(done.stderr.decode())
        staging = tmp_path / "staging"
        staging.mkdir()
        received = unpack(io.BytesIO(done.stdout), "src", staging)
        assert compare(listed, received) == [] and len(listed) == 2
        got = staging / "src"
    assert digests(got) == digests(src)
    assert os.path.exists(os.fsencode(got) + b"/bad-\xff-name")
    assert (got / "ln").readlink() == Path("x" * 150)
    assert (got / ("d" * 120) / ("e" * 120) / ("f" * 120)).stat().st_mtime == 1e9


@pytest.mark.parametrize("name", ["dst/../evil", "other/x", "/abs/evil"])
def test_pod_unpack_refuses_a_member_outside_the_destination(tmp_path: Path, name: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("dst")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        data = b"should not land"
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    pod = tmp_path / "pod" / "p"
    pod.mkdir(parents=True)
    done = subprocess.run(
        upload_argv(str(pod), "dst", True), input=buf.getvalue(), capture_output=True, check=False
    )
    assert done.returncode != 0
    assert b"member outside dst" in done.stderr
    assert not (pod / "evil").exists() and not (tmp_path / "pod" / "evil").exists()
    assert not (pod / "other").exists()
