"""Per-rank output of a tagged ``torchrun``, read from the exec's streams.

:class:`TorchDemux` takes each stdout/stderr chunk before mpirun's :class:`~.ranks_demux.RankDemux`
does (:class:`LaunchersDemux` chains them, for :class:`~.ranks_streams.RankedStreams`). Outside a
torchrun run it hands every byte on as it came. Between the prelude's ``tbegin`` and ``tend``
markers (:mod:`.torchrun_prelude`) it removes the markers and the tags torchrun's ``--tee``
wrote (:mod:`.torchrun_runs`), hands on the bytes torchrun without ``--tee`` would have printed,
and keeps each rank's own stdout and stderr (the channel the tag came on) and torchrun's own
lines (its log lines, warnings, the failure report) as the launcher's, all in the command's
:class:`~.ranks_model.MpiOutput` beside any mpirun's.

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

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .marker_demux import LAUNCHER, ChannelState, MarkerDemux, Piece, RankKey, int_word
from .output import SpillDir
from .ranks_demux import RankDemux
from .ranks_model import STDERR, STDOUT, MpiOutput, OnRankEvent
from .torchrun_report import TorchFailure, parse_report
from .torchrun_runs import TEMPLATE, TorchRankOutput, TorchRun, torch_run

MAX_TAG = 256  # a tag is shorter (a role name and a number, or two numbers)


@dataclass
class _Stream(ChannelState[TorchRun]):
    """One channel's parse state."""

    tags: dict[bytes, RankKey] = field(default_factory=dict)  # tag -> rank key


class TorchDemux(MarkerDemux[TorchRun, _Stream]):
    """The torchrun runs of one exec's streams (see the module's docstring); the ranks go to
    ``output`` (shared with mpirun's :class:`~.ranks_demux.RankDemux`), ``on_event`` gets
    :class:`~.ranks_model.RankEvent` objects as for mpirun."""

    spill_name = "torchrank"

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
        marker = b"\x1e" + token.encode() + b" t"
        super().__init__(
            marker,
            len(marker) - 1,
            output,
            _Stream,
            limit=limit,
            spill_dir=spill_dir,
            on_event=on_event,
            label=label,
        )
        self.pod = pod
        self._patterns: dict[int, re.Pattern[bytes]] = {}
        self._record_patterns: dict[int, tuple[re.Pattern[bytes], re.Pattern[bytes]]] = {}
        self._lines_of: dict[bytes, re.Pattern[bytes]] = {}  # tag -> its lines' regex
        self._ranks: dict[RankKey, TorchRankOutput] = {}

    def inside(self, channel: int) -> bool:
        """The channel is inside a torchrun run."""
        return self._streams[channel].run is not None

    # -- parsing ------------------------------------------------------------------------------
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
            self._to_rank(run, key, st.channel, text)
        if len(found) > 1:
            self._plain.append(tag_re.sub(b"", lines))

    def _pattern(self, run: TorchRun) -> re.Pattern[bytes]:
        pattern = self._patterns.get(run.index)
        if pattern is None:
            marker = re.escape(self.marker)
            pattern = re.compile(run.pattern() + b"|(?P<marker>" + marker + b")")
            self._patterns[run.index] = pattern
        return pattern

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

    def _marker_words(self, st: _Stream, words: list[str]) -> None:
        self._end_line(st)
        self._flush()
        st.owner, st.tags = None, {}
        if words[:1] == ["tbegin"]:
            st.run = self._begin(words[1:])
        elif words[:1] == ["tend"] and len(words) >= 3:
            self._run_ended(st, words[1], words[2])

    def _begin(self, words: list[str]) -> TorchRun:
        index = int_word(words[0]) if words else None
        run = self._runs.get(index or 0)
        return run if run is not None else self._add_run(torch_run(words, pod=self.pod))

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
                self._to_rank(st.run, st.owner, st.channel, piece)
            if nl >= 0:
                st.owner = None

    def _launcher(self, st: _Stream, piece: bytes) -> None:
        """A piece of a line of torchrun's: shown at once, kept whole once it ends."""
        st.line += piece
        self._launcher_event(st, piece)
        if piece.endswith(b"\n"):
            self._end_line(st)

    def _end_line(self, st: _Stream) -> None:
        if not st.line:
            return
        text = bytes(st.line).decode("utf-8", "replace")
        st.line.clear()
        self._keep_launcher(st, text, len(text))

    def _take(self, key: RankKey, channel: int, pieces: list[bytes]) -> tuple[str, bytes]:
        out = self._ranks[key]
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if out.take(channel, data):
            self._memory += len(data)
        return out.host, data

    def _largest_first(self) -> list[tuple[RankKey, int]]:
        streams = sorted(
            ((size, key, ch) for key, out in self._ranks.items() for ch, size in out.in_memory()),
            reverse=True,
        )
        return [(key, ch) for _size, key, ch in streams]

    def _spill_stream(self, key: RankKey, channel: int, spill_dir: SpillDir, prefix: str) -> int:
        return self._ranks[key].spill(channel, spill_dir, prefix)

    def _failure(self, run: TorchRun, report: str) -> TorchFailure:
        """Its failed rank from torchrun's report."""
        failure = parse_report(report, run)
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
        return failure


class LaunchersDemux:
    """A :class:`~.ranks_demux.RankDemux` behind a :class:`TorchDemux`, as
    :class:`~.ranks_streams.RankedStreams` uses one (``feed_pieces``, ``close``, ``result``,
    ``output``, ``_streams[channel].run``): torchrun's runs are taken out first, mpirun's
    after, into one :class:`~.ranks_model.MpiOutput`."""

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
    """What :class:`~.ranks_streams.RankedStreams` reads of a channel: the run it is inside of."""

    def __init__(self, demux: LaunchersDemux, channel: int) -> None:
        self.demux = demux
        self.channel = channel

    @property
    def run(self) -> Any:
        ch = self.channel
        return self.demux.torch._streams[ch].run or self.demux.ranks._streams[ch].run


def chain(token: str, pod: str = "") -> Callable[[RankDemux], LaunchersDemux]:
    """What :class:`~.ranks_streams.RankedStreams` calls (``chain=``) to take torchrun's runs out of
    the streams before its :class:`~.ranks_demux.RankDemux` reads mpirun's."""
    return lambda ranks: LaunchersDemux(ranks, token, pod)


__all__ = ["LaunchersDemux", "TorchDemux", "chain"]
