"""Download unpacking refuses archives that would write outside the target (kubectl cp CVEs)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from trainjob_magics.engine.errors import InvalidInputError, TransferError, UnsafeArchiveError
from trainjob_magics.engine.files.archive import TarStream, place, unpack
from trainjob_magics.engine.files.manifest import (
    FileInfo,
    compare,
    parse_files,
)
from trainjob_magics.engine.files.resume import Mark
from trainjob_magics.engine.files.transfer import split_remote


def make_tar(*members: tuple[str, str, str]) -> io.BytesIO:
    """Members as (kind, name, data-or-linkname); kind in file, dir, sym, hard, fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for kind, name, value in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = value.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "hard": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            if kind == "dir":
                info.mode = 0o755
            info.linkname = value
            tar.addfile(info)
    buf.seek(0)
    return buf


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ((("dir", "out", ""), ("file", "out/../x", "pwned")), r"'out/\.\./x'.*'\.\.'"),
        ((("dir", "out", ""), ("file", "/tmp/evil", "pwned")), "absolute path"),
        ((("file", "other", "pwned"),), "outside 'out'"),
        ((("dir", "out", ""), ("sym", "out/link", "../../etc")), "symlink escaping"),
        ((("dir", "out", ""), ("sym", "out/link", "/etc/passwd")), "symlink to absolute"),
        ((("dir", "out", ""), ("hard", "out/h", "/etc/passwd")), "hard link"),
        ((("dir", "out", ""), ("hard", "out/h", "out/missing")), "not in the archive"),
        ((("dir", "out", ""), ("fifo", "out/p", "")), "special file"),
        # a symlink inside, then a file written "through" it: the link itself must be refused
        ((("dir", "out", ""), ("sym", "out/l", ".."), ("file", "out/l/x", "pwned")), "escaping"),
    ],
)
def test_unsafe_members_refused_before_writing(
    tmp_path: Path, members: tuple[tuple[str, str, str], ...], why: str
) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(UnsafeArchiveError, match=why) as info:
        unpack(make_tar(*members), "out", staging)
    assert "nothing was written" in str(info.value)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "x").exists() and not (tmp_path / "evil").exists()
    written = {p.relative_to(staging).as_posix() for p in staging.rglob("*")}
    assert written <= {"out", "out/sub"}  # only what came before the bad member, in staging


def test_safe_archive_with_inner_links_extracts(tmp_path: Path) -> None:
    archive = make_tar(
        ("dir", "out", ""),
        ("dir", "out/sub", ""),
        ("file", "out/sub/a.txt", "alpha"),
        ("sym", "out/link", "sub/a.txt"),
        ("hard", "out/hard", "out/sub/a.txt"),
    )
    staging = tmp_path / "staging"
    staging.mkdir()
    files = unpack(archive, "out", staging)
    assert files["out/sub/a.txt"].size == 5
    dest = tmp_path / "copy"
    place(staging, "out", dest)
    assert (dest / "sub" / "a.txt").read_text() == "alpha"
    assert (dest / "link").is_symlink() and (dest / "link").read_text() == "alpha"
    assert (dest / "hard").read_text() == "alpha"


