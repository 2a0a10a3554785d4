"""Errors of the magics, shown by IPython as one line without a traceback."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

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


class TrainJobMagicError(Exception):
    """A magic failed; IPython shows it as one line, without a traceback, and fails the cell."""

    def _render_traceback_(self) -> list[str]:
        return [one_line(self)]


class TrainJobUsageError(UsageError):
    """Bad magic usage; one line, and (unlike a plain ``UsageError``) a proper error reply."""

    def _render_traceback_(self) -> list[str]:
        return [one_line(self)]


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


def as_one_line(exc: BaseException) -> BaseException:
    """Make an engine error render as one line (keeps its type for nbclient's ``ename``)."""
    try:
        exc._render_traceback_ = lambda: [one_line(exc)]  # type: ignore[attr-defined]
    except Exception:
        return TrainJobMagicError(f"{type(exc).__name__}: {exc}")
    return exc
