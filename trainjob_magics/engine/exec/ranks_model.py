"""The per-rank output of a command's tagged launcher runs: each rank's bytes
(:class:`RankOutput`), a run (:class:`MpiRun`), its failed rank (:class:`RankFailure`), all of a
command's (:class:`MpiOutput`), and the live events a view gets (:class:`RankEvent`).

A rank's stream stays in memory while the demux's budget allows, else it goes to a spill file
(:mod:`.output`), as an exec's streams do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from ..result import CapturedOutput, SpillFile
from .output import SpillDir

STDOUT, STDERR = 1, 2  # exec channels

OPENMPI4, OPENMPI5, HYDRA = "openmpi4", "openmpi5", "hydra"

TAIL_BYTES = 4096  # of each rank's latest output, kept for the failure line


class _Buffer:
    """One rank stream's bytes: in memory while the shared budget allows, else a spill file."""

    __slots__ = ("_file", "_spill", "chunks", "size")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self._file: BinaryIO | None = None
        self._spill: SpillFile | None = None

    @property
    def in_memory(self) -> int:
        return 0 if self._file is not None else self.size

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if self._file is not None:
            self._file.write(data)
        else:
            self.chunks.append(data)

    def extend(self, pieces: list[bytes], size: int) -> None:
        """:meth:`add` of each piece (``size``: their bytes), without joining them first."""
        self.size += size
        if self._file is not None:
            self._file.writelines(pieces)
        else:
            self.chunks += pieces

    def spill(self, spill_dir: SpillDir, prefix: str) -> int:
        """Move to a spill file; returns the bytes of memory given up."""
        if self._file is not None:
            return 0
        self._file, self._spill = spill_dir.new_file(prefix)
        for chunk in self.chunks:
            self._file.write(chunk)
        self.chunks = []
        return self.size

    def captured(self, final: bool) -> CapturedOutput:
        if self._file is not None and self._spill is not None:
            if final:
                self._file.close()
            else:
                self._file.flush()
            return CapturedOutput(spill=self._spill, size=self.size)
        data = b"".join(self.chunks)
        if final:
            self.chunks = [data] if data else []
        return CapturedOutput(data, size=len(data))


class RankOutput:
    """What one rank printed: ``stdout``/``stderr`` exactly as the program wrote them (the
    launcher's tags removed), the ``host`` it ran on and, once known, its ``pod``."""

    def __init__(self, rank: int, host: str = "", job: str = "") -> None:
        self.rank = rank
        self.host = host
        self.job = job  # the launcher's job id in its tags ("1": the first job of the mpirun)
        self.pod = ""
        self._buffers = {STDOUT: _Buffer(), STDERR: _Buffer()}
        self._frozen: dict[int, CapturedOutput] = {}
        self._final = False  # no more output comes (frozen: in-memory bytes joined when read)
        self.tail = bytearray()  # the last TAIL_BYTES bytes of both streams, as they came

    def _captured(self, channel: int) -> CapturedOutput:
        frozen = self._frozen.get(channel)
        if frozen is None:
            frozen = self._buffers[channel].captured(final=self._final)
            if self._final:
                self._frozen[channel] = frozen
        return frozen

    @property
    def stdout(self) -> str:
        return self._captured(STDOUT).text()

    @property
    def stderr(self) -> str:
        return self._captured(STDERR).text()

    @property
    def stdout_bytes(self) -> bytes:
        return self._captured(STDOUT).read_bytes()

    @property
    def stderr_bytes(self) -> bytes:
        return self._captured(STDERR).read_bytes()

    @property
    def stdout_path(self) -> str | None:
        """The spill file holding this rank's stdout once the budget was used up."""
        return self._captured(STDOUT).path

    @property
    def size(self) -> int:
        return sum(b.size for b in self._buffers.values())

    def last_lines(self, n: int = 3) -> list[str]:
        """The last ``n`` non-blank lines this rank printed (either stream)."""
        text = bytes(self.tail).decode("utf-8", "replace")
        lines = [ln.rstrip("\r") for ln in text.splitlines() if ln.strip()]
        return lines[-n:]

    def freeze(self) -> None:
        """No more output comes: spill files are closed now, in-memory bytes joined once read
        (a command's result holds every rank; most are never read whole)."""
        self._final = True
        for channel, buffer in self._buffers.items():
            if buffer.spilled:
                self._captured(channel)

    @property
    def where(self) -> str:
        """``pod X`` when known, else ``host X``, else ``''``."""
        if self.pod:
            return f"pod {self.pod}"
        return f"host {self.host}" if self.host else ""

    def __repr__(self) -> str:
        return (
            f"RankOutput(rank={self.rank}, host={self.host!r}, pod={self.pod!r}, size={self.size})"
        )


