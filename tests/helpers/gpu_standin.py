"""The stand-in ``nvidia-smi`` (``tests/helpers/standin_nvidia_smi/nvidia-smi``: NOT NVIDIA's
tool, made-up values) and how tests put it on a local-cluster pod's PATH: the local cluster
gives each pod the PATH of the process that runs it, read when the pod starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

STANDIN_DIR = Path(__file__).resolve().parent / "standin_nvidia_smi"
STANDIN_GPU_NAME = "Stand-in GPU (not NVIDIA)"
LOG_ENV = "STANDIN_NVIDIA_SMI_LOG"


def put_standin_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pods started from now on (in this test) find the stand-in as ``nvidia-smi``."""
    monkeypatch.setenv("PATH", f"{STANDIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}")


def calls(log: Path) -> list[str]:
    """The pods the stand-in answered, one line per call."""
    return log.read_text().split() if log.exists() else []
