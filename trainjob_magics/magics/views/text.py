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
        """Write ``s`` (no ``\\r`` in it) at the cursor."""
        end = self.cursor + len(s)  # the cursor also moves past the cap: what is cut counts
        if end > self.max_chars:
            self.overflow = max(self.overflow, end - self.max_chars)
        if self.cursor < self.max_chars:
            s = s[: self.max_chars - self.cursor]
            self.text = self.text[: self.cursor] + s + self.text[self.cursor + len(s) :]
        self.cursor = end

    def feed(self, s: str) -> None:
        """Write ``s``; each ``\\r`` in it returns to column 0 first."""
        if "\r" not in s:
            self.write(s)
            return
        first, *rest = s.split("\r")
        self.write(first)
        self._overwrite(rest)

    def _overwrite(self, segments: list[str]) -> None:
        """Write each segment from column 0, as ``\\r`` + segment does, in one step: the last
        segment covers the ones before it, which show only where they are longer."""
        cap = self.max_chars
        longest = max(map(len, segments))
        if longest > cap:
            self.overflow = max(self.overflow, longest - cap)
        top = segments[-1][:cap]
        if longest > len(top):
            for seg in reversed(segments[:-1]):
                if len(top) >= cap:
                    break
                if len(seg) > len(top):
                    top += seg[len(top) : cap]
        self.text = top + self.text[len(top) :]
        self.cursor = len(segments[-1])

    def shown(self) -> str:
        if self.overflow:
            return f"{self.text} … [{self.overflow} more characters]"
        return self.text


# A run of finished lines of one stream: (stream, payload, line count). The payload is either
# the raw text as it arrived (whole lines, each ending in "\n", ``\r`` not yet applied) or the
# list of the lines as shown.
_Block = tuple[str, str | list[str], int]


class ScreenBuffer:
    """Terminal-like output model: per-stream partial lines, the last ``max_lines`` lines kept.

    Works on whole chunks, not lines: the finished lines of a chunk are kept as the text they
    arrived in (a few string scans per chunk, whatever its number of lines), and split, resolved
    (``\\r``) and capped only when they are looked at, and then only the last ``max_lines``.
    """

    def __init__(self, max_lines: int = 1000, max_line_chars: int = 10000) -> None:
        self.max_lines = max(1, max_lines)
        self.max_line_chars = max(1, max_line_chars)
        self.total = 0  # finished lines so far
        self._blocks: deque[_Block] = deque()
        self._kept = 0  # lines in _blocks (at least the last max_lines, when there are as many)
        self._partial: dict[str, _Line] = {}

    @property
    def hidden(self) -> int:
        """Finished lines no longer kept (all but the last ``max_lines``)."""
        return max(0, self.total - self.max_lines)

    def feed(self, stream: str, text: str, want: int = 0) -> list[tuple[str, str]]:
        """Add a chunk; returns the first ``want`` lines it finished as ``(stream, text)``
        (none by default: only a caller that shows lines one by one needs them)."""
        last = text.rfind("\n")
        line = self._partial.get(stream)
        if last < 0:
            if text:
                if line is None:
                    line = self._partial[stream] = _Line(self.max_line_chars)
                line.feed(text)
            return []
        new: list[_Block] = []
        start = 0
        if line is not None:
            start = text.find("\n") + 1
            line.feed(text[: start - 1])
            new.append((stream, [line.shown()], 1))
            del self._partial[stream]
        if start <= last:
            raw = text if start == 0 and last == len(text) - 1 else text[start : last + 1]
            new.append(self._block(stream, raw))
        if last < len(text) - 1:
            line = self._partial[stream] = _Line(self.max_line_chars)
            line.feed(text[last + 1 :])
        done = _first_lines(new, want, self._cook) if want > 0 else []
        for block in new:
            self._keep(block)
        return done

    def _block(self, stream: str, raw: str) -> _Block:
        """A block of raw lines; resolved at once when its lines are long (memory stays within
        ``max_line_chars`` per kept line)."""
        count = raw.count("\n")
        if len(raw) <= count * (self.max_line_chars + 1):
            return stream, raw, count
        return stream, [self._cook(t) for t in raw[:-1].split("\n")], count

    def _keep(self, block: _Block) -> None:
        self._blocks.append(block)
        self._kept += block[2]
        self.total += block[2]
        while self._kept - self._blocks[0][2] >= self.max_lines:
            self._kept -= self._blocks.popleft()[2]
        stream, payload, count = self._blocks[0]
        if count > 4 * self.max_lines and isinstance(payload, str):  # one huge chunk
            need = self.max_lines - (self._kept - count)
            cut = len(payload) - 1
            for _ in range(need):
                cut = payload.rfind("\n", 0, cut)
            self._blocks[0] = (stream, payload[cut + 1 :], need)
            self._kept -= count - need

    def _cook(self, raw: str) -> str:
        """A finished raw line as shown: ``\\r`` applied, cut at ``max_line_chars``."""
        if "\r" not in raw and len(raw) <= self.max_line_chars:
            return raw
        line = _Line(self.max_line_chars)
        line.feed(raw)
        return line.shown()

    @property
    def lines(self) -> list[tuple[str, str]]:
        """The last ``max_lines`` finished lines as ``(stream, text)``."""
        out: list[tuple[str, str]] = []
        for stream, payload, _count in self._blocks:
            if isinstance(payload, list):
                out.extend((stream, t) for t in payload)
            elif "\r" not in payload and len(payload) <= self.max_line_chars:
                out.extend((stream, t) for t in payload[:-1].split("\n"))
            else:
                out.extend((stream, self._cook(t)) for t in payload[:-1].split("\n"))
        return out[-self.max_lines :]

    def lines_since(self, index: int) -> list[tuple[str, str]]:
        """The kept finished lines numbered ``index`` (0 = the first line ever) and later."""
        lines = self.lines
        first = self.total - len(lines)
        return lines[max(0, index - first) :]

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


