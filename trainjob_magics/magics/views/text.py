"""Plain-text rendering: terminal-like line buffer, throttle, streamed output, status tables.

Used as-is where no widget front end is present (terminal IPython, ``widgets='off'``) and as
the ``text/plain`` fallback of the widgets (nbconvert without widget state).
"""

from __future__ import annotations

import re
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

_SPLIT = re.compile(r"(\r\n|\r|\n)")


ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (colours, cursor moves)."""
    return ANSI.sub("", text)


class Throttle:
    """Allows one update per ``interval`` seconds."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._last: float | None = None

    def ready(self) -> bool:
        """True (and start a new interval) when an update may happen now."""
        now = self.clock()
        if self._last is not None and now - self._last < self.interval:
            return False
        self._last = now
        return True


class _Line:
    """One terminal line with a cursor: ``\\r`` returns to column 0, text overwrites."""

    __slots__ = ("cursor", "max_chars", "overflow", "text")

    def __init__(self, max_chars: int) -> None:
        self.text = ""
        self.cursor = 0
        self.overflow = 0
        self.max_chars = max_chars

    def write(self, s: str) -> None:
        room = self.max_chars - self.cursor
        if room <= 0:
            self.overflow = max(self.overflow, self.cursor + len(s) - self.max_chars)
            self.cursor += len(s)
            return
        if len(s) > room:
            self.overflow = max(self.overflow, self.cursor + len(s) - self.max_chars)
            s = s[:room]
        end = self.cursor + len(s)
        self.text = self.text[: self.cursor] + s + self.text[end:]
        self.cursor += len(s)

    def return_(self) -> None:
        self.cursor = 0

    def shown(self) -> str:
        if self.overflow:
            return f"{self.text} … [{self.overflow} more characters]"
        return self.text


class ScreenBuffer:
    """Terminal-like output model: per-stream partial lines, the last ``max_lines`` lines kept."""

    def __init__(self, max_lines: int = 1000, max_line_chars: int = 10000) -> None:
        self.max_lines = max(1, max_lines)
        self.max_line_chars = max(1, max_line_chars)
        self.lines: deque[tuple[str, str]] = deque()
        self.hidden = 0
        self.total = 0
        self._partial: dict[str, _Line] = {}

    def feed(self, stream: str, text: str) -> list[tuple[str, str]]:
        """Add a chunk; returns the lines it completed as ``(stream, text)``."""
        done: list[tuple[str, str]] = []
        line = self._partial.get(stream)
        for part in _SPLIT.split(text):
            if not part:
                continue
            if line is None:
                line = self._partial[stream] = _Line(self.max_line_chars)
            if part == "\r":
                line.return_()
            elif part in ("\n", "\r\n"):
                done.append((stream, line.shown()))
                line = self._partial[stream] = _Line(self.max_line_chars)
            else:
                line.write(part)
        for item in done:
            self._keep(item)
        return done

    def _keep(self, item: tuple[str, str]) -> None:
        self.lines.append(item)
        self.total += 1
        if len(self.lines) > self.max_lines:
            self.lines.popleft()
            self.hidden += 1

    def partials(self) -> list[tuple[str, str]]:
        """Unfinished lines (progress bars, prompts) in stream order stdout, stderr."""
        return [
            (name, line.shown())
            for name, line in sorted(self._partial.items())
            if line.text or line.overflow
        ][::-1]

    def view(self) -> list[tuple[str, str]]:
        """What a terminal would show: the kept lines, then the unfinished ones."""
        return [*self.lines, *self.partials()]


def hidden_note(hidden: int, where: str, path: str | None = None) -> str:
    """The line saying how much output was hidden and where the full output is (``path``: the
    file it was spilled to when it outgrew the memory limit)."""
    s = "" if hidden == 1 else "s"
    spilled = f", stored in the file {path}" if path else ""
    return f"[… {hidden:,} line{s} hidden; the full output is in {where}{spilled}]"


def footer_text(returncode: int | None, duration: float, pod: str = "", extra: str = "") -> str:
    """``exit code 0 · 1.23 s · pod x`` (``extra`` for interruptions, timeouts)."""
    code = "no exit code" if returncode is None else f"exit code {returncode}"
    parts = [code, f"{duration:.2f} s"]
    if pod:
        parts.append(f"pod {pod}")
    if extra:
        parts.append(extra)
    return " · ".join(parts)


