"""What mpirun's and torchrun's demuxes share (:class:`MarkerDemux`): the walk over each chunk
of an exec's stdout and stderr between a prelude's marker lines.

A chunk is read up to the next marker; inside a tagged run the launcher's own parser
(:meth:`MarkerDemux._parse_run`) reads it. A marker or tag cut at a chunk's end is held back
until the next chunk. Each chunk's rank text is handed on at once (:meth:`MarkerDemux._flush`):
to the rank's output, and to the view as :class:`~.ranks_model.RankEvent` objects; over the
memory budget, the largest in-memory rank streams go to spill files. The launcher's own lines
are kept (:data:`LAUNCHER_KEEP` bytes) for the result and the failure report.
"""

from __future__ import annotations

import codecs
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .output import SpillDir, default_spill_dir, release_freed_memory
from .ranks_model import (
    STDERR,
    STDOUT,
    MpiOutput,
    MpiRun,
    OnRankEvent,
    RankEvent,
    RankFailure,
)

LAUNCHER = -1  # the owner of a line no rank printed

LAUNCHER_KEEP = 1 << 20  # bytes of launcher lines kept in memory per run (the rest counted)

MAX_MARKER = 1 << 16  # a begin marker names the hostfile's hosts: 256 hosts fit easily

Piece = bytes | memoryview
RankKey = tuple[str, int]  # (job, rank)
RunT = TypeVar("RunT", bound=MpiRun)


@dataclass
class ChannelState(Generic[RunT]):
    """One exec channel's parse state."""

    channel: int
    held: bytes = b""  # the end of the last chunk: maybe the start of a marker or a tag
    run: RunT | None = None  # the tagged run this channel is inside of
    owner: RankKey | int | None = None  # a rank's key, LAUNCHER, or None at a line's start
    line: bytearray = field(default_factory=bytearray)  # the launcher line being collected


StateT = TypeVar("StateT", bound="ChannelState[Any]")


