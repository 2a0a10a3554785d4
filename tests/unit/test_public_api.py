"""The package's public API: every public engine type importable from the top, no IPython."""

from __future__ import annotations

import subprocess
import sys

import trainjob_magics
import trainjob_magics.engine as engine

NEWER_TYPES = [
    "MultiExecResult",
    "TransferResult",
    "TransferError",
    "UnsafeArchiveError",
    "PodLogs",
    "PodRef",
    "StopReport",
    "CommandInterruptedError",
    "IdleReleasedError",
    "QueueStatus",
    "SessionPreemptedError",
    "MAX_MEMORY_OUTPUT",
    "TRANSFER_RETRIES",
]


def test_newer_types_are_exported_from_engine_and_package() -> None:
    for name in NEWER_TYPES:
        assert name in engine.__all__ and name in trainjob_magics.__all__, name
        assert getattr(trainjob_magics, name) is getattr(engine, name)
    for name in trainjob_magics.__all__:
        assert hasattr(trainjob_magics, name), name


def test_import_does_not_load_ipython_or_aiohttp() -> None:
    code = (
        "import sys, trainjob_magics\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'IPython', 'ipywidgets', 'aiohttp', 'trainjob_magics.localcluster'})\n"
        "bad += [m for m in sys.modules if m.startswith(('trainjob_magics.magics', "
        "'trainjob_magics.localcluster'))]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