def _first_lines(
    blocks: list[_Block], want: int, cook: Callable[[str], str]
) -> list[tuple[str, str]]:
    """The first ``want`` lines of ``blocks``, as shown."""
    out: list[tuple[str, str]] = []
    for stream, payload, count in blocks:
        room = want - len(out)
        if room <= 0:
            break
        if isinstance(payload, list):
            out.extend((stream, t) for t in payload[:room])
        else:
            out.extend((stream, cook(t)) for t in payload.split("\n", room)[: min(room, count)])
    return out


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
        self.where = where
        self.output_path: str | None = None  # the result's spill file, set before finish()
        # keeps the tail printed at the end (its last tenth of max_lines lines)
        self.buffer = ScreenBuffer(max_lines=self.max_lines // 10, max_line_chars=max_line_chars)
        self.throttle = Throttle(interval, clock)
        self._out = {"stdout": stdout, "stderr": stderr}
        self._shown = 0
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
        self._print(self.buffer.feed(stream, text, want=self.max_lines - self._shown))
        self._dirty = True
        self.tick()

    def _print(self, lines: list[tuple[str, str]]) -> None:
        """Print finished lines, one write per run of lines of the same stream."""
        self._shown += len(lines)
        name = ""
        run: list[str] = []
        for stream, line in lines:
            if stream != name and run:
                self._emit(name, "".join(run))
                run = []
            name = stream
            run.append(self._overwrite(stream, line) + "\n")
        if run:
            self._emit(name, "".join(run))

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
        for name, _text in self.buffer.partials():
            self._print(self.buffer.feed(name, "\n", want=self.max_lines - self._shown))
        tail = self.buffer.lines_since(self._shown)
        if tail:
            for name in list(self._printed_partial):  # its line ended past the cap
                self._emit(name, "\n")
                del self._printed_partial[name]
            hidden = self.buffer.total - self._shown - len(tail)
            if hidden:
                self._emit("stdout", hidden_note(hidden, self.where, self.output_path) + "\n")
            self._print(tail)
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
