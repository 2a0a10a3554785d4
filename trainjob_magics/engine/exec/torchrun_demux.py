"""Per-rank output of a tagged ``torchrun``, read from the exec's streams.

:class:`TorchDemux` takes each stdout/stderr chunk before mpirun's :class:`~.ranks.RankDemux`
does (:class:`LaunchersDemux` chains them, for :class:`~.ranks.RankedStreams`). Outside a
torchrun run it hands every byte on as it came. Between the prelude's ``tbegin`` and ``tend``
markers (:mod:`.torchrun_prelude`) it removes the markers and the tags torchrun's ``--tee``
wrote (:mod:`.torchrun_runs`), hands on the bytes torchrun without ``--tee`` would have printed,
and keeps each rank's own stdout and stderr (the channel the tag came on) and torchrun's own
lines (its log lines, warnings, the failure report) as the launcher's, all in the command's
:class:`~.ranks.MpiOutput` beside any mpirun's.

How torch writes (torch/distributed/elastic/multiprocessing/tail_log.py, ``tail_logfile``):
one thread per worker file, each ``readline()`` written as one ``tag + line`` to the agent's
stdout or stderr; a line the worker has not ended yet is written as far as it goes, and its rest
later with a tag again. So a tag starts each write, whole lines stay whole, and a tag may follow
a cut line on the same stream: a tag is looked for anywhere, and text after a tag belongs to its
rank up to the newline; a line that starts untagged is torchrun's. As with mpirun, a worker's cut
line followed on the same stream by a line of torchrun's own is the one case the stream cannot
tell apart.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .output import SpillDir, default_spill_dir, release_freed_memory
from .ranks import (
    LAUNCHER,
    LAUNCHER_KEEP,
    MAX_MARKER,
    STDERR,
    STDOUT,
    MpiOutput,
    OnRankEvent,
    RankDemux,
    RankEvent,
)
from .torchrun_report import parse_report
from .torchrun_runs import TEMPLATE, TorchRankOutput, TorchRun, torch_run

MAX_TAG = 256  # a tag is shorter (a role name and a number, or two numbers)

Piece = bytes | memoryview


@dataclass
class _Stream:
    """One channel's parse state."""

    channel: int
    held: bytes = b""  # the chunk's end: maybe a marker or a tag cut there
    run: TorchRun | None = None
    owner: tuple[str, int] | int | None = None  # a rank's key, LAUNCHER, or None: line start
    line: bytearray = field(default_factory=bytearray)  # the launcher line being collected
    tags: dict[bytes, tuple[str, int]] = field(default_factory=dict)  # tag -> rank key


