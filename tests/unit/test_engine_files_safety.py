"""Download unpacking refuses archives that would write outside the target (kubectl cp CVEs)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from trainjob_magics.engine.errors import InvalidInputError, UnsafeArchiveError
from trainjob_magics.engine.files.archive import build_tar, extract, scan_archive
from trainjob_magics.engine.files.manifest import FileInfo, compare, parse_manifest
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
    dest = tmp_path / "target" / "out"
    with pytest.raises(UnsafeArchiveError, match=why) as info:
        scan_archive(make_tar(*members), "out")
    assert "nothing was written" in str(info.value)
    assert "\n" not in str(info.value)
    assert not dest.exists() and not (tmp_path / "x").exists()


def test_safe_archive_with_inner_links_extracts(tmp_path: Path) -> None:
    archive = make_tar(
        ("dir", "out", ""),
        ("dir", "out/sub", ""),
        ("file", "out/sub/a.txt", "alpha"),
        ("sym", "out/link", "sub/a.txt"),
        ("hard", "out/hard", "out/sub/a.txt"),
    )
    members, manifest = scan_archive(archive, "out")
    assert manifest["out/sub/a.txt"].size == 5
    dest = tmp_path / "copy"
    extract(archive, members, "out", dest)
    assert (dest / "sub" / "a.txt").read_text() == "alpha"
    assert (dest / "link").is_symlink() and (dest / "link").read_text() == "alpha"
    assert (dest / "hard").read_text() == "alpha"
    assert [p.name for p in tmp_path.iterdir()] == ["copy"]  # staging dir cleaned up


def test_build_tar_manifest_matches_scan(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.bin").write_bytes(bytes(range(256)) * 10)
    (src / "top.txt").write_text("top")
    (src / "ln").symlink_to("top.txt")
    buf = io.BytesIO()
    built = build_tar(src, "data", buf)
    _, scanned = scan_archive(buf, "data")
    assert built == scanned and set(built) == {"data/d/f.bin", "data/top.txt"}
    assert compare(built, scanned, "sha256") == []
    scanned["data/top.txt"] = FileInfo(3, "0" * 64)
    assert compare(built, scanned, "sha256") == ["data/top.txt differs (sha256)"]


def test_manifest_parsing_fallbacks() -> None:
    kind, files, method = parse_manifest(
        '{"kind": "dir"}\n{"path": "d/a", "size": 3, "sha256": "ab"}\n'
    )
    assert (kind, method, files["d/a"]) == ("dir", "sha256", FileInfo(3, "ab"))
    kind, files, method = parse_manifest("dir\n#sha256sum\nabc  d/a\n\\def  d/new\\nline\n")
    assert method == "sha256" and files["d/new\nline"].sha256 == "def"
    kind, files, method = parse_manifest("file\n#wc\n 12 f\n 12 total\n")
    assert (kind, method, files) == ("file", "size", {"f": FileInfo(12)})


def test_split_remote() -> None:
    assert split_remote("data", "x") == (".", "data")
    assert split_remote("a/b/c.txt", "x") == ("a/b", "c.txt")
    assert split_remote("dir/", "src") == ("dir", "src")
    assert split_remote("/abs/p", "x") == ("/abs", "p")
    for bad in ("", "..", "a/..", "/", "x\0y"):
        with pytest.raises(InvalidInputError):
            split_remote(bad, "")
