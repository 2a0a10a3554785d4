"""How a magic's error is shown (trainjob_magics/magics/failures.py, one place for every magic):
a user error is one line, a bug says it is one above its full traceback, and
``%config TrainJobMagics.show_tracebacks = True`` shows the traceback of every error.

A real InteractiveShell against the local cluster; the bug is planted in the engine.
"""

from __future__ import annotations

import re

import pytest
from IPython.core.interactiveshell import InteractiveShell

from trainjob_magics.engine import connecting

pytestmark = pytest.mark.timeout(120)


def shown(
    sh: InteractiveShell, source: str, capsys: pytest.CaptureFixture[str]
) -> tuple[BaseException | None, str]:
    """Run a cell as a user would; (the error it raised, what the terminal showed)."""
    capsys.readouterr()
    res = sh.run_cell(source)
    out = capsys.readouterr()
    return res.error_in_exec, re.sub(r"\x1b\[[0-9;]*m", "", out.out + out.err)


def planted_bug(*args: object, **kwargs: object) -> None:
    """An engine function with a bug in it."""
    raise ZeroDivisionError("division by zero")


def test_an_engine_error_is_one_line(shell, cluster, capsys) -> None:
    error, out = shown(shell, "%trainjob_connect no-such-runtime", capsys)
    assert type(error).__name__ == "InvalidInputError"  # the engine's error, as nbclient names it
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    assert "InvalidInputError" in lines[0] and "no-such-runtime" in lines[0]
    assert "Traceback" not in out and "bug" not in out


def test_a_bad_option_is_one_line(shell, cluster, capsys) -> None:
    error, out = shown(shell, "%trainjob_connect mpi-interactive --nodes two", capsys)
    assert type(error).__name__ == "TrainJobUsageError"
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out, out


def test_a_bug_says_so_above_its_full_traceback(shell, cluster, capsys, monkeypatch) -> None:
    monkeypatch.setattr(connecting, "build_trainjob", planted_bug)
    error, out = shown(shell, "%trainjob_connect mpi-interactive", capsys)
    assert isinstance(error, ZeroDivisionError)  # raised as it is: nbclient's ename
    first = next(line for line in out.splitlines() if "trainjob_magics bug" in line)
    assert "unexpected ZeroDivisionError" in first and "report it" in first, out
    assert "Traceback" in out
    # the frames from the magic down to the planted bug, through the connect's worker thread
    for frame in ("trainjob_connect", "run_connect", "planted_bug"):
        assert frame in out, out
    assert out.index("trainjob_magics bug") < out.index("planted_bug")
    assert "division by zero" in out


def test_show_tracebacks_shows_them_for_user_errors_too(shell, cluster, capsys) -> None:
    shell.run_line_magic("config", "TrainJobMagics.show_tracebacks = True")
    error, out = shown(shell, "%trainjob_connect no-such-runtime", capsys)
    assert type(error).__name__ == "InvalidInputError"
    assert "Traceback" in out and "engine/connecting.py" in out, out  # where it was raised
    assert "no-such-runtime" in out and "bug" not in out
    error, out = shown(shell, "%trainjob_status", capsys)  # no session: the magics' own error
    assert type(error).__name__ == "TrainJobUsageError"
    assert "Traceback" in out and "show_status" in out, out
    shell.run_line_magic("config", "TrainJobMagics.show_tracebacks = False")
    error, out = shown(shell, "%trainjob_status", capsys)
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out, out