@dataclass
class RankFailure:
    """The first rank that failed, as the launcher reported it."""

    rank: int | None
    host: str = ""
    pod: str = ""
    exit_code: int | None = None
    signal: int | None = None
    signal_name: str = ""
    how: str = ""  # "exit", "signal", "abort", "" (the launcher named no rank)
    last_lines: list[str] = field(default_factory=list)
    launcher: str = "mpirun"
    returncode: int | None = None  # the launcher's own exit code

    def line(self) -> str:
        """``mpirun: rank 2 (pod x) failed first: exit code 3; last lines: a | b``."""
        if self.rank is None and not self.host:
            code = "" if self.returncode is None else f" with code {self.returncode}"
            return f"{self.launcher} exited{code}; it named no rank that failed"
        who = f"rank {self.rank}" if self.rank is not None else "a rank"
        where = f"pod {self.pod}" if self.pod else f"host {self.host}" if self.host else ""
        head = f"{self.launcher}: {who}{f' ({where})' if where else ''} failed first: "
        if self.signal is not None:
            name = f" ({self.signal_name})" if self.signal_name else ""
            head += f"killed by signal {self.signal}{name}"
        elif self.how == "abort":
            head += "called abort" if self.exit_code is None else f"abort, code {self.exit_code}"
        elif self.exit_code is not None:
            head += f"exit code {self.exit_code}"
        else:
            head += "ended abnormally"
        if self.last_lines:
            head += "; last lines: " + " | ".join(self.last_lines)
        return head


@dataclass
class MpiRun:
    """One ``mpirun``/``mpiexec`` of the command, tagged by the engine."""

    index: int
    launcher: str  # "mpirun" or "mpiexec": the name the command called
    impl: str  # OPENMPI4, OPENMPI5, HYDRA
    map_added: bool = False  # Open MPI 4: --display-map added (its lines kept out of stdout)
    np: int | None = None  # -np/-n the user gave
    hostfile_arg: bool = False  # the user named hosts (--hostfile, -H, -f...)
    env: str = ""  # "orte", "prte", "orteprte": which default-hostfile variables are set
    hostfile: dict[str, int] = field(default_factory=dict)  # the job's hostfile: host -> slots
    hosts: dict[int, str] = field(default_factory=dict)  # rank -> host (tags or job map)
    returncode: int | None = None  # None: it did not end (interrupted, or still running)
    failure: RankFailure | None = None
    warning: str = ""  # the world check's line ('' when the world was as asked)
    ranks: list[int] = field(default_factory=list)  # ranks that printed, in order seen
    map_read: bool = field(default=False, repr=False)  # the job map's hosts were read
    map_node: str = field(default="", repr=False)  # the node of the map lines being read

    @property
    def option(self) -> str:
        """The tagging option added: ``--tag-output``, ``--output tag-detailed``..."""
        return {
            OPENMPI4: "--tag-output",
            OPENMPI5: "--output tag-detailed",
            HYDRA: "-prepend-pattern",
        }[self.impl]

    def note(self) -> str:
        """The footer's words: ``ranks tagged by mpirun --tag-output (hosts: --display-map)``."""
        extra = " (hosts from --display-map)" if self.map_added else ""
        return f"ranks tagged by {self.launcher} {self.option}{extra}"

    @property
    def world(self) -> list[int]:
        """Every rank known to this run: from the job map, else those that printed."""
        return sorted(set(self.hosts) | set(self.ranks))


class MpiOutput:
    """The per-rank side of a command's output: its runs, each rank's output (all runs of the
    command together), and the launcher's own lines."""

    def __init__(self) -> None:
        self.runs: list[MpiRun] = []
        self.ranks: dict[tuple[str, int], RankOutput] = {}
        self.launcher_lines: list[tuple[str, str]] = []  # (stream, line without its newline)
        self.launcher_dropped = 0  # launcher bytes beyond what is kept

    @property
    def by_rank(self) -> dict[int, RankOutput]:
        """rank -> its output, for the first job of each launcher (spawned jobs: :attr:`ranks`)."""
        first = next(iter(self.ranks), ("", 0))[0]
        return dict(sorted((rank, out) for (job, rank), out in self.ranks.items() if job == first))

    @property
    def launcher(self) -> str:
        """The lines no rank printed (ssh's warnings, mpirun's messages), in order."""
        return "".join(line + "\n" for _stream, line in self.launcher_lines)

    @property
    def failure(self) -> RankFailure | None:
        return next((r.failure for r in self.runs if r.failure is not None), None)

    @property
    def warnings(self) -> list[str]:
        return [r.warning for r in self.runs if r.warning]

    def notes(self) -> list[str]:
        """One footer note per distinct tagging used."""
        seen: list[str] = []
        for run in self.runs:
            if run.note() not in seen:
                seen.append(run.note())
        return seen

    def place(self, pod_of_host: Callable[[str], str]) -> None:
        """Name each rank's (and failure's) pod from its host."""
        for out in self.ranks.values():
            if out.host and not out.pod:
                out.pod = pod_of_host(out.host)
        for run in self.runs:
            if run.failure is not None and run.failure.host and not run.failure.pod:
                run.failure.pod = pod_of_host(run.failure.host)

    def __repr__(self) -> str:
        return f"MpiOutput(runs={len(self.runs)}, ranks={sorted(self.by_rank)})"


@dataclass(frozen=True)
class RankEvent:
    """Live per-rank output for a view. ``kind``: ``begin`` (a tagged run starts: ``run``),
    ``output`` (``rank``, ``host``, ``stream``, ``text``), ``launcher`` (``stream``, ``text``:
    lines no rank printed), ``end`` (``run`` ended: its ``returncode``, ``failure``)."""

    kind: str
    run: MpiRun
    rank: int | None = None
    host: str = ""
    stream: str = ""
    text: str = ""


OnRankEvent = Callable[[RankEvent], None]


__all__ = [
    "HYDRA",
    "OPENMPI4",
    "OPENMPI5",
    "STDERR",
    "STDOUT",
    "TAIL_BYTES",
    "MpiOutput",
    "MpiRun",
    "OnRankEvent",
    "RankEvent",
    "RankFailure",
    "RankOutput",
]
