"""upload / download / write_file through exec + tar streams, byte-exact, and safe unpacking."""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainjob_magics.engine import connect
from trainjob_magics.engine.errors import InvalidInputError, TransferError, UnsafeArchiveError
from trainjob_magics.engine.exec.client import ExecClient
from trainjob_magics.engine.files import manifest
from trainjob_magics.engine.files import transfer as files
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

EVIL_PY = r"""
import io, sys, tarfile
kind = sys.argv[1]
def add(tar, name, data=b"pwned", **kw):
    info = tarfile.TarInfo(name)
    for k, v in kw.items():
        setattr(info, k, v)
    if info.type == tarfile.REGTYPE:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)
with tarfile.open(f"evil-{kind}.tar", "w") as tar:
    add(tar, "out", type=tarfile.DIRTYPE, mode=0o755)
    add(tar, "out/ok.txt", b"fine")
    if kind == "dotdot":
        add(tar, "out/../../x")
    elif kind == "absolute":
        add(tar, sys.argv[2])
    elif kind == "symlink":
        add(tar, "out/esc", type=tarfile.SYMTYPE, linkname="../../..")
        add(tar, "out/esc/x")
"""


@pytest.fixture(scope="module")
def session(local_cluster: LocalCluster) -> Iterator[Any]:
    s = connect("torch-distributed", num_nodes=2, config_file=str(local_cluster.kubeconfig_path))
    yield s
    s.close(timeout=30)


def pod_dir(cluster: LocalCluster, session: Any, label: str) -> Path:
    (ref,) = session.pods(label)
    return Path(cluster.pod_dir(session.namespace, ref.name))


def tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def make_tree(root: Path, count: int = 1000) -> None:
    rng = random.Random(6)
    for i in range(count):
        sub = root / f"d{i % 10}" / f"e{i % 7}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"file {i:04d}.bin").write_bytes(rng.randbytes(rng.randint(0, 3000)))


def test_tree_of_1000_files_round_trip(
    session: Any, local_cluster: LocalCluster, tmp_path: Path
) -> None:
    src = tmp_path / "tree"
    make_tree(src)
    original = tree_digest(src)
    assert len(original) == 1000
    seen: list[tuple[int, int]] = []
    result = session.upload(
        str(src), "work/tree", pods="all", progress=lambda d, t: seen.append((d, t))
    )
    assert result.ok and result.files == 1000 and result.verified == "sha256"
    assert len(result.pods) == 2
    assert seen and seen[-1][0] == seen[-1][1]  # progress reached its total
    for label in ("node-0", "node-1"):  # landed byte-exact in each pod's own directory
        assert tree_digest(pod_dir(local_cluster, session, label) / "work" / "tree") == original
    back = tmp_path / "back"
    got = session.download("work/tree", str(back), pod="node-1")
    assert got.files == 1000 and got.verified == "sha256"
    assert tree_digest(back) == original