class MarkerDemux(ABC, Generic[RunT, StateT]):
    """The runs between ``marker`` lines in an exec's two streams. ``words_at``: where a marker
    line's words start; ``limit``: bytes of rank output kept in memory, all ranks together
    (None: no bound); ``on_event`` gets :class:`~.ranks_model.RankEvent` objects."""

    spill_name = "rank"  # the spill files' name: ``{label}-{spill_name}{rank}-{stream}-``

    def __init__(
        self,
        marker: bytes,
        words_at: int,
        output: MpiOutput,
        state: Callable[[int], StateT],
        *,
        limit: int | None,
        spill_dir: SpillDir | None,
        on_event: OnRankEvent | None,
        label: str,
    ) -> None:
        self.marker = marker
        self.words_at = words_at
        self._streams: dict[int, StateT] = {ch: state(ch) for ch in (STDOUT, STDERR)}
        self.output = output
        self.limit = limit
        self.spill_dir = spill_dir
        self.on_event = on_event
        self.label = label
        self._runs: dict[int, RunT] = {}
        self._ended: dict[int, set[int]] = {}  # run -> the channels whose end marker came
        self._run_launcher: dict[int, list[str]] = {}  # run -> its launcher lines (the report)
        self._launcher_kept = 0
        self._pending: dict[tuple[RankKey, int], tuple[RunT, list[bytes]]] = {}
        self._plain: list[Piece] = []
        self._memory = 0
        self._decoders: dict[tuple[RankKey, int], Any] = {}

    # -- feeding ------------------------------------------------------------------------------
    def feed(self, channel: int, data: Piece) -> Piece:
        """Take a chunk of ``channel``; returns its bytes as an untagged run would show them
        (possibly held back in part until the next chunk: a marker or tag cut in two)."""
        plain = self.feed_pieces(channel, data)
        return plain[0] if len(plain) == 1 else b"".join(plain)

    def feed_pieces(self, channel: int, data: Piece) -> list[Piece]:
        """:meth:`feed`, its bytes in pieces (not joined: a rank's pieces are the same)."""
        st = self._streams[channel]
        raw = data if isinstance(data, bytes) else bytes(data)
        if st.run is None and not st.held and b"\x1e" not in raw:
            return [data]  # the usual case: no marker in sight
        buf = st.held + raw if st.held else raw
        st.held = b""
        self._plain = []
        self._parse(st, buf)
        self._flush()
        plain, self._plain = self._plain, []
        return plain

    def close(self) -> dict[int, bytes]:
        """The streams ended: what was held back is output (returned per channel), a run not
        ended ends now (without an exit code when no end marker came)."""
        rest = {}
        for channel, st in self._streams.items():
            self._plain = []
            held, st.held = st.held, b""
            if held and st.run is not None:
                self._text(st, held)
            elif held:
                self._plain.append(held)
            self._end_line(st)
            self._flush()
            st.run = None
            rest[channel] = b"".join(self._plain)
            self._plain = []
        for run in list(self._runs.values()):
            self._finish_run(run)
        self._runs = {}
        return rest

    # -- the walk -----------------------------------------------------------------------------
    def _parse(self, st: StateT, buf: bytes) -> None:
        pos, n = 0, len(buf)
        while pos < n:
            if st.run is None:
                at = buf.find(self.marker, pos)
                if at < 0:
                    keep = self._cut_marker(buf, pos)
                    if keep > pos:
                        self._plain.append(buf[pos:keep])
                    st.held = buf[keep:]
                    return
                if at > pos:
                    self._plain.append(buf[pos:at])
                pos = self._marker(st, buf, at)
            else:
                pos = self._parse_run(st, buf, pos)
            if pos < 0:
                return

    def _cut_marker(self, buf: bytes, pos: int) -> int:
        """Where a marker cut at the end of ``buf`` starts (``len(buf)``: none)."""
        at = buf.rfind(b"\x1e", max(pos, len(buf) - len(self.marker)))
        return at if at >= 0 and self.marker.startswith(buf[at:]) else len(buf)

    def _marker(self, st: StateT, buf: bytes, at: int) -> int:
        """The marker line at ``at``; returns where parsing goes on (-1: cut off, held)."""
        end = buf.find(b"\n", at)
        if end < 0:
            if len(buf) - at > MAX_MARKER:  # no marker is that long: it was output
                self._plain.append(buf[at:])
            else:
                st.held = buf[at:]
            return -1
        self._marker_words(st, buf[at + self.words_at : end].decode("ascii", "replace").split())
        return end + 1

    # -- runs ---------------------------------------------------------------------------------
    def _add_run(self, run: RunT) -> RunT:
        """A run begins."""
        self._runs[run.index] = run
        self._run_launcher[run.index] = []
        self.output.runs.append(run)
        if self.on_event is not None:
            self.on_event(RankEvent("begin", run))
        return run

    def _run_ended(self, st: StateT, index: str, code: str) -> None:
        """An end marker on ``st``: the run ends once both streams said so."""
        st.run = None
        run = self._runs.get(int_word(index) or 0)
        if run is None:
            return
        run.returncode = int_word(code)
        ended = self._ended.setdefault(run.index, set())
        ended.add(st.channel)
        if len(ended) == len(self._streams):
            self._finish_run(run)  # both streams said it ended: its report is whole

    def _finish_run(self, run: RunT) -> None:
        """The run is over: the failed rank from the launcher's report."""
        if self._runs.pop(run.index, None) is None:
            return
        if run.returncode not in (0, None):
            run.failure = self._failure(run, "".join(self._run_launcher.get(run.index, [])))
        if self.on_event is not None:
            self.on_event(RankEvent("end", run))

    # -- the ranks' and the launcher's text ---------------------------------------------------
    def _to_rank(self, run: RunT, key: RankKey, channel: int, piece: bytes) -> None:
        """A piece of a rank's stream, handed on at the chunk's end (:meth:`_flush`)."""
        slot = self._pending.get((key, channel))
        if slot is None:
            self._pending[(key, channel)] = (run, [piece])
        else:
            slot[1].append(piece)

    def _flush(self) -> None:
        """Hand each rank stream's pieces of this chunk to its output and the view."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for (key, channel), (run, pieces) in pending.items():
            host, data = self._take(key, channel, pieces)
            if self.on_event is None:
                continue
            decoder = self._decoders.get((key, channel))
            if decoder is None:
                decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
                self._decoders[(key, channel)] = decoder
            text = decoder.decode(data)
            if text:
                stream = "stdout" if channel == STDOUT else "stderr"
                self.on_event(
                    RankEvent("output", run, rank=key[1], host=host, stream=stream, text=text)
                )
        if self.limit is not None and self._memory > self.limit:
            self._spill()

    def _spill(self) -> None:
        """Over the budget: the largest in-memory rank streams go to spill files."""
        largest = self._largest_first()
        spill_dir = self.spill_dir or default_spill_dir()
        for key, channel in largest:
            if self.limit is None or self._memory <= self.limit // 2:
                break
            name = "stdout" if channel == STDOUT else "stderr"
            prefix = f"{self.label}-{self.spill_name}{key[1]}-{name}-"
            self._memory -= self._spill_stream(key, channel, spill_dir, prefix)
        release_freed_memory()

    def _launcher_event(self, st: StateT, data: bytes) -> None:
        """Launcher text inside a run, to the view."""
        if st.run is not None and self.on_event is not None:
            stream = "stdout" if st.channel == STDOUT else "stderr"
            text = data.decode("utf-8", "replace")
            self.on_event(RankEvent("launcher", st.run, stream=stream, text=text))

    def _keep_launcher(self, st: StateT, text: str, size: int) -> None:
        """A whole launcher line (``size``: what it counts against the bound): kept for the
        result and for its run's report."""
        stream = "stdout" if st.channel == STDOUT else "stderr"
        if self._launcher_kept < LAUNCHER_KEEP:
            self._launcher_kept += size
            self.output.launcher_lines.append((stream, text.rstrip("\n")))
        else:
            self.output.launcher_dropped += size
        if st.run is not None:
            kept = self._run_launcher.setdefault(st.run.index, [])
            if sum(map(len, kept)) < LAUNCHER_KEEP:
                kept.append(text)

    # -- the launcher's own -------------------------------------------------------------------
    @abstractmethod
    def _parse_run(self, st: StateT, buf: bytes, pos: int) -> int:
        """Inside a run: up to a marker; returns where parsing goes on after it (-1: the chunk
        ended, its cut end held)."""

    @abstractmethod
    def _marker_words(self, st: StateT, words: list[str]) -> None:
        """A whole marker line's words (``begin``/``end`` and what follows)."""

    @abstractmethod
    def _text(self, st: StateT, data: bytes) -> None:
        """Text of the current owner up to its newline; a line that starts untagged is the
        launcher's."""

    @abstractmethod
    def _end_line(self, st: StateT) -> None:
        """The launcher line collected is over."""

    @abstractmethod
    def _failure(self, run: RunT, report: str) -> RankFailure:
        """The failed rank of a run that failed, from its launcher lines ``report``."""

    @abstractmethod
    def _take(self, key: RankKey, channel: int, pieces: list[bytes]) -> tuple[str, bytes]:
        """Add a chunk's pieces to a rank's stream (counting :attr:`_memory`); returns the rank's
        host and the bytes the view gets."""

    @abstractmethod
    def _largest_first(self) -> list[tuple[RankKey, int]]:
        """The rank streams in memory, largest first: ``(key, channel)``."""

    @abstractmethod
    def _spill_stream(self, key: RankKey, channel: int, spill_dir: SpillDir, prefix: str) -> int:
        """Move a rank stream to a spill file; returns the bytes of memory given up."""


def int_word(text: str) -> int | None:
    """A marker's number word as an int; None when it is not one (``-``)."""
    return int(text) if text.isdigit() else None


__all__ = [
    "LAUNCHER",
    "LAUNCHER_KEEP",
    "MAX_MARKER",
    "ChannelState",
    "MarkerDemux",
    "Piece",
    "RankKey",
    "int_word",
]