class TorchDemux:
    """The torchrun runs of one exec's streams (see the module's docstring); the ranks go to
    ``output`` (shared with mpirun's :class:`~.ranks.RankDemux`), ``on_event`` gets
    :class:`~.ranks.RankEvent` objects as for mpirun."""

    def __init__(
        self,
        token: str,
        output: MpiOutput,
        *,
        pod: str = "",
        limit: int | None = None,
        spill_dir: SpillDir | None = None,
        on_event: OnRankEvent | None = None,
        label: str = "exec",
    ) -> None:
        self.marker = b"\x1e" + token.encode() + b" t"
        self.output = output
        self.pod = pod
        self.limit = limit
        self.spill_dir = spill_dir
        self.on_event = on_event
        self.label = label
        self._streams = {STDOUT: _Stream(STDOUT), STDERR: _Stream(STDERR)}
        self._runs: dict[int, TorchRun] = {}
        self._ended: dict[int, set[int]] = {}
        self._report: dict[int, list[str]] = {}  # run -> its launcher lines (for the report)
        self._patterns: dict[int, re.Pattern[bytes]] = {}
        self._record_patterns: dict[int, tuple[re.Pattern[bytes], re.Pattern[bytes]]] = {}
        self._lines_of: dict[bytes, re.Pattern[bytes]] = {}  # tag -> its lines' regex
        self._ranks: dict[tuple[str, int], TorchRankOutput] = {}
        self._pending: dict[tuple[tuple[str, int], int], tuple[TorchRun, list[bytes]]] = {}
        self._plain: list[Piece] = []
        self._memory = 0
        self._kept = 0
        self._decoders: dict[tuple[tuple[str, int], int], Any] = {}

    def inside(self, channel: int) -> bool:
        """The channel is inside a torchrun run."""
        return self._streams[channel].run is not None

    # -- feeding ------------------------------------------------------------------------------
    def feed_pieces(self, channel: int, data: Piece) -> list[Piece]:
        """Take a chunk of ``channel``; returns its bytes as torchrun without ``--tee`` would
        have shown them (a marker or tag cut at its end held back until the next chunk)."""
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
        """The streams ended: what was held back is output, a run not ended ends now."""
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
            self._finish(run)
        return rest

    # -- parsing ------------------------------------------------------------------------------
    def _parse(self, st: _Stream, buf: bytes) -> None:
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

    def _parse_run(self, st: _Stream, buf: bytes, pos: int) -> int:
        """Inside a run: tags, the text after each, torchrun's lines, up to a marker; returns
        where parsing goes on after the marker (-1: the chunk ended)."""
        run = st.run
        assert run is not None
        pattern = self._pattern(run)
        records, _ = self._records_patterns(run)
        tags = st.tags
        n = len(buf)
        while pos < n:
            if st.owner is None:  # at a line's start: the whole tagged lines there, at once
                whole = records.match(buf, pos)
                if whole is not None:
                    self._records(st, run, buf[pos : whole.end()])
                    pos = whole.end()
                    continue
            m = pattern.search(buf, pos)
            start = m.start() if m is not None else self._cut_tag(st, buf, pos)
            if start > pos:
                self._text(st, buf[pos:start])
            if m is None:
                st.held = buf[start:]
                return -1
            if m.lastgroup == "marker":
                return self._marker(st, buf, start)
            if st.owner is None:  # the tag starts a line: it and the whole lines after it
                whole = records.match(buf, start)
                if whole is not None:
                    self._records(st, run, buf[start : whole.end()])
                    pos = whole.end()
                    continue
            self._end_line(st)  # a line of torchrun's cut by a tag: kept as it came
            tag = m.group()
            key = tags.get(tag)
            if key is None:
                key = tags[tag] = self._new_rank(run, m)
            st.owner = key
            pos = m.end()
        return pos

    def _records_patterns(self, run: TorchRun) -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
        """(a run of whole tagged lines, a tag) of the run's form."""
        patterns = self._record_patterns.get(run.index)
        if patterns is None:
            whole, tag, _line = run.records()
            patterns = self._record_patterns[run.index] = (re.compile(whole), re.compile(tag))
        return patterns

    def _records(self, st: _Stream, run: TorchRun, lines: bytes) -> None:
        """Whole tagged lines (most of a big output), in C loops: the tags there (one scan),
        each tag's lines joined (one scan per rank), the untagged text (one substitution)."""
        _, tag_re = self._records_patterns(run)
        found = set(tag_re.findall(lines))
        for tag in found:
            one = self._lines_of.get(tag)
            if one is None:
                _, _, line = run.records()
                one = self._lines_of[tag] = re.compile(re.escape(tag) + line)
            text = b"".join(one.findall(lines))
            if len(found) == 1:
                self._plain.append(text)
            key = st.tags.get(tag)
            if key is None:
                m = self._pattern(run).match(tag)
                assert m is not None
                key = st.tags[tag] = self._new_rank(run, m)
            slot = self._pending.get((key, st.channel))
            if slot is None:
                self._pending[(key, st.channel)] = (run, [text])
            else:
                slot[1].append(text)
        if len(found) > 1:
            self._plain.append(tag_re.sub(b"", lines))

    def _pattern(self, run: TorchRun) -> re.Pattern[bytes]:
        pattern = self._patterns.get(run.index)
        if pattern is None:
            marker = re.escape(self.marker)
            pattern = re.compile(run.pattern() + b"|(?P<marker>" + marker + b")")
            self._patterns[run.index] = pattern
        return pattern

    def _cut_marker(self, buf: bytes, pos: int) -> int:
        """Where a marker cut at the end of ``buf`` starts (``len(buf)``: none)."""
        at = buf.rfind(b"\x1e", max(pos, len(buf) - len(self.marker)))
        return at if at >= 0 and self.marker.startswith(buf[at:]) else len(buf)

    def _cut_tag(self, st: _Stream, buf: bytes, pos: int) -> int:
        """Where a tag or marker cut at the end of ``buf`` starts (``len(buf)``: none)."""
        assert st.run is not None
        n = len(buf)
        low = max(pos, n - MAX_TAG, buf.rfind(b"\n", pos) + 1)  # neither holds a newline
        at = n
        for char in (b"\x1e", b"["):
            i = buf.rfind(char, low)
            while i >= 0:
                tail = buf[i:]
                if self.marker.startswith(tail) or st.run.is_tag_prefix(tail):
                    at = min(at, i)
                i = buf.rfind(char, low, i)
        return at

    def _marker(self, st: _Stream, buf: bytes, at: int) -> int:
        """The marker line at ``at``; returns where parsing goes on (-1: cut off, held)."""
        end = buf.find(b"\n", at)
        if end < 0:
            if len(buf) - at > MAX_MARKER:  # no marker is that long: it was output
                self._plain.append(buf[at:])
            else:
                st.held = buf[at:]
            return -1
        words = buf[at + len(self.marker) - 1 : end].decode("ascii", "replace").split()
        self._end_line(st)
        self._flush()
        st.owner, st.tags = None, {}
        if words[:1] == ["tbegin"]:
            st.run = self._begin(words[1:])
        elif words[:1] == ["tend"] and len(words) >= 3:
            st.run = None
            run = self._runs.get(_int(words[1]) or 0)
            if run is not None:
                run.returncode = _int(words[2])
                ended = self._ended.setdefault(run.index, set())
                ended.add(st.channel)
                if len(ended) == len(self._streams):
                    self._finish(run)  # both streams said it ended: its report is whole
        return end + 1

    def _begin(self, words: list[str]) -> TorchRun:
        index = _int(words[0]) if words else None
        run = self._runs.get(index or 0)
        if run is None:
            run = torch_run(words, pod=self.pod)
            self._runs[run.index] = run
            self._report[run.index] = []
            self.output.runs.append(run)
            if self.on_event is not None:
                self.on_event(RankEvent("begin", run))
        return run

    def _new_rank(self, run: TorchRun, m: re.Match[bytes]) -> tuple[str, int]:
        """The rank a tag first seen names (its output made on first sight)."""
        local = int(m.group("local"))
        rank = run.rank_of(m.group("rank") if run.form == TEMPLATE else None, local)
        key = ("", rank)
        if key not in self.output.ranks:
            out = TorchRankOutput(rank, local, host=run.host, pod=self.pod)
            self.output.ranks[key] = self._ranks[key] = out
        if rank not in run.ranks:
            run.ranks.append(rank)
        return key

    def _text(self, st: _Stream, data: bytes) -> None:
        """Text of the current owner up to its newline; a line that starts untagged is
        torchrun's."""
        while data:
            if st.owner is None:
                st.owner = LAUNCHER
            nl = data.find(b"\n")
            piece = data if nl < 0 else data[: nl + 1]
            data = b"" if nl < 0 else data[nl + 1 :]
            self._plain.append(piece)
            if st.owner == LAUNCHER:
                self._launcher(st, piece)
            else:
                assert isinstance(st.owner, tuple) and st.run is not None
                slot = self._pending.get((st.owner, st.channel))
                if slot is None:
                    self._pending[(st.owner, st.channel)] = (st.run, [piece])
                else:
                    slot[1].append(piece)
            if nl >= 0:
                st.owner = None

    def _launcher(self, st: _Stream, piece: bytes) -> None:
        """A piece of a line of torchrun's: shown at once, kept whole once it ends."""
        st.line += piece
        if st.run is not None and self.on_event is not None:
            stream = "stdout" if st.channel == STDOUT else "stderr"
            text = piece.decode("utf-8", "replace")
            self.on_event(RankEvent("launcher", st.run, stream=stream, text=text))
        if piece.endswith(b"\n"):
            self._end_line(st)

    def _end_line(self, st: _Stream) -> None:
        if not st.line:
            return
        text = bytes(st.line).decode("utf-8", "replace")
        st.line.clear()
        stream = "stdout" if st.channel == STDOUT else "stderr"
        if self._kept < LAUNCHER_KEEP:
            self._kept += len(text)
            self.output.launcher_lines.append((stream, text.rstrip("\n")))
        else:
            self.output.launcher_dropped += len(text)
        if st.run is not None:
            kept = self._report.setdefault(st.run.index, [])
            if sum(map(len, kept)) < LAUNCHER_KEEP:
                kept.append(text)

    def _flush(self) -> None:
        """Hand each rank stream's pieces of this chunk to its output and the view."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for (key, channel), (run, pieces) in pending.items():
            out = self._ranks[key]
            data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            if out.take(channel, data):
                self._memory += len(data)
            if self.on_event is not None:
                decoder = self._decoders.get((key, channel))
                if decoder is None:
                    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
                    self._decoders[(key, channel)] = decoder
                text = decoder.decode(data)
                if text:
                    stream = "stdout" if channel == STDOUT else "stderr"
                    event = RankEvent(
                        "output", run, rank=key[1], host=out.host, stream=stream, text=text
                    )
                    self.on_event(event)
        if self.limit is not None and self._memory > self.limit:
            self._spill()

    def _spill(self) -> None:
        """Over the budget: the largest in-memory streams go to spill files."""
        assert self.limit is not None
        streams = sorted(
            ((size, key, ch) for key, out in self._ranks.items() for ch, size in out.in_memory()),
            reverse=True,
        )
        spill_dir = self.spill_dir or default_spill_dir()
        for _size, key, ch in streams:
            if self._memory <= self.limit // 2:
                break
            name = "stdout" if ch == STDOUT else "stderr"
            prefix = f"{self.label}-torchrank{key[1]}-{name}-"
            self._memory -= self._ranks[key].spill(ch, spill_dir, prefix)
        release_freed_memory()

    def _finish(self, run: TorchRun) -> None:
        """The run is over: its failed rank from torchrun's report."""
        if self._runs.pop(run.index, None) is None:
            return
        if run.returncode not in (0, None):
            failure = parse_report("".join(self._report.get(run.index, [])), run)
            failure.returncode, failure.pod = run.returncode, run.pod
            if failure.global_rank is None and failure.local_rank is not None:
                failure.rank = next(
                    (r for (_, r), o in self._ranks.items() if o.local_rank == failure.local_rank),
                    failure.rank,
                )
            out = self.output.ranks.get(("", failure.rank)) if failure.rank is not None else None
            if out is not None:
                failure.last_lines = out.last_lines()
                failure.host = out.host or failure.host
            run.failure = failure
        if self.on_event is not None:
            self.on_event(RankEvent("end", run))


