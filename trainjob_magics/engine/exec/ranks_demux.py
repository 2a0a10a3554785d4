"""Per-rank output of ``mpirun``/``mpiexec``, read from an exec's streams: the launcher's own
tagging, undone.

Between the prelude's marker lines (:mod:`.ranks_prelude`) :class:`RankDemux` removes the markers
and the tags (and the job map it asked for), and hands on the bytes an untagged ``mpirun`` would
have printed, so ``ExecResult.stdout``/``stderr`` stay what the program printed. Beside them it
keeps each rank's own stdout and stderr (:class:`~.ranks_model.RankOutput`, exactly the bytes
that rank printed), and the lines no rank printed: the launcher's (ssh's "Permanently added"
warnings, mpirun's own messages). Tags are recognised by their form and channel
(:mod:`.ranks_tags`), never guessed from the text: Open MPI and Hydra tag each chunk they forward
(a line longer than 4 KiB gets a tag in its middle; a partial line gets one, and its end
another), so a tag is looked for anywhere, and text belongs to the rank of the tag before it up
to its newline. A rank's partial line that the launcher's own text follows on the same stream is
the one case the streams cannot tell apart.

Memory: every rank's output together keeps at most ``limit`` bytes in memory (the output
view's bound, ``max_memory_output``); past it a rank's buffer goes to a spill file
(:mod:`.output`), as an exec's streams do. A run of a rank's lines is one bytes object in both
the untagged stream's buffer and the rank's (each counts it against its own bound).

Speed: the parser reads a run of one rank's lines (a chunk the launcher tagged line by line)
with one regex search (the first newline the tag does not follow) and one substitution, not
line by line (:meth:`RankDemux._parse_run`); what is left per line is C code. 64 MB through 4
ranks in lines of 100 bytes take ~0.2 s of CPU here beyond what the untagged output costs (tag
by tag: ~2.5 s); ``benchmarks/bench_ranks.py`` measures it against the same ``mpirun``
untagged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from .marker_demux import LAUNCHER, ChannelState, MarkerDemux, RankKey, int_word
from .output import SpillDir
from .ranks_model import (
    OPENMPI4,
    STDERR,
    STDOUT,
    TAIL_BYTES,
    MpiOutput,
    MpiRun,
    OnRankEvent,
    RankFailure,
    RankOutput,
)
from .ranks_report import parse_failure
from .ranks_tags import (
    MAP_LINE,
    MAP_STARTS,
    MAX_TAG,
    TAG_PREFIXES,
    TAG_START,
    TAG_STARTS,
    TAGS,
    map_start,
)

SHARED_PIECE = 1024  # a rank's pieces of a chunk this long on average are kept as they are


@dataclass
class _Stream(ChannelState[MpiRun]):
    """One exec channel's parse state (and the launcher's lines: mpirun's)."""

    rank_stream: int = STDOUT  # the stream named by the owner's tag
    shown: int = 0  # bytes of ``line`` already handed on (no job map to look for in it)
    # an orted's job map written into the middle of a rank's chunk (a chunk is longer than
    # PIPE_BUF, so other writers' writes can land in it): the rank whose chunk goes on after
    # the map's write, whether that write was the map block (else its one first line), and
    # whether it ended
    resume: tuple[str, int] | None = None
    resume_block: bool = False
    resume_ready: bool = False
    # the run's tags seen on this stream (what a tag's first sight sets up is done once)
    tags: dict[bytes, _Tag] = field(default_factory=dict)
    watch: tuple[bytes, ...] = ()  # bytes a run of lines is looked at more closely for


class _Tag(NamedTuple):
    """One tag's meaning on a stream: its rank, the stream it names, and how a run of its lines
    is read in one go: ``lines`` matches whole lines each followed by the tag again, ``strip``
    is the newline and tag between two of them, ``stop`` finds the first newline the tag does
    not follow (where ``lines`` stops: a search is about a fifth faster than that match)."""

    key: tuple[str, int]
    stream: int
    pending: tuple[tuple[str, int], int]  # (key, stream): where its text waits for the flush
    size: int
    lines: re.Pattern[bytes]
    strip: re.Pattern[bytes]
    stop: re.Pattern[bytes]