def echoes_ctrl_c(stream: Any) -> bool:
    """True when ``stream`` is a terminal that shows a typed Ctrl-C as ``^C`` (so the next
    output would be glued to it)."""
    try:
        import termios

        if not stream.isatty():
            return False
        lflag = termios.tcgetattr(stream.fileno())[3]
    except Exception:  # no termios, no fileno, not a terminal (termios.error)
        return False
    echoctl = getattr(termios, "ECHOCTL", 0)
    return bool(echoctl and lflag & termios.ECHO and lflag & echoctl)


class TextOutputView:
    """Streams a cell's output as text: the first ``max_lines`` lines live, then the tail."""

    def __init__(
        self,
        max_lines: int = 1000,
        max_line_chars: int = 10000,
        interval: float = 0.1,
        where: str = "_trainjob",
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_lines = max(1, max_lines)
        self.tail: deque[tuple[str, str]] = deque(maxlen=max(1, self.max_lines // 10))
        self.where = where
        self.output_path: str | None = None  # the result's spill file, set before finish()
        self.buffer = ScreenBuffer(max_lines=1, max_line_chars=max_line_chars)
        self.throttle = Throttle(interval, clock)
        self._out = {"stdout": stdout, "stderr": stderr}
        self._shown = 0
        self._hidden = 0
        self._printed_partial: dict[str, str] = {}
        self._dirty = False
        self._at_line_start = True  # the last text written ended with a newline

    def _stream(self, name: str) -> TextIO:
        s = self._out.get(name)
        if s is not None:
            return s
        return sys.stderr if name == "stderr" else sys.stdout

    def _emit(self, name: str, text: str) -> None:
        s = self._stream(name)
        s.write(text)
        s.flush()
        if text:
            self._at_line_start = text.endswith("\n")

    def write(self, stream: str, text: str) -> None:
        """Take a chunk; complete lines are printed at once (within the cap)."""
        for name, line in self.buffer.feed(stream, text):
            self._complete(name, line)
        self._dirty = True
        self.tick()

    def _complete(self, name: str, line: str) -> None:
        """A finished line: printed within the cap, else kept in the tail."""
        if self._shown < self.max_lines:
            self._emit(name, self._overwrite(name, line) + "\n")
            self._shown += 1
        else:
            self._printed_partial.pop(name, None)
            if len(self.tail) == self.tail.maxlen:
                self._hidden += 1
            self.tail.append((name, line))

    def _overwrite(self, name: str, line: str) -> str:
        """``\\r`` + text padded over a progress line printed before, else the text."""
        before = self._printed_partial.pop(name, None)
        if before is None:
            return line
        return "\r" + line.ljust(len(before))

    def tick(self) -> None:
        """Show changed unfinished lines (progress bars) at most once per interval."""
        if not self._dirty or self._shown >= self.max_lines or not self.throttle.ready():
            return
        self._dirty = False
        for name, text in self.buffer.partials():
            if self._printed_partial.get(name) != text:
                self._emit(name, self._overwrite(name, text))
                self._printed_partial[name] = text

    def finish(self, footer: str | None = None, ok: bool = True, interrupted: bool = False) -> None:
        """Print the unfinished lines, the hidden-lines note, the tail and the footer (on a
        line of its own, also after a ``^C`` the terminal echoed when ``interrupted``)."""
        for name, text in self.buffer.partials():
            self.buffer.feed(name, "\n")
            self._complete(name, text)
        if self.tail:
            if self._hidden:
                self._emit("stdout", hidden_note(self._hidden, self.where, self.output_path) + "\n")
            for name, line in self.tail:
                self._emit(name, line + "\n")
            self.tail.clear()
        if footer:
            glued = interrupted and echoes_ctrl_c(self._stream("stdout"))
            lead = "" if self._at_line_start and not glued else "\n"
            self._emit("stdout", lead + footer + "\n")


class NullOutputView:
    """Output view of ``--quiet``: shows nothing."""

    def write(self, stream: str, text: str) -> None:
        pass

    def tick(self) -> None:
        pass

    def finish(self, footer: str | None = None, ok: bool = True, interrupted: bool = False) -> None:
        pass
