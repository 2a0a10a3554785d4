"""The real ``torchrun`` for tests: Debian's ``python3-torch`` (bookworm: 1.13.1).

Debian bookworm's torchrun cannot start under its Python 3.11: ``Std.from_str`` (torch
1.13's torch/distributed/elastic/multiprocessing/api.py) looks values up by iterating the
``IntFlag``, which no longer yields ``NONE`` (0) and ``ALL`` (3), so the default ``--redirects
0`` already ends in ``AttributeError``. :func:`torchrun_launcher` writes a ``torchrun`` that runs
Debian's with that one function as torch 2.x has it (``Std(int(v))``); everything else (the
agent, ``--tee``, the tail, the failure report) is Debian's own.

A test of the real torchrun calls :func:`require_torch`: it skips where ``python3-torch`` is
missing and fails instead under ``TRAINJOB_MAGICS_REQUIRE_TORCH=1``, so a CI that installs it
never passes by skipping.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ENV_REQUIRE = "TRAINJOB_MAGICS_REQUIRE_TORCH"
# scripts/test.sh installs python3-torch in the background under ENV_REQUIRE: the file this
# names gets apt-get's exit code when it ended (its output beside it, .log)
ENV_PENDING = "TRAINJOB_MAGICS_TORCH_PENDING"
INSTALL_WAIT = 20 * 60.0  # seconds: 83-143 s cold here, on a loaded machine longer
SYSTEM_PYTHON = "/usr/bin/python3"

LAUNCHER = f"""#!{SYSTEM_PYTHON}
# Debian bookworm's torchrun (torch 1.13.1) with Std.from_str's lookup as torch 2.x has it
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(vm):
    if re.match(api._VALUE_REGEX, vm):
        return api.Std(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {{int(i): api.Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}}
    raise ValueError(vm)


api.Std.from_str = staticmethod(_from_str)
from torch.distributed.run import main  # noqa: E402

sys.exit(main())
"""


def torch_version() -> str | None:
    """The system Python's torch version, or None when it has no torch."""
    if not os.path.exists(SYSTEM_PYTHON):
        return None
    code = "import importlib.metadata as m; print(m.version('torch'))"
    done = subprocess.run([SYSTEM_PYTHON, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def require_torch() -> str:
    """The system Python's torch version; skips (or fails under ENV_REQUIRE) without it.
    Waits for scripts/test.sh's background install first, when there is one."""
    _wait_for_background_install()
    version = torch_version()
    if version is None:
        line = "Debian's python3-torch is not installed: apt-get install python3-torch"
        if os.environ.get(ENV_REQUIRE, "") not in ("", "0"):
            pytest.fail(f"{line}; {ENV_REQUIRE} is set", pytrace=False)
        pytest.skip(line)
    return version


def _wait_for_background_install() -> None:
    pending = os.environ.get(ENV_PENDING)
    if not pending:
        return
    rc_file = Path(pending)
    deadline = time.monotonic() + INSTALL_WAIT
    while not rc_file.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"python3-torch still installing after {INSTALL_WAIT / 60:.0f} min")
        time.sleep(1.0)
    rc = rc_file.read_text().strip()
    if rc != "0":
        log = rc_file.with_suffix(".log")
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        pytest.fail(f"installing python3-torch exited {rc}:\n{tail}", pytrace=False)


def torchrun_launcher(directory: Path) -> Path:
    """``directory/torchrun``: Debian's torchrun, able to start (see the module's docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "torchrun"
    path.write_text(LAUNCHER)
    path.chmod(0o755)
    return path