class RankDemux(MarkerDemux[MpiRun, _Stream]):
    """Reads an exec's stdout and stderr as they arrive (:meth:`feed`), returns what an
    untagged launcher would have printed, and keeps the per-rank output (:attr:`output`).

    ``limit``: bytes of rank output kept in memory, all ranks together (None: no bound).
    ``on_event`` gets :class:`~.ranks_model.RankEvent` objects (decoded text, one per rank and
    stream per chunk) while the command runs.
    """

    def __init__(
        self,
        token: str,
        *,
        limit: int | None = None,
        spill_dir: SpillDir | None = None,
        on_event: OnRankEvent | None = None,
        label: str = "exec",
    ) -> None:
        self.token = token.encode()
        marker = b"\x1e" + self.token + b" "
        super().__init__(
            marker,
            len(marker),
            MpiOutput(),
            _Stream,
            limit=limit,
            spill_dir=spill_dir,
            on_event=on_event,
            label=label,
        )
        self._patterns: dict[str, re.Pattern[bytes]] = {}
        self._line_patterns: dict[bytes, tuple[re.Pattern[bytes], ...]] = {}

    # -- the state machine ---------------------------------------------------------------------
    def _parse_run(self, st: _Stream, buf: bytes, pos: int) -> int:
        """Inside a tagged run: tags and the text after each, up to a marker; returns where
        parsing goes on after the marker (-1: the chunk ended, its cut end held).

        Most of a big output is runs of whole lines of one rank, each line with the same tag
        (the launcher tags each line of a chunk it read from that rank, 4 KiB in Open MPI):
        after a tag, the run of lines that follows it is taken at once, not tag by tag: one
        search of the tag's ``stop`` pattern finds its end, as the tag's ``lines`` pattern would
        (and the line the chunk ends with, cut by the next tag), one substitution drops its
        tags (from a view of the chunk: no slice copied first), and the run's text goes as one piece
        to the untagged output and the rank's (the same bytes object). Its text is looked at
        closer (:meth:`_lines`) only when it holds a byte a tag, marker or job map starts with.
        The text between runs is usually the end of a rank's line, handed on here; anything
        else goes through :meth:`_text`. A tag seen before on this stream in this run costs a
        dict lookup (:class:`_Tag`), its first sight :meth:`_tag`."""
        run = st.run
        assert run is not None
        pattern = self._pattern(run.impl)
        map_head = MAP_STARTS[0] if run.map_added else None
        marker = self.marker
        plain = self._plain
        pending = self._pending
        tags = st.tags
        watch, watch2 = st.watch[0], st.watch[-1]
        n = len(buf)
        view = memoryview(buf)
        after: re.Match[bytes] | None = None  # the tag right after the last run taken
        while pos < n:
            m = after if after is not None else pattern.search(buf, pos)
            after = None
            # the text up to the next tag, else up to the end (less a tag or marker cut there)
            start = m.start() if m is not None else self._cut_tag(st, buf, pos)
            if start > pos:
                text = buf[pos:start]
                nl = text.find(b"\n")
                # the end of a rank's line (or all of it, cut by the next tag); with at most its
                # newline at its end, a job map can only start in it so (map_start)
                if (
                    st.owner.__class__ is tuple
                    and (nl < 0 or nl == len(text) - 1)
                    and not (map_head is not None and map_head in text)
                ):
                    plain.append(text)
                    key = (st.owner, st.rank_stream)
                    pieces = pending.get(key)
                    if pieces is None:
                        pending[key] = (run, [text])
                    else:
                        pieces[1].append(text)
                    if nl >= 0:
                        st.owner = None
                else:
                    self._text(st, text)
            if m is None:
                st.held = buf[start:]
                return -1
            tag = m.group()
            if m.lastgroup == "marker" or tag == marker:
                return self._marker(st, buf, start)
            info = tags.get(tag)
            if info is None or st.line:
                pos = self._tag(st, buf, m)
                continue
            # _tag's work for a tag seen before (its first sight set up the rank)
            st.resume, st.resume_ready = None, False
            st.owner, st.rank_stream = info.key, info.stream
            pos = m.end()
            # its whole lines (up to ``end``: what ``info.lines`` matches, found faster), then a
            # line cut by the next tag (up to ``cut``): the rank's too
            found = info.stop.search(buf, pos)
            stop = n if found is None else found.start()
            last = buf.rfind(b"\n", pos, stop)  # the newline of its last whole line
            end = pos if last < 0 else last + 1 + info.size
            cut = buf.find(b"[", end, stop)
            cut = stop if cut < 0 else cut
            tag_start = buf.find(b"\x1e", end, cut)
            cut = cut if tag_start < 0 else tag_start
            if cut < n and buf[cut] in TAG_STARTS:
                after = pattern.match(buf, cut)
                if after is None or after.lastgroup == "marker":
                    after = None
                else:
                    end = cut
            if end > pos:
                text = info.strip.sub(b"\n", view[pos:end])  # bytes, not sliced first
                if watch in text or watch2 in text:
                    pos = self._lines(st, info, buf, pos, end, text)
                    after = None
                    continue
                plain.append(text)
                pieces = pending.get(info.pending)
                if pieces is None:
                    pending[info.pending] = (run, [text])
                else:
                    pieces[1].append(text)
                pos = end
        return pos

    def _pattern(self, impl: str) -> re.Pattern[bytes]:
        pattern = self._patterns.get(impl)
        if pattern is None:
            pattern = re.compile(TAGS[impl] + b"|(?P<marker>" + re.escape(self.marker) + b")")
            self._patterns[impl] = pattern
        return pattern

    def _cut_tag(self, st: _Stream, buf: bytes, pos: int) -> int:
        """Where a tag or marker cut at the end of ``buf`` would start (``len(buf)``: none)."""
        assert st.run is not None
        n = len(buf)
        low = max(pos, n - MAX_TAG)
        start = TAG_START[st.run.impl]
        prefix = TAG_PREFIXES[st.run.impl]
        at = n
        last_nl = buf.rfind(b"\n", low)
        for char in {start, b"\x1e"}:
            i = buf.rfind(char, max(low, last_nl + 1))  # no tag or marker holds a newline
            while i >= 0:
                tail = buf[i:]
                if (char == b"\x1e" and self.marker.startswith(tail)) or prefix.fullmatch(tail):
                    at = min(at, i)
                i = buf.rfind(char, max(low, last_nl + 1), i)
        if st.run.map_added and st.channel == STDOUT:  # a job map's start (map_start), cut
            for start in MAP_STARTS:  # or whole, its line not: the line comes whole
                # cut: in the last len(start) bytes; whole: no newline after it
                first = min(n - len(start), last_nl - len(start) + 1) if last_nl >= 0 else low
                i = buf.find(start[:1], max(low, first))
                while 0 <= i < at:
                    tail = buf[i:]
                    # not a lone newline or space: a line's end at a frame's end would wait
                    if (len(tail) > 1 and start.startswith(tail)) or (
                        tail.startswith(start) and b"\n" not in tail[len(start) :]
                    ):
                        at = i
                        break
                    i = buf.find(start[:1], i + 1)
        return at

    def _marker_words(self, st: _Stream, words: list[str]) -> None:
        if words[:1] == ["begin"] and len(words) >= 8:
            self._end_line(st)
            self._flush()
            st.run = self._begin(words)
            st.owner = None
            st.tags = {}
            watch = {TAG_START[st.run.impl], b"\x1e"} | ({b"["} if st.run.map_added else set())
            st.watch = tuple(sorted(watch))
        elif words[:1] == ["end"] and len(words) >= 3:
            self._end_line(st)
            self._flush()
            st.owner = None
            st.tags = {}
            self._run_ended(st, words[1], words[2])

    def _begin(self, words: list[str]) -> MpiRun:
        index = int_word(words[1]) or 0
        run = self._runs.get(index)
        if run is not None:
            return run
        _begin, _n, impl, map_added, np, hf, env, launcher, *hosts = words
        hostfile: dict[str, int] = {}
        for item in hosts:
            name, _eq, slots = item.partition("=")
            hostfile[name] = int_word(slots) or 1
        run = MpiRun(
            index=index,
            launcher=launcher,
            impl=impl if impl in TAGS else OPENMPI4,
            map_added=map_added == "1",
            np=int_word(np),
            hostfile_arg=hf == "1",
            env="" if env == "-" else env,
            hostfile=hostfile,
        )
        return self._add_run(run)

    def _tag(self, st: _Stream, buf: bytes, m: re.Match[bytes]) -> int:
        """The tag ``m`` in ``buf``: its rank owns what follows; returns where parsing goes on,
        past the run of whole lines of the same tag that follows it (:meth:`_lines`)."""
        self._end_line(st)  # a launcher line cut by a tag: what came of it
        st.resume, st.resume_ready = None, False  # a new chunk: nothing of an old one goes on
        tag = m.group()
        info = st.tags.get(tag)
        if info is None:
            info = st.tags[tag] = self._new_tag(st, m)
        st.owner, st.rank_stream = info.key, info.stream
        pos = m.end()
        lines = info.lines.match(buf, pos)
        end = lines.start(1) if lines else pos
        if end == pos:
            return pos
        return self._lines(st, info, buf, pos, end, info.strip.sub(b"\n", buf[pos:end]))

    def _new_tag(self, st: _Stream, m: re.Match[bytes]) -> _Tag:
        """A tag first seen on this stream in this run: its rank's output and host."""
        assert st.run is not None
        groups = m.groupdict()
        rank = int(groups["rank"] or 0)
        job = (groups.get("job") or b"").decode("ascii", "replace")
        key = (job, rank)
        out = self.output.ranks.get(key)
        if out is None:
            out = self.output.ranks[key] = RankOutput(rank, job=job)
        host = groups.get("host")
        if host is not None and not out.host:
            out.host = host.decode("utf-8", "replace")
        run = st.run
        if host is not None and rank not in run.hosts:
            run.hosts[rank] = out.host
        if not out.host and rank in run.hosts:
            out.host = run.hosts[rank]
        if rank not in run.ranks:
            run.ranks.append(rank)
        stream = groups.get("stream")
        channel = STDOUT if stream in (None, b"stdout") else STDERR
        if stream is None:  # Hydra's pattern names no stream: the channel it came on
            channel = st.channel
        tag = m.group()
        patterns = self._line_patterns.get(tag)
        if patterns is None:
            between = re.escape(b"\n" + tag)
            lines = b"(?:[^\n]*" + between + b")*([^\n\\[\x1e]*)"  # + a line cut, no tag in it
            stop = b"\n(?!" + re.escape(tag) + b")"
            patterns = (re.compile(lines), re.compile(between), re.compile(stop))
            self._line_patterns[tag] = patterns
        return _Tag(key, channel, (key, channel), len(tag), *patterns)

    def _lines(self, st: _Stream, info: _Tag, buf: bytes, pos: int, end: int, text: bytes) -> int:
        """``buf[pos:end]``: whole lines of the tag's rank, each followed by the same tag (and
        maybe a line cut by the next tag; ``text``: all that without the tags). They are the
        rank's, as the tags one by one would give them, up to the first line that holds a tag,
        a marker or a job map's start (looked for only when one of ``st.watch`` is in them: a
        tag is read anywhere); returns where parsing goes on (after the last tag taken)."""
        for char in st.watch:
            if char in text:
                cut = self._first_stop(st, text)
                if cut >= 0:
                    keep = text.rfind(b"\n", 0, cut) + 1  # the lines before it
                    if not keep:
                        return pos
                    end = pos + keep + text.count(b"\n", 0, keep) * info.size
                    text = text[:keep]
                break
        self._rank_text(st, text)
        return end

    def _first_stop(self, st: _Stream, text: bytes) -> int:
        """Where the first tag, marker or (when the map was asked for) job map start is in the
        lines ``text``; -1."""
        assert st.run is not None
        first = min(
            (i for i in map(text.find, (TAG_START[st.run.impl], b"\x1e")) if i >= 0), default=-1
        )
        m = self._pattern(st.run.impl).search(text, first) if first >= 0 else None
        cut = m.start() if m is not None else -1
        if st.run.map_added:
            i = text.find(MAP_STARTS[0])
            if i >= 0 and (cut < 0 or i < cut):
                cut = i
        return cut

    def _rank_text(self, st: _Stream, piece: bytes) -> None:
        """Text of the current owner (a rank): the untagged output and the rank's."""
        assert isinstance(st.owner, tuple) and st.run is not None
        self._plain.append(piece)
        self._to_rank(st.run, st.owner, st.rank_stream, piece)

    def _text(self, st: _Stream, data: bytes) -> None:
        """Text of the current owner up to its newline; what follows a newline untagged is the
        launcher's."""
        while data:
            if st.owner is None:
                if st.resume is not None and st.resume_ready:  # the rank's chunk goes on
                    st.owner, st.resume, st.resume_ready = st.resume, None, False
                else:
                    st.owner = LAUNCHER
            nl = data.find(b"\n")
            if st.owner != LAUNCHER and st.run is not None and st.run.map_added:
                cut = map_start(data, nl)
                if cut >= 0:  # an orted's job map written into a rank's chunk: not the rank's
                    if cut:
                        self._text(st, data[:cut])
                    if isinstance(st.owner, tuple):
                        st.resume, st.resume_ready = st.owner, False
                        st.resume_block = data[cut : cut + 1] == b"\n"
                    st.owner = None
                    data = data[cut:]
                    continue
            piece = data if nl < 0 else data[: nl + 1]
            data = b"" if nl < 0 else data[nl + 1 :]
            if st.owner == LAUNCHER:
                self._launcher(st, piece)
            else:
                self._rank_text(st, piece)
            if nl >= 0:
                st.owner = None

    def _launcher(self, st: _Stream, piece: bytes) -> None:
        """A piece of a launcher line. Open MPI 4's stdout may hold its job map: its lines are
        looked at whole before they show; any other launcher text shows as it comes."""
        run = st.run
        st.line += piece
        looks_for_map = run is not None and run.impl == OPENMPI4 and st.channel == STDOUT
        if piece.endswith(b"\n"):
            self._end_line(st)
        elif not looks_for_map or len(st.line) > TAIL_BYTES:
            self._show(st, bytes(st.line[st.shown :]))
            st.shown = len(st.line)

    def _show(self, st: _Stream, data: bytes) -> None:
        """Launcher text handed on: to the plain stream and the view."""
        if not data:
            return
        self._plain.append(data)
        self._launcher_event(st, data)

    def _end_line(self, st: _Stream) -> None:
        """The launcher line collected is over: a job map line is read (and kept out of the
        output when the engine asked for the map), any other is kept as a launcher line."""
        if not st.line:
            return
        line = bytes(st.line)
        shown, st.shown = st.shown, 0
        st.line.clear()
        run = st.run
        if run is not None and run.impl == OPENMPI4 and st.channel == STDOUT and not shown:
            m = MAP_LINE.match(line.rstrip(b"\n"))
            if m is not None and line.endswith(b"\n"):
                self._map_line(run, m)
                if st.resume is not None and not st.resume_ready:
                    body = line.rstrip(b"\n")
                    closing = body.startswith(b" ==") and b"JOB MAP" not in body
                    st.resume_ready = closing or not st.resume_block
                if run.map_added:
                    return  # the map we asked for: not the user's output
        self._show(st, line[shown:])
        self._keep_launcher(st, line.decode("utf-8", "replace"), len(line))

    def _map_line(self, run: MpiRun, m: re.Match[bytes]) -> None:
        """Hosts of the ranks from the first job map (mpirun's; the orteds' repeat it)."""
        if run.map_read:
            return
        if m.group("node") is not None:
            run.map_node = m.group("node").decode("utf-8", "replace")
        elif m.group("rank") is not None and run.map_node:
            rank = int(m.group("rank"))
            run.hosts.setdefault(rank, run.map_node)
            for (_job, r), out in self.output.ranks.items():
                if r == rank and not out.host:
                    out.host = run.map_node
        elif m.group(0).startswith(b" ==") and b"JOB MAP" not in m.group(0) and run.hosts:
            run.map_read = True

    def _take(self, key: RankKey, channel: int, pieces: list[bytes]) -> tuple[str, bytes]:
        out = self.output.ranks[key]
        buffer = out._buffers[channel]
        size = len(pieces[0]) if len(pieces) == 1 else sum(map(len, pieces))
        if self.on_event is None and 1 < len(pieces) <= size // SHARED_PIECE:
            # runs of lines (not a line here and there): kept as they are, the untagged
            # output's pieces too, not copied again
            buffer.extend(pieces, size)
            last, need = len(pieces), TAIL_BYTES
            while last and need > 0:
                last -= 1
                need -= len(pieces[last])
            data = b"".join(pieces[last:])
        else:
            data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            buffer.add(data)
        if buffer.in_memory:
            self._memory += size
        if len(data) >= TAIL_BYTES:
            out.tail = bytearray(data[-TAIL_BYTES:])
        else:
            out.tail += data
            if len(out.tail) > TAIL_BYTES:
                del out.tail[: len(out.tail) - TAIL_BYTES]
        return out.host, data

    def _largest_first(self) -> list[tuple[RankKey, int]]:
        buffers = sorted(
            (
                (b.in_memory, key, ch)
                for key, out in self.output.ranks.items()
                for ch, b in out._buffers.items()
                if b.in_memory
            ),
            key=lambda t: -t[0],
        )
        return [(key, ch) for _size, key, ch in buffers]

    def _spill_stream(self, key: RankKey, channel: int, spill_dir: SpillDir, prefix: str) -> int:
        return self.output.ranks[key]._buffers[channel].spill(spill_dir, prefix)

    def _failure(self, run: MpiRun, report: str) -> RankFailure:
        failure = parse_failure(report, run)
        failure.returncode = run.returncode
        out = self._rank_output(failure.rank)
        if out is not None:
            failure.last_lines = out.last_lines()
            failure.host = failure.host or out.host
        if failure.rank is not None and not failure.host:
            failure.host = run.hosts.get(failure.rank, "")
        return failure

    def _rank_output(self, rank: int | None) -> RankOutput | None:
        if rank is None:
            return None
        return next((o for (_job, r), o in self.output.ranks.items() if r == rank), None)

    def result(self) -> MpiOutput:
        """The per-rank output (call after :meth:`close`); buffers are frozen."""
        for out in self.output.ranks.values():
            out.freeze()
        return self.output


__all__ = ["SHARED_PIECE", "RankDemux"]