def test_tar_stream_is_a_tar_with_its_hash_and_size(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.bin").write_bytes(bytes(range(256)) * 1000)
    (src / "top.txt").write_text("top")
    (src / "empty").write_bytes(b"")
    (src / "ln").symlink_to("top.txt")
    (src / "z-hard").hardlink_to(src / "top.txt")  # after top.txt: the link
    stream = TarStream(src, "data")
    parts = []
    while chunk := stream.read(1000):  # small reads cross member boundaries
        parts.append(chunk)
    data = b"".join(parts)
    assert len(data) == stream.size == stream.produced
    assert set(stream.files) == {"data/d/f.bin", "data/top.txt", "data/empty"}
    digest = hashlib.sha256(bytes(range(256)) * 1000).hexdigest()
    assert stream.files["data/d/f.bin"] == FileInfo(256000, digest)
    staging = tmp_path / "staging"
    staging.mkdir()
    got = unpack(io.BytesIO(data), "data", staging)
    assert got == stream.files  # sizes and sha256, hashed here as the files were written
    assert (staging / "data" / "d" / "f.bin").read_bytes() == bytes(range(256)) * 1000
    assert (staging / "data" / "ln").readlink() == Path("top.txt")
    assert (staging / "data" / "z-hard").read_text() == "top"


def test_tar_stream_refuses_a_file_that_shrinks(tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 5000)
    stream = TarStream(src, "f.bin")
    src.write_bytes(b"x" * 10)
    with pytest.raises(TransferError, match="changed size"):
        stream.read()


def test_pod_reports_parsed() -> None:
    method, sizes = parse_files(
        "#trainjob-kind dir 0\n#trainjob-wc\n 12 ./d/a\n3 d/b c\n 15 total\n"
    )
    assert method == "size" and sizes == {"d/a": FileInfo(12), "d/b c": FileInfo(3)}
    assert compare({"d/a": FileInfo(12), "d/x": FileInfo(1)}, sizes) == ["d/x is missing"]
    assert compare({"d/a": FileInfo(13)}, sizes) == ["d/a has 12 bytes, expected 13"]
    a, b = "a" * 64, "b" * 64
    method, files = parse_files(f"#trainjob-openssl\n{a} *d/x y\n{b} *d/new\nline\n")
    assert method == "sha256" and files == {
        "d/x y": FileInfo(-1, a),
        "d/new\nline": FileInfo(-1, b),
    }
    method, files = parse_files(f"#trainjob-sha256sum\n{a}  d/x\n\\{b}  d/new\\nline\n")
    assert files == {"d/x": FileInfo(-1, a), "d/new\nline": FileInfo(-1, b)}
    marks = [
        Mark("d/a", 0, 3, a, final=True),
        Mark("d/r", 0, 8, a),
        Mark("d/r", 8, 9, b, "9:1", True),
    ]
    report = "#trainjob-python\ntar: d/x: a message\n" + "".join(m.line() for m in marks)
    assert parse_files(report) == ("sha256", {"d/a": FileInfo(3, a), "d/r": FileInfo(9)})
    assert compare({"d/a": FileInfo(3, b)}, {"d/a": FileInfo(-1, a)}) == ["d/a differs (sha256)"]
    with pytest.raises(TransferError, match="did not list the files it hashed: tar: bad"):
        parse_files("#trainjob-kind file 3\ntar: bad\n")


def test_split_remote() -> None:
    assert split_remote("data", "x") == (".", "data")
    assert split_remote("a/b/c.txt", "x") == ("a/b", "c.txt")
    assert split_remote("dir/", "src") == ("dir", "src")
    assert split_remote("/abs/p", "x") == ("/abs", "p")
    for bad in ("", "..", "a/..", "/", "x\0y"):
        with pytest.raises(InvalidInputError):
            split_remote(bad, "")


def test_tar_stream_as_masked_frames_carries_the_same_bytes(tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(bytes(range(256)) * 3000)
    plain = TarStream(src, "f.bin").read()
    framed = TarStream(src, "f.bin")
    got = bytearray()
    while True:
        frame, n = framed.read_frame()
        if not n:
            break
        length, off = frame[1] & 0x7F, 2
        if length == 126:
            length, off = int.from_bytes(frame[2:4], "big"), 4
        elif length == 127:
            length, off = int.from_bytes(frame[2:10], "big"), 10
        assert frame[0] == 0x82 and frame[1] & 0x80 and length == n + 1
        key, body = frame[off : off + 4], frame[off + 4 :]
        data = bytes(b ^ key[i % 4] for i, b in enumerate(body))
        assert data[0] == 0  # channel 0: stdin
        got += data[1:]
    assert bytes(got) == plain and framed.produced == len(plain)