def test_100mb_file_round_trip(session: Any, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        for _ in range(100):
            fh.write(os.urandom(1 << 20))
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    up: list[tuple[int, int]] = []
    session.upload(str(big), "big/", pods="node-0", progress=lambda d, t: up.append((d, t)))
    assert up[-1][0] == up[-1][1] >= 100 << 20
    assert [d for d, _ in up] == sorted(d for d, _ in up)
    check = session.execute("sha256sum big/big.bin")
    assert check.stdout.split()[0] == digest
    down: list[tuple[int, int]] = []
    out = tmp_path / "dl"
    out.mkdir()
    res = session.download("big/big.bin", str(out), progress=lambda d, t: down.append((d, t)))
    assert res.bytes == 100 << 20
    assert hashlib.sha256((out / "big.bin").read_bytes()).hexdigest() == digest
    assert down[-1] == (100 << 20, 100 << 20)
    print(f"\nBENCH files: 100 MiB up {up and len(up)} progress calls, down {len(down)}")


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_malicious_archive_refused(
    session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A compromised pod answers the download's tar with a crafted archive (the kubectl cp CVE)."""
    abs_target = str(tmp_path / "abs-pwned")
    session.write_file("evil.py", EVIL_PY)
    made = session.execute(["python3", "evil.py", kind, abs_target])
    assert made.ok, made.stderr
    session.execute("mkdir -p out && echo fine > out/ok.txt")
    monkeypatch.setattr(
        files, "download_argv", lambda parent, name, verify, *rest: ["cat", f"evil-{kind}.tar"]
    )
    dest = tmp_path / "target" / "out"
    dest.parent.mkdir()
    with pytest.raises(UnsafeArchiveError, match="refused to unpack") as info:
        session.download("out", str(dest))
    assert "\n" not in str(info.value)
    assert {"dotdot": "'..'", "absolute": "absolute path", "symlink": "symlink escaping"}[
        kind
    ] in str(info.value)
    assert not dest.exists()
    assert not (tmp_path / "x").exists() and not Path(abs_target).exists()
    assert list((tmp_path / "target").iterdir()) == []  # no staging leftovers


class _Corrupting:
    """Flips one byte of ``original`` in what it passes on: a byte damaged in transit, after
    the sending side hashed it (cannot be produced for real, so it is made here)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.done = False

    def _flip(self, data: bytes) -> bytes:
        if not self.done and b"original" in data:
            self.done = True
            return data.replace(b"original", b"origiNal", 1)
        return data

    def read(self, n: int = -1) -> bytes:  # upload: the stdin source
        return self._flip(self.inner.read(n))

    def write(self, data: Any) -> None:  # download: the stdout sink
        self.inner.write(memoryview(self._flip(bytes(data))))


def test_corrupted_byte_in_transit_is_caught(
    session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pod_tools: list[str]
) -> None:
    """One flipped byte between the two hashes fails the copy, either way, with one line that
    names the file (with or without python3 in the pod)."""
    src = tmp_path / "integ"
    src.mkdir()
    (src / "a.txt").write_text("original\n")
    real_run = ExecClient.run
    wrapped: list[_Corrupting] = []

    def corrupting_run(self: ExecClient, *args: Any, **kw: Any) -> Any:
        for key in ("stdin", "stdout_sink"):
            if kw.get(key) is not None and not isinstance(kw[key], bytes):
                kw[key] = _Corrupting(kw[key])
                wrapped.append(kw[key])
        return real_run(self, *args, **kw)

    monkeypatch.setattr(ExecClient, "run", corrupting_run)
    failed = r"integrity check failed in pod .*integ/a.txt differs \(sha256\)"
    with pytest.raises(TransferError, match=failed) as up:
        session.upload(str(src), "integ")
    assert "\n" not in str(up.value) and wrapped[-1].done
    monkeypatch.setattr(ExecClient, "run", real_run)
    session.upload(str(src), "integ")  # an intact copy to download
    monkeypatch.setattr(ExecClient, "run", corrupting_run)
    with pytest.raises(TransferError, match=r"integrity check failed for integ .*a.txt differs"):
        session.download("integ", str(tmp_path / "back"))
    assert wrapped[-1].done
    assert not (tmp_path / "back").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["integ"]  # no staging leftovers


def test_write_file_all_pods_and_odd_paths(session: Any, local_cluster: LocalCluster) -> None:
    name = "dir with space/it's $HOME;`x`.py"
    text = "print('héllo')\n" * 100
    res = session.write_file(name, text, pods="all")
    assert res.ok and len(res.pods) == 2
    for label in ("node-0", "node-1"):
        assert (pod_dir(local_cluster, session, label) / name).read_text() == text
    listing = session.execute(["cat", name], pods="all")
    assert all(r.stdout == text for r in listing.values())


def test_errors_are_one_line(session: Any, tmp_path: Path) -> None:
    with pytest.raises(TransferError, match="does not exist in pod"):
        session.download("no/such/thing", str(tmp_path / "x"))
    with pytest.raises(InvalidInputError, match="does not exist"):
        session.upload(str(tmp_path / "missing"), "x")
    with pytest.raises(InvalidInputError, match="exactly one pod"):
        session.download("x", str(tmp_path / "x"), pod="all")
    # a regular file where a directory must go: refused for root too (CI runs as root, where
    # a read-only directory would not stop the write)
    session.execute("echo plain > notadir")
    src = tmp_path / "f.txt"
    src.write_text("x")
    with pytest.raises(TransferError, match="unpacking into notadir/sub failed") as info:
        session.upload(str(src), "notadir/sub/f.txt")
    assert "\n" not in str(info.value)
    assert session.execute("cat notadir").stdout == "plain\n"  # nothing was overwritten


def test_odd_names_round_trip_verified(session: Any, tmp_path: Path) -> None:
    """A name starting with '-', spaces, quotes and a newline: hashed on both sides by name."""
    src = tmp_path / "-odd"
    (src / "sub dir").mkdir(parents=True)
    (src / "sub dir" / "it's $x.txt").write_text("one")
    (src / "new\nline").write_text("two")
    up = session.upload(str(src), "odd/")
    assert up.verified == "sha256" and up.files == 2
    back = session.download("odd/-odd", str(tmp_path / "back"))
    assert back.verified == "sha256" and back.files == 2
    assert tree_digest(tmp_path / "back") == tree_digest(src)


@pytest.fixture(params=["python3", "no python3"])
def pod_tools(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run the transfer scripts as they run in a pod with python3 (the default) or without it
    (the interpreter candidates point nowhere: tar, then openssl, hash the files); returns the
    hash listings the client parsed, to show which path ran."""
    if request.param == "no python3":
        monkeypatch.setattr(manifest, "PYTHONS", ("/nonexistent/python3", "no-such-python3"))
    seen: list[str] = []
    real_parse = files.parse_files

    def spy(text: str) -> Any:
        seen.append(text)
        return real_parse(text)

    monkeypatch.setattr(files, "parse_files", spy)
    return seen


def test_round_trip_with_and_without_python3(
    session: Any, tmp_path: Path, pod_tools: list[str], request: pytest.FixtureRequest
) -> None:
    """Both pod-side paths copy byte-exact, links kept, and are verified by sha256."""
    src = tmp_path / "both"
    make_tree(src, 40)
    (src / "big.bin").write_bytes(os.urandom(3 << 20))
    (src / "ln").symlink_to("big.bin")
    (src / "hard").hardlink_to(src / "big.bin")
    up = session.upload(str(src), "paths/")
    assert up.verified == "sha256" and up.files == 41  # the hard link travels as a link
    back = session.download("paths/both", str(tmp_path / "back"))
    assert back.verified == "sha256" and back.files == 41
    got = tmp_path / "back"
    assert tree_digest(got) == tree_digest(src)
    assert (got / "ln").readlink() == Path("big.bin")
    assert (got / "hard").stat().st_ino == (got / "big.bin").stat().st_ino
    python = "no" not in request.node.callspec.id
    tools = ["#trainjob-python"] if python else ["#trainjob-openssl", "#trainjob-sha256sum"]
    assert len(pod_tools) == 2
    assert all(any(tool in text for tool in tools) for text in pod_tools)
