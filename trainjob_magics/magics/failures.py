"""Errors of the magics, and the one place that decides how a magic's error is shown.

Every magic runs under :func:`magic_errors` (after jupysql's ``short_errors``): a user error
(the engine's ``TrainJobError`` family, a bad option, a local file) is one line without a
traceback; anything else is a bug, shown as a line saying so above its full traceback.
``%config TrainJobMagics.show_tracebacks = True`` shows the traceback of every error. The
exception raised is the one that happened (nbclient's ``ename`` is its type); only how IPython
draws it (``_render_traceback_``) is set here.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from IPython.core.error import UsageError

from ..engine import TrainJobError

# Engine messages name keyword arguments of ``connect()``; in a magic the option is meant.
_MAGIC_WORDING = (
    ("pass an existing config_file", "pass an existing --kubeconfig PATH"),
    ("pass config_file=...", "pass --kubeconfig PATH"),
    ("pass context=...", "pass --context NAME"),
    ("point KUBECONFIG at a running one", "point KUBECONFIG or --kubeconfig at a running one"),
    ("with cpu=...", "with --cpu"),  # a request the local cluster's node can never hold
    ("memory=...", "--memory"),
    ("gpu=...", "--gpu"),
)


def _one_line_traceback(self: BaseException) -> list[str]:
    return [one_line(self)]


class TrainJobMagicError(Exception):
    """A magic failed; IPython shows it as one line, without a traceback, and fails the cell."""

    _render_traceback_ = _one_line_traceback


class TrainJobUsageError(UsageError):
    """Bad magic usage; one line, and (unlike a plain ``UsageError``) a proper error reply."""

    _render_traceback_ = _one_line_traceback


class TrainJobCellError(TrainJobMagicError):
    """A ``%%trainjob`` cell failed (non-zero exit, timeout, interrupt); ``result`` holds output."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


def magic_wording(text: str) -> str:
    """An engine message with its ``connect()`` argument names replaced by magic options."""
    for engine_words, magic_words in _MAGIC_WORDING:
        text = text.replace(engine_words, magic_words)
    return text


def one_line(exc: BaseException) -> str:
    """``Name: message`` on one line, the name in red (ANSI) as IPython shows errors."""
    msg = magic_wording(" ".join(str(exc).split()))
    return f"\x1b[0;31m{type(exc).__name__}\x1b[0m: {msg}"


# What a user can fix from the one line: the engine's errors, the magics' own (bad options,
# a failed cell), and this host's files and sockets (a download into a read-only directory).
USER_ERRORS: tuple[type[BaseException], ...] = (
    TrainJobError,
    TrainJobMagicError,
    UsageError,
    OSError,
)

BUG_LINE = (
    "\x1b[0;31mtrainjob_magics bug\x1b[0m: unexpected {name} (not something you did); the "
    "traceback below shows where, please report it with the cell that raised it"
)

P = ParamSpec("P")
R = TypeVar("R")


def magic_errors(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """Run a magic's body; an exception it raises is re-raised as it is, drawn by IPython as
    :func:`shown_as` decides (the magic's ``show_tracebacks`` setting, its ``shell``)."""

    @functools.wraps(method)
    def run(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            shown_as(exc, exc.__traceback__, self.shell, full=bool(self.show_tracebacks))
            raise

    run.magic_errors = True  # type: ignore[attr-defined]  # tests check every magic has it
    return run


def shown_as(exc: BaseException, tb: TracebackType | None, shell: Any, *, full: bool) -> None:
    """Set how IPython draws ``exc``: one line for a user error (or what its class draws, as
    a ``--python`` cell's remote traceback); the bug line and the traceback for anything else;
    with ``full``, the traceback of every error (above what its class draws)."""
    user = isinstance(exc, USER_ERRORS)
    own = getattr(type(exc), "_render_traceback_", _one_line_traceback)
    draws_itself = own is not _one_line_traceback
    if user and not full and draws_itself:
        return

    def lines() -> list[str]:
        if user and not full:
            return [one_line(exc)]
        bug = [] if user else [BUG_LINE.format(name=type(exc).__name__)]
        drawn = own(exc) if user and draws_itself else []
        return [*bug, *full_traceback(exc, tb, shell), *drawn]

    exc._render_traceback_ = lines  # type: ignore[attr-defined]  # IPython's per-exception hook


def full_traceback(exc: BaseException, tb: TracebackType | None, shell: Any) -> list[str]:
    """``exc``'s traceback as IPython draws one (its colours and mode), from the magic down
    (the frame of :func:`magic_errors` left out); plain Python's without a shell."""
    formatter = getattr(shell, "InteractiveTB", None)
    if formatter is None:
        return traceback.format_exception(type(exc), exc, tb)
    return formatter.structured_traceback(type(exc), exc, tb, tb_offset=1)
