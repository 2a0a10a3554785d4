"""A mistyped option gets the one it most likely meant; a word like no option gets none
(issue 29: ``--bogus`` suggested ``--out``, close only through the shared ``--``)."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from trainjob_magics.magics.failures import TrainJobUsageError
from trainjob_magics.magics.magics import TrainJobMagics
from trainjob_magics.magics.options import parse


@pytest.fixture(scope="module")
def magics() -> TrainJobMagics:
    # the unit tests' one shell (tests/unit/conftest.py): a second kind of shell is refused
    return TrainJobMagics(shell=InteractiveShell.instance())


def _error(fn: object, line: str) -> str:
    with pytest.raises(TrainJobUsageError) as caught:
        parse(fn, line)  # type: ignore[arg-type]
    return str(caught.value)


def test_bogus_suggests_nothing(magics: TrainJobMagics) -> None:
    message = _error(magics.trainjob_connect, "mpi-interactive --bogus")
    assert "unrecognized arguments: --bogus" in message
    assert "did you mean" not in message


@pytest.mark.parametrize(("typed", "meant"), [("--gpus", "--gpu"), ("--namspace", "--namespace")])
def test_a_typo_gets_the_option(magics: TrainJobMagics, typed: str, meant: str) -> None:
    message = _error(magics.trainjob_connect, f"mpi-interactive {typed} 1")
    assert f"(did you mean {meant}?)" in message
