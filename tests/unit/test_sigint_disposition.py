"""The suite does not depend on how it was started: a shell that starts it in the background
(``nohup bash .ci/run &``) starts it with SIGINT ignored, and an ignored signal stays ignored
in every child (kernels, pod processes, ``sh``). tests/conftest.py restores Python's handler,
which a child gets back as the default disposition."""

from __future__ import annotations

import signal
import subprocess
import sys


def _ignored_in(status: str) -> int:
    line = next(x for x in status.splitlines() if x.startswith("SigIgn:"))
    return int(line.split()[1], 16)


def test_this_process_handles_sigint() -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_children_get_the_default_sigint_disposition() -> None:
    status = subprocess.run(
        ["sh", "-c", "cat /proc/self/status"], capture_output=True, text=True, check=True
    ).stdout
    assert not _ignored_in(status) & (1 << (signal.SIGINT - 1))
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
