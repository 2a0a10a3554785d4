"""What a Python cell gives back: :class:`PythonResult` (one pod), :class:`MultiPythonResult`,
and the reading of a client's output (user output, then ``NONCE + JSON``)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..result import ExecResult


@dataclass
class RemoteError:
    """An exception raised by the code in the remote interpreter."""

    type: str
    message: str
    traceback: str = ""  # the traceback of the user's code (agent frames left out)

    def line(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass
class PythonResult:
    """One pod's outcome of a Python cell: output, the value's forms, the remote error."""

    pod: str
    stdout: str = ""
    stderr: str = ""
    output: str = ""  # stdout and stderr in the order they arrived
    data: dict[str, str] = field(default_factory=dict)  # mime -> form; text/plain is the repr
    error: RemoteError | None = None
    duration: float = 0.0
    instance: str = ""  # the interpreter's id: another id means another interpreter (state lost)
    notes: list[str] = field(default_factory=list)  # e.g. "a new interpreter started"
    values: dict[str, str] = field(default_factory=dict, repr=False)  # pull: name -> pickle

    @property
    def ok(self) -> bool:
        """True when the code raised nothing."""
        return self.error is None

    @property
    def value(self) -> str | None:
        """The repr of the last expression's value (None when there was none)."""
        return self.data.get("text/plain")

    @property
    def returncode(self) -> int:
        """0 when the code raised nothing, else 1 (for views that show exit codes)."""
        return 0 if self.error is None else 1

    @property
    def status_label(self) -> str:
        """What a view shows instead of an exit code: ``ok``, or the exception's name."""
        return "ok" if self.error is None else self.error.type

    def __repr__(self) -> str:
        what = f"error={self.error.line()!r}" if self.error else f"value={self.value!r}"
        return f"PythonResult(pod={self.pod!r}, {what}, duration={self.duration:.3f})"


@dataclass
class MultiPythonResult(Mapping[str, PythonResult]):
    """A Python cell on several pods: pod -> :class:`PythonResult`; ``errors`` holds the pods
    whose exec itself failed (their result has the output received before)."""

    results: dict[str, PythonResult]
    errors: dict[str, BaseException] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    duration: float = 0.0

    def __getitem__(self, pod: str) -> PythonResult:
        return self.results[pod]

    def __iter__(self) -> Iterator[str]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @property
    def failed(self) -> list[str]:
        return [p for p, r in self.results.items() if p in self.errors or not r.ok]

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        failed = self.failed
        if not failed:
            return f"{len(self)} pod{'s' if len(self) != 1 else ''} ok ({self.duration:.2f}s)"
        reasons = []
        for pod in failed:
            name = f"{pod} [{self.labels[pod]}]" if pod in self.labels else pod
            err, remote = self.errors.get(pod), self.results[pod].error
            why = remote.line() if err is None and remote is not None else type(err).__name__
            reasons.append(f"{name} ({why})")
        return f"{len(failed)} of {len(self)} pods failed: " + ", ".join(reasons)


@dataclass
class Outcome:
    """What one client exec said: the user's stdout and the JSON that ended it (None: none)."""

    stdout: str
    frame: dict[str, Any] | None
    nonce: str = ""  # what marked the result frame

    @property
    def status(self) -> str:
        """``done``, ``no-agent``, ``agent-gone`` or ``missing`` (no result arrived)."""
        if self.frame is None:
            return "missing"
        return str(self.frame.get("status", "done"))


def read_outcome(result: ExecResult, nonce: str) -> Outcome:
    """Split a client's output at the nonce."""
    text = result.stdout
    at = text.rfind(nonce)
    if at < 0:
        return Outcome(text, None, nonce)
    try:
        frame = json.loads(text[at + len(nonce) :])
    except ValueError:
        frame = None
    return Outcome(text[:at], frame if isinstance(frame, dict) else None, nonce)


def without_frame(output: str, nonce: str) -> str:
    """The interleaved output without the ``NONCE + JSON`` line that ended stdout."""
    at = output.rfind(nonce) if nonce else -1
    if at < 0:
        return output
    end = output.find("\n", at)
    return output[:at] + (output[end + 1 :] if end >= 0 else "")


def python_result(result: ExecResult, outcome: Outcome) -> PythonResult:
    """The PythonResult of a finished client exec."""
    frame = outcome.frame or {}
    error = frame.get("error")
    return PythonResult(
        pod=result.pod,
        stdout=outcome.stdout,
        stderr=result.stderr,
        output=without_frame(result.output, outcome.nonce),
        data=dict(frame.get("data") or {}),
        error=RemoteError(
            str(error.get("type", "Error")),
            str(error.get("message", "")),
            str(error.get("traceback", "")),
        )
        if isinstance(error, dict)
        else None,
        duration=result.duration,
        instance=str(frame.get("instance", "")),
        values=dict(frame.get("values") or {}),
    )


class StdoutFilter:
    """Passes a client's stdout on as it streams, holding back what may begin the nonce and
    dropping the result frame after it."""

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        self.held = ""
        self.done = False

    def feed(self, text: str) -> str:
        if self.done:
            return ""
        text = self.held + text
        at = text.find(self.nonce)
        if at >= 0:
            self.done, self.held = True, ""
            return text[:at]
        keep = 0
        for n in range(min(len(self.nonce) - 1, len(text)), 0, -1):
            if self.nonce.startswith(text[-n:]):
                keep = n
                break
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]


__all__ = [
    "MultiPythonResult",
    "Outcome",
    "PythonResult",
    "RemoteError",
    "StdoutFilter",
    "python_result",
    "read_outcome",
]
