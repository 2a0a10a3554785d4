"""A pod whose image has neither python3 nor tar (the real stack's minimal image): the transfer
scripts stop before making anything, and the engine says in one line what a transfer needs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from trainjob_magics.engine.errors import TransferError
from trainjob_magics.engine.files import manifest
from trainjob_magics.engine.files.transfer import _check
from trainjob_magics.engine.result import ExecResult


@pytest.fixture
def bare_path(tmp_path: Path) -> str:
    """A PATH with a shell and mkdir but no tar and no python3."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "mkdir"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    return str(bin_dir)


@pytest.mark.parametrize("script", ["UPLOAD_SH", "DOWNLOAD_SH"])
def test_the_verified_scripts_stop_first(script: str, bare_path: str, tmp_path: Path) -> None:
    target = tmp_path / "made-by-the-script"
    argv = ["sh", "-c", getattr(manifest, script), "sh", str(target), "x", "code", "/no/python3"]
    proc = subprocess.run(argv, env={"PATH": bare_path}, capture_output=True, text=True)
    assert proc.returncode == 127 and manifest.NO_TOOLS in proc.stderr, proc.stderr
    assert not target.exists()


@pytest.mark.parametrize("script", ["UPLOAD_TAR_SH", "PACK_SH"])
def test_the_plain_tar_scripts_stop_first(script: str, bare_path: str, tmp_path: Path) -> None:
    target = tmp_path / "made-by-the-script"
    argv = ["sh", "-c", getattr(manifest, script), "sh", str(target), "x"]
    proc = subprocess.run(argv, env={"PATH": bare_path}, capture_output=True, text=True)
    assert proc.returncode == 127 and manifest.NO_TOOLS in proc.stderr, proc.stderr
    assert not target.exists()


def test_the_engine_says_what_a_transfer_needs_in_one_line() -> None:
    result = ExecResult("", f"{manifest.NO_TOOLS}\n", 127, pod="p-0")
    with pytest.raises(TransferError) as err:
        _check(result, "unpacking into x", "p-0")
    text = str(err.value)
    assert "\n" not in text and "python3 or tar" in text and "p-0" in text
