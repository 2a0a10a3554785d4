"""Every magic runs under the one error handler (trainjob_magics/magics/failures.py), so a magic
added later cannot show a bug as one line or an engine error as a traceback."""

from __future__ import annotations

import sys

from trainjob_magics.engine import NotFoundError, TrainJobError
from trainjob_magics.magics.failures import shown_as
from trainjob_magics.magics.magics import TrainJobMagics


def test_every_magic_has_the_handler() -> None:
    names = [n for kind in ("line", "cell") for n in TrainJobMagics.magics[kind].values()]
    assert len(names) >= 13
    missing = [n for n in names if not getattr(getattr(TrainJobMagics, n), "magic_errors", False)]
    assert missing == []


def test_without_a_shell_a_bug_still_shows_its_traceback() -> None:
    try:
        {}["key"]
    except KeyError as exc:
        shown_as(exc, sys.exc_info()[2], None, full=False)
        lines = exc._render_traceback_()  # type: ignore[attr-defined]
    text = "".join(lines)
    assert "trainjob_magics bug" in lines[0] and "unexpected KeyError" in lines[0]
    assert "Traceback (most recent call last)" in text and "test_without_a_shell" in text


def test_a_user_error_is_its_one_line_in_the_magics_words() -> None:
    exc = NotFoundError("no kubeconfig: pass config_file=...")
    shown_as(exc, None, None, full=False)
    assert exc._render_traceback_() == [  # type: ignore[attr-defined]
        "\x1b[0;31mNotFoundError\x1b[0m: no kubeconfig: pass --kubeconfig PATH"
    ]


class DrawsItself(TrainJobError):
    """Like a ``--python`` cell's error: its class draws the remote traceback."""

    def _render_traceback_(self) -> list[str]:
        return ["the remote traceback"]


def test_an_error_that_draws_itself_keeps_it_and_gets_the_local_traceback_in_full() -> None:
    exc = DrawsItself("x")
    shown_as(exc, None, None, full=False)
    assert exc._render_traceback_() == ["the remote traceback"]
    exc = DrawsItself("x")
    shown_as(exc, None, None, full=True)
    lines = exc._render_traceback_()
    assert lines[-1] == "the remote traceback" and "DrawsItself: x" in "".join(lines[:-1])
