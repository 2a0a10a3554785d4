"""Downloads on a Python without tarfile's extraction filters (PEP 706: 3.10.12 and 3.11.4
brought them; Debian bookworm's 3.11.2, the Python of many notebook images, lacks them). Found
on the real stack's JupyterHub: every ``%trainjob_download`` there failed with
``AttributeError: module 'tarfile' has no attribute 'data_filter'``. The same archives are
unpacked as with the filter, and the same unsafe ones refused."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

import pytest

from tests.unit import test_engine_files_safety as safety
from trainjob_magics.engine.files import archive
from trainjob_magics.engine.files.archive import data_safe, unpack


@pytest.fixture
def old_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile as Python 3.11.2 has it: no data_filter, no FilterError, no extract(filter=)."""
    monkeypatch.setattr(archive, "_DATA_FILTER", None)
    monkeypatch.setattr(archive, "_FILTER_ERRORS", ())
    real_extract = tarfile.TarFile.extract

    def extract(self, member, path="", set_attrs=True, *, numeric_owner=False, **kw):  # type: ignore[no-untyped-def]
        assert "filter" not in kw, "3.11.2's extract takes no filter"
        return real_extract(self, member, path, set_attrs, numeric_owner=numeric_owner)

    monkeypatch.setattr(tarfile.TarFile, "extract", extract)


@pytest.mark.parametrize(
    ("members", "why"), safety.test_unsafe_members_refused_before_writing.pytestmark[0].args[1]
)
def test_unsafe_members_refused_without_the_filter(
    old_python: None, tmp_path: Path, members: tuple[tuple[str, str, str], ...], why: str
) -> None:
    safety.test_unsafe_members_refused_before_writing(tmp_path, members, why)


def test_a_safe_archive_extracts_without_the_filter(old_python: None, tmp_path: Path) -> None:
    safety.test_safe_archive_with_inner_links_extracts(tmp_path)


def _member(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid = kind, mode, 4242, 4242
    info.uname = info.gname = "someone"
    if kind == tarfile.SYMTYPE:
        info.linkname = "f"
    return info


@pytest.mark.skipif(not hasattr(tarfile, "data_filter"), reason="this Python has no data_filter")
@pytest.mark.parametrize("mode", [0o4777, 0o2775, 0o1777, 0o664, 0o700, 0o644, 0o011, 0o000])
@pytest.mark.parametrize("kind", [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE])
def test_the_fallback_does_what_data_filter_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: bytes, mode: int
) -> None:
    member = _member("out/f", kind, mode)
    want = tarfile.data_filter(member, str(tmp_path))
    monkeypatch.setattr(archive, "_DATA_FILTER", None)
    got = data_safe(member, str(tmp_path))
    assert (got.mode, got.uid, got.gid, got.uname, got.gname) == (
        want.mode,
        want.uid,
        want.gid,
        want.uname,
        want.gname,
    )
    assert member.mode == mode and member.uid == 4242  # the member itself is left as it was


def test_a_setuid_group_writable_file_lands_without_those_bits(
    old_python: None, tmp_path: Path
) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(_member("out", tarfile.DIRTYPE, 0o755))
        info = _member("out/run.sh", tarfile.REGTYPE, 0o6777)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    buf.seek(0)
    staging = tmp_path / "staging"
    staging.mkdir()
    files = unpack(buf, "out", staging)
    assert files["out/run.sh"].size == 2
    mode = stat.S_IMODE((staging / "out" / "run.sh").stat().st_mode)
    assert mode == 0o755, oct(mode)
