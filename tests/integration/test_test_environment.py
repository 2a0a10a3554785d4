"""The processes the tests start run the suite's own Python (the venv of scripts/venv.sh)."""

from __future__ import annotations

import json
import sys

from tests.helpers.kernels import Kernel


def test_kernels_run_in_the_suites_venv_over_unix_sockets() -> None:
    """The python3 kernelspec resolves to this interpreter's environment, not the system's; the
    kernel listens on Unix sockets (no TCP port, no "without encryption" warning)."""
    with Kernel() as kernel:
        assert kernel.km.transport == "ipc" and kernel.km.ip.startswith("/")
        _reply, out = kernel.run_text("import json, sys; print(json.dumps([sys.prefix]))")
    assert json.loads(out.strip().splitlines()[-1]) == [sys.prefix]
