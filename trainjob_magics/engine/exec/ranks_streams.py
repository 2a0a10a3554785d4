"""One exec's stdout and stderr untagged (:class:`RankedStreams`): the exec client's stream
sinks feed a :class:`~.ranks_demux.RankDemux`, the result gets what an untagged launcher would
have printed and the per-rank output; and what ``session.execute`` does for ``mpirun``
(:class:`RankOptions`).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..result import ExecResult
from .output import OutputBuffer, SpillDir
from .ranks_demux import RankDemux
from .ranks_model import STDERR, STDOUT, OnRankEvent


class RankedStreams:
    """One exec's stdout and stderr through a :class:`RankDemux`: the exec client hands the raw
    bytes to :meth:`sink` (its stream sinks), and the result gets the untagged streams in
    bounded buffers (:mod:`.output`, as the client keeps them), their arrival order, ``on_output``
    with the untagged text, and ``.mpi``. With ``on_ranks`` the text of tagged runs goes to it
    (per rank and the launcher's) instead of ``on_output``, which keeps the text around them."""

    def __init__(
        self,
        token: str,
        *,
        pod: str,
        limit: int | None,
        spill_dir: SpillDir | None,
        on_output: Callable[[str, str], None] | None = None,
        on_ranks: OnRankEvent | None = None,
        chain: Callable[[RankDemux], Any] | None = None,
    ) -> None:
        self.pod = pod
        self.on_output = on_output
        self.on_ranks = on_ranks
        self.demux = RankDemux(
            token, limit=limit, spill_dir=spill_dir, on_event=on_ranks, label=pod or "exec"
        )
        if chain is not None:  # other launchers' runs taken out first (exec/torchrun_demux.py)
            self.demux = chain(self.demux)
        self.buffers = {
            ch: OutputBuffer(limit, spill_dir, f"{pod or 'exec'}-{name}-")
            for ch, name in ((STDOUT, "stdout"), (STDERR, "stderr"))
        }
        self.decoders = {
            ch: codecs.getincrementaldecoder("utf-8")(errors="replace") for ch in self.buffers
        }
        self.runs: list[list[int]] = []
        self._result: Any = None

    def sink(self, channel: int) -> _Sink:
        return _Sink(self, channel)

    def take(self, channel: int, data: bytes | memoryview) -> None:
        inside = self.demux._streams[channel].run is not None
        self._keep(channel, self.demux.feed_pieces(channel, data), inside)

    def _keep(self, channel: int, pieces: list[bytes | memoryview], inside: bool) -> None:
        buffer = self.buffers[channel]
        size = 0
        for piece in pieces:
            if piece:
                if not isinstance(piece, bytes):
                    piece = bytes(piece)  # the frame's memory is reused once this returns
                buffer.add(piece)  # the pieces of a run of a rank's lines: the rank's too
                size += len(piece)
        if not size:
            return
        if self.runs and self.runs[-1][0] == channel:
            self.runs[-1][1] += size
        else:
            self.runs.append([channel, size])
        if self.on_output is None:
            return  # nothing decodes: the result decodes on access
        text = self.decoders[channel].decode(b"".join(pieces))
        shown_elsewhere = self.on_ranks is not None and (
            inside or self.demux._streams[channel].run is not None
        )
        if text and not shown_elsewhere:
            self.on_output("stdout" if channel == STDOUT else "stderr", text)

    def snapshot(self, base: Any) -> Any:
        """``base`` (the client's result so far, its streams empty) with the untagged output."""
        order = tuple((ch, n) for ch, n in list(self.runs))
        stdout, stderr = (self.buffers[ch].snapshot() for ch in (STDOUT, STDERR))
        result = ExecResult.from_captured(
            stdout, stderr, None, getattr(base, "duration", 0.0), self.pod, order=order
        )
        result.mpi = self.demux.output
        return result

    def finish(self, base: Any) -> Any:
        """The command ended (or failed: ``base`` is then the error's partial result, maybe
        None): the result with the untagged streams and ``.mpi`` (idempotent)."""
        if self._result is not None:
            return self._result
        for channel, rest in self.demux.close().items():
            self._keep(channel, [rest], False)
        if self.on_output is not None:
            for channel, decoder in self.decoders.items():
                text = decoder.decode(b"", final=True)
                if text:
                    self.on_output("stdout" if channel == STDOUT else "stderr", text)
        result = ExecResult.from_captured(
            self.buffers[STDOUT].freeze(),
            self.buffers[STDERR].freeze(),
            getattr(base, "returncode", None),
            getattr(base, "duration", 0.0),
            getattr(base, "pod", "") or self.pod,
            order=tuple((ch, n) for ch, n in self.runs),
        )
        result.note = getattr(base, "note", "")
        result.mpi = self.demux.result() if self.demux.output.runs else None
        self._result = result
        return result


class _Sink:
    """A stream sink of the exec client (it calls ``write`` with each frame's payload)."""

    __slots__ = ("channel", "streams")

    def __init__(self, streams: RankedStreams, channel: int) -> None:
        self.streams = streams
        self.channel = channel

    def write(self, data: bytes | memoryview) -> None:
        self.streams.take(self.channel, data)


@dataclass(frozen=True)
class RankOptions:
    """What ``session.execute`` does for ``mpirun``: tag the ranks (``enabled``), check the
    world after each run (``world_check``), and where live per-rank text goes (``on_ranks``)."""

    enabled: bool = True
    world_check: bool = True
    on_ranks: OnRankEvent | None = None


__all__ = ["RankOptions", "RankedStreams"]
