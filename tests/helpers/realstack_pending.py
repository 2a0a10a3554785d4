"""The real stack started in the background (scripts/test.sh): its builds take most of a cold
run, so the tests that need no stack run meanwhile, and the ones that need it run last and wait
for it here.

``TRAINJOB_MAGICS_REALSTACK_PENDING`` names the file where the background
``python -m devtools.realstack up`` writes its exit code when it ends; its output is beside it
(``.log``). Without the variable nothing waits: the stack was started before pytest, or not.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

ENV = "TRAINJOB_MAGICS_REALSTACK_PENDING"
WAIT = 75 * 60.0  # seconds: a cold build on 2 cores takes about 25 minutes
POLL = 2.0

# what needs the running stack (the rest of tests/realstack only reads the build: it runs last
# too, which costs nothing)
NEEDS_STACK = ("differential", "realstack", "integration/test_realstack_suite.py")

_outcome: dict[str, str] = {}  # "rc" and "why", once known


def needs_stack(path: Path, tests_root: Path) -> bool:
    try:
        rel = path.resolve().relative_to(tests_root).as_posix()
    except ValueError:
        return False
    return any(rel == p or rel.startswith(p + "/") for p in NEEDS_STACK)


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no output at {log})"


def wait_for_background_up() -> None:
    """Block until the background ``up`` ended; fail (or skip, when the stack is optional) the
    test with the end of its output if it did not start the stack."""
    pending = os.environ.get(ENV)
    if not pending:
        return
    if "rc" not in _outcome:
        rc_file = Path(pending)
        deadline = time.monotonic() + WAIT
        while not rc_file.exists():
            if time.monotonic() > deadline:
                _outcome.update(rc="timeout", why=f"still starting after {WAIT / 60:.0f} min")
                break
            time.sleep(POLL)
        else:
            rc = rc_file.read_text().strip()
            why = f"`python -m devtools.realstack up` exited {rc}:\n" if rc != "0" else ""
            _outcome.update(rc=rc, why=why + (_tail(rc_file.with_suffix(".log")) if why else ""))
    if _outcome["rc"] != "0":
        message = f"the real stack did not start: {_outcome['why']}"
        if os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