class LaunchersDemux:
    """A :class:`~.ranks.RankDemux` behind a :class:`TorchDemux`, as
    :class:`~.ranks.RankedStreams` uses one (``feed_pieces``, ``close``, ``result``,
    ``output``, ``_streams[channel].run``): torchrun's runs are taken out first, mpirun's
    after, into one :class:`~.ranks.MpiOutput`."""

    def __init__(self, ranks: RankDemux, token: str, pod: str = "") -> None:
        self.ranks = ranks
        self.torch = TorchDemux(
            token,
            ranks.output,
            pod=pod,
            limit=ranks.limit,
            spill_dir=ranks.spill_dir,
            on_event=ranks.on_event,
            label=ranks.label,
        )
        self._streams = {ch: _Inside(self, ch) for ch in (STDOUT, STDERR)}

    @property
    def output(self) -> MpiOutput:
        return self.ranks.output

    def feed_pieces(self, channel: int, data: Piece) -> list[Piece]:
        if not isinstance(data, bytes):  # copied once here, not by each demux
            data = bytes(data)
        pieces = self.torch.feed_pieces(channel, data)
        if len(pieces) == 1:
            return self.ranks.feed_pieces(channel, pieces[0])
        return [p for piece in pieces if piece for p in self.ranks.feed_pieces(channel, piece)]

    def feed(self, channel: int, data: Piece) -> bytes:
        return b"".join(bytes(p) for p in self.feed_pieces(channel, data))

    def close(self) -> dict[int, bytes]:
        rest = self.torch.close()
        passed = {ch: self.feed(ch, data) if data else b"" for ch, data in rest.items()}
        last = self.ranks.close()
        return {ch: passed.get(ch, b"") + last.get(ch, b"") for ch in (STDOUT, STDERR)}

    def result(self) -> MpiOutput:
        return self.ranks.result()


class _Inside:
    """What :class:`~.ranks.RankedStreams` reads of a channel: the run it is inside of."""

    def __init__(self, demux: LaunchersDemux, channel: int) -> None:
        self.demux = demux
        self.channel = channel

    @property
    def run(self) -> Any:
        ch = self.channel
        return self.demux.torch._streams[ch].run or self.demux.ranks._streams[ch].run


def chain(token: str, pod: str = "") -> Callable[[RankDemux], LaunchersDemux]:
    """What :class:`~.ranks.RankedStreams` calls (``chain=``) to take torchrun's runs out of
    the streams before its :class:`~.ranks.RankDemux` reads mpirun's."""
    return lambda ranks: LaunchersDemux(ranks, token, pod)


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


__all__ = ["LaunchersDemux", "TorchDemux", "chain"]
