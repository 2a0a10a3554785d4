"""Per-rank output of ``mpirun``/``mpiexec`` in a cell: the launcher's own tagging, undone.

A shell command whose text calls ``mpirun`` or ``mpiexec`` runs under :data:`RANKS_SCRIPT`
(:func:`ranked_argv`): a POSIX ``sh`` prelude that defines the shell functions ``mpirun`` and
``mpiexec``, then ``eval``s the command (the user's text is an argv element, never spliced into
ours). Each function runs ``command mpirun "$@"``, the user's arguments untouched, and adds the
launcher's own tagging option only when

- its stdout and stderr are the exec's own (not redirected, piped or captured by the user:
  ``/proc/self/fd/N`` is the file of the wrapper's, ``$PPID``), and
- none of the user's arguments chooses an output form already (Open MPI ``--tag-output``,
  ``--timestamp-output``, ``--output``, ``--output-filename``, ``--xml``,
  ``--merge-stderr-to-stdout``...; Hydra ``-prepend-rank``, ``-l``, ``-prepend-pattern``,
  ``-outfile-pattern``...), and
- ``command mpirun --version`` names a launcher whose tags carry the rank:

  ============  =======================================  =====================================
  launcher      option added                             each line's tag
  ============  =======================================  =====================================
  Open MPI 4    ``--tag-output`` (+ ``--display-map``)   ``[1,3]<stdout>:`` (host: the map)
  Open MPI 5    ``--output tag-detailed``                ``[1,3][host:pid]<stdout>: ``
  MPICH Hydra   ``-prepend-pattern \\x1e%r@%h\\x1f``       ``\\x1e3@host\\x1f``
  ============  =======================================  =====================================

Around the run it prints a marker line on both streams (``\\x1e`` + a token new for each
command + ``begin``/``end``): :class:`RankDemux` reads the exec's streams, removes the markers
and the tags (and the job map it asked for), and hands on the bytes an untagged ``mpirun`` would
have printed, so ``ExecResult.stdout``/``stderr`` stay what the program printed. Beside them it
keeps each rank's own stdout and stderr (:class:`RankOutput`, exactly the bytes that rank
printed), and the lines no rank printed: the launcher's (ssh's "Permanently added" warnings,
mpirun's own messages). Tags are recognised by their form and channel, never guessed from the
text: Open MPI and Hydra tag each chunk they forward (a line longer than 4 KiB gets a tag in its
middle; a partial line gets one, and its end another), so a tag is looked for anywhere, and text
belongs to the rank of the tag before it up to its newline. A rank's partial line that the
launcher's own text follows on the same stream is the one case the streams cannot tell apart.

Where the formats come from (recorded outputs in ``tests/unit/data/mpi``): Open MPI 4.1.4
(Debian's ``openmpi-bin``) and MPICH 4.0.2's Hydra (Debian's ``mpich``), run on this machine;
Open MPI 5 from its sources: PMIx v5.0.6 ``src/common/pmix_iof.c`` (the tags) and PRRTE v3.0.6
``src/docs/show-help-files/help-prun.rst`` (the failure reports).

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

import codecs
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NamedTuple

from ..result import CapturedOutput, SpillFile
from .output import SpillDir, default_spill_dir, release_freed_memory
from .scripts import SHELLS

STDOUT, STDERR = 1, 2  # exec channels

OPENMPI4, OPENMPI5, HYDRA = "openmpi4", "openmpi5", "hydra"

LAUNCHER = -1  # the owner of a line no rank printed

TAIL_BYTES = 4096  # of each rank's latest output, kept for the failure line

SHARED_PIECE = 1024  # a rank's pieces of a chunk this long on average are kept as they are

LAUNCHER_KEEP = 1 << 20  # bytes of launcher lines kept in memory per run (the rest counted)

MAX_MARKER = 1 << 16  # a begin marker names the hostfile's hosts: 256 hosts fit easily

# Only a command whose text names one of these runs under the prelude: the functions could not
# be called otherwise, and every other command runs exactly as before (no eval).
CALLS_LAUNCHER = re.compile(r"(?<![\w./-])(mpirun|mpiexec)(?![\w.-])")

# The prelude. $1: the marker token, $2: the command. Every name it defines starts with __T
# (POSIX sh has no `local`). What it prints in markers is its own words, digits, or hostfile
# names that passed a character check. It is one argv element of every exec URL that runs
# mpirun: kept short (the local cluster's API server takes request lines up to 8 KiB).
# The fd test takes no 2>/dev/null: that would make fd 2 another file while it looks at it.
RANKS_SCRIPT = r"""__Tt=$1 __Tc=$2;shift 2;__Tn=0
mpirun(){ __Tm mpirun "$@";}
mpiexec(){ __Tm mpiexec "$@";}
__Tm(){
__Tl=$1;shift;__Th=;__Tp=1;__To=/proc/$PPID/fd
[ /proc/self/fd/1 -ef $__To/1 ]&&[ /proc/self/fd/2 -ef $__To/2 ]||__Th=u
for __Ta;do case $__Ta in -*tag-output|-*timestamp-output|-*output-filename*|-*xml*|\
-*merge-stderr*|-*output|-*output=*|-*xterm|-*prepend-*|-l|-*file-pattern|-V|-*version|-h|\
-*help|-info)__Th=u;;
-*display-map|-*display-devel-map)__Tp=0;;esac;done
[ -z "$__Th" ]&&case $(command $__Tl --version 2>&1) in
*"MPI) "[34].*|*"RTE) "[34].*)__Th=openmpi4;;
*"MPI) 5."*|*"MPI) 6."*|*"(PRRTE)"*)__Th=openmpi5;;*"HYDRA build details"*)__Th=hydra;;esac
case $__Th in o*|h*);;*)command $__Tl "$@";return;;esac
__Tv=-;__Tf=0;__Tw=
for __Ta;do
if [ -n "$__Tw" ];then [ $__Tw = n ]&&__Tv=$__Ta;[ $__Tw = 2 ]&&__Tw=1||__Tw=;continue;fi
case $__Ta in -np|--np|-n|--n|-c)__Tw=n;;-np=*|--np=*|-n=*|--n=*)__Tv=${__Ta#*=};;
-*hostfile|-*machinefile|-f|-H|-*host|-hosts)__Tf=1;__Tw=1;;-*hostfile=*|-*host=*)__Tf=1;;
-*mca|-*env)__Tw=2;;-x|-N|-*npernode|-*ppn|-*-by|-*bind-to|-*wdir|-wd|-*prefix|-*timeout|\
-*stdin|-launcher|-bootstrap|-iface)__Tw=1;;--|[!-]*)break;;esac
done
case $__Tv in *[!0-9]*|'')__Tv=-;;esac
__Tk=${PRTE_MCA_prte_default_hostfile:-${OMPI_MCA_prte_default_hostfile:-}}
__Tk=${__Tk:-${OMPI_MCA_orte_default_hostfile:-/etc/mpi/hostfile}}
[ -r "$__Tk" ]||__Tk=${TRAINJOB_LOCAL_HOSTFILE:-$__Tk}
__Ts=
[ -r "$__Tk" ]&&while read -r __Ta __Tr||[ -n "$__Ta" ];do __Tg=1
case $__Ta in *:*)__Tg=${__Ta#*:};__Ta=${__Ta%%:*};;esac
case $__Tr in *slots=*)__Tg=${__Tr#*slots=};__Tg=${__Tg%%[!0-9]*};;esac
case $__Ta$__Tg in *[!A-Za-z0-9._-]*|[!A-Za-z0-9]*);;*)__Ts="$__Ts $__Ta=${__Tg:-1}";;esac
done<"$__Tk"
__Te=-;[ -n "${OMPI_MCA_orte_default_hostfile:-}" ]&&__Te=orte
[ -n "${PRTE_MCA_prte_default_hostfile:-}${OMPI_MCA_prte_default_hostfile:-}" ]&&__Te=${__Te#-}prte
__Tn=$((__Tn+1))
case $__Th in openmpi4)[ $__Tp = 1 ]&&set -- --display-map "$@";set -- --tag-output "$@";;
openmpi5)__Tp=0;set -- --output tag-detailed "$@";;
*)__Tp=0;set -- -prepend-pattern "$(printf '\036%%r@%%h\037')" "$@";;esac
__Tb="$__Tn $__Th $__Tp $__Tv $__Tf $__Te $__Tl$__Ts"
printf '\036%s begin %s\n' $__Tt "$__Tb";printf '\036%s begin %s\n' $__Tt "$__Tb" >&2
if command $__Tl "$@";then __Tr=0;else __Tr=$?;fi
printf '\036%s end %s %s\n' $__Tt $__Tn $__Tr;printf '\036%s end %s %s\n' $__Tt $__Tn $__Tr >&2
return $__Tr
}
eval "$__Tc"
"""


def new_token() -> str:
    """A fresh marker token: output cannot hold it by chance."""
    return "tjm" + secrets.token_hex(8)


def wants_ranks(argv: Sequence[str]) -> bool:
    """``[sh, -c, TEXT]`` (any shell) whose text calls ``mpirun``/``mpiexec``."""
    return (
        len(argv) == 3
        and argv[0].rsplit("/", 1)[-1] in SHELLS
        and argv[1] == "-c"
        and CALLS_LAUNCHER.search(argv[2]) is not None
    )


def ranked_argv(argv: Sequence[str], token: str) -> list[str]:
    """``[sh, -c, TEXT]`` -> ``[sh, -c, RANKS_SCRIPT, sh, TOKEN, TEXT]`` (``$0`` stays the
    shell's name, as ``sh -c TEXT`` has it)."""
    shell = argv[0]
    return [shell, "-c", RANKS_SCRIPT, shell.rsplit("/", 1)[-1], token, argv[2]]


# ---------------------------------------------------------------------------------- the data


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


# ---------------------------------------------------------------------------------- the parser


def _prefix_re(items: Sequence[str | tuple[str, ...]]) -> str:
    """A regex matching every non-empty prefix of the sequence ``items`` (regex atoms matched
    whole, or a tuple of literal alternatives matched char by char)."""
    if not items:
        return ""
    head, rest = items[0], list(items[1:])
    if isinstance(head, tuple):
        alts = [_prefix_re([re.escape(c) for c in alt] + rest) for alt in head]
        return "(?:" + "|".join(alts) + ")"
    tail = _prefix_re(rest)
    return head + (f"(?:{tail})?" if tail else "")


_STREAMS: tuple[str, ...] = ("stdout", "stderr", "stddiag")
_OMPI4_ITEMS: list[str | tuple[str, ...]] = [
    r"\[",
    r"\d+",
    ",",
    r"\d+",
    r"\]",
    "<",
    _STREAMS,
    ">",
    ":",
]
_OMPI5_ITEMS: list[str | tuple[str, ...]] = [r"\[", r"[^\s,\[\]]+", ",", r"\d+", r"\]"]
_OMPI5_ITEMS += [r"\[", r"[^\s\[\]]*", ":", r"(?:\d+|unknown)", r"\]", "<", _STREAMS, ">", ":", " "]
_HYDRA_ITEMS: list[str | tuple[str, ...]] = ["\x1e", r"\d+", "@", "[^\x1e\x1f\n]*", "\x1f"]

TAGS = {
    # [job,rank]<stream>:   (orte/mca/iof/base/iof_base_output.c, --tag-output; 4.1.4 recorded)
    OPENMPI4: rb"\[(?P<job>\d+),(?P<rank>\d+)\]<(?P<stream>stdout|stderr|stddiag)>:",
    # [jobid,rank][host:pid]<stream>:   (PMIx v5.0.6 src/common/pmix_iof.c, tag_detailed)
    OPENMPI5: rb"\[(?P<job>[^\s,\[\]]+),(?P<rank>\d+)\]\[(?P<host>[^\s\[\]]*):(?:\d+|unknown)\]"
    rb"<(?P<stream>stdout|stderr|stddiag)>: ",
    # our -prepend-pattern: \x1e%r@%h\x1f   (MPICH 4.0.2 Hydra recorded)
    HYDRA: rb"\x1e(?P<rank>\d+)@(?P<host>[^\x1e\x1f\n]*)\x1f",
}
TAG_PREFIXES = {
    OPENMPI4: re.compile(_prefix_re(_OMPI4_ITEMS).encode()),
    OPENMPI5: re.compile(_prefix_re(_OMPI5_ITEMS).encode()),
    HYDRA: re.compile(_prefix_re(_HYDRA_ITEMS).encode()),
}
TAG_START = {OPENMPI4: b"[", OPENMPI5: b"[", HYDRA: b"\x1e"}
TAG_STARTS = frozenset(b"[\x1e")  # the first byte of any tag or marker
MAX_TAG = 512  # a tag is shorter than this (Open MPI 5's holds a hostname)

# Open MPI 4's --display-map (orte/mca/rmaps/base/rmaps_base_support_fns.c; 4.1.4 recorded): one
# map from mpirun, and one more from each orted, whose output comes back through ssh.
MAP_LINE = re.compile(
    rb"^(?: Data for JOB \[\d+,\d+\] offset \d+.*| =+ +JOB MAP +=+| =+"
    rb"| Data for node: (?P<node>\S+)\tNum slots: .*"
    rb"| \tProcess OMPI jobid: \[\d+,\d+\] App: \d+ Process rank: (?P<rank>\d+) Bound: .*)?$"
)


# How the orteds' job maps begin (two writes each: its "Data for JOB" line, then a blank line
# and the map): what follows a rank's line cut at a 4 KiB chunk (tagged, no newline) untagged
# is the launcher's when it begins so. Only looked for when the engine asked for the map.
MAP_STARTS = (b" Data for JOB [", b"\n ========================   JOB MAP")


def _map_start(data: bytes, nl: int) -> int:
    """Where a job map begins in ``data``, at or before its first newline (``nl``); -1."""
    found = -1
    for start in MAP_STARTS:
        i = data.find(start)
        if i >= 0 and (nl < 0 or i <= nl) and (found < 0 or i < found):
            found = i
    return found


@dataclass
class _Stream:
    """One exec channel's parse state."""

    channel: int
    held: bytes = b""  # the end of the last chunk: maybe the start of a marker or a tag
    run: MpiRun | None = None  # the tagged run this stream is inside of
    owner: tuple[str, int] | int | None = None  # (job, rank), LAUNCHER, or None at line start
    rank_stream: int = STDOUT  # the stream named by the owner's tag
    line: bytearray = field(default_factory=bytearray)  # the launcher line being collected
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


class RankDemux:
    """Reads an exec's stdout and stderr as they arrive (:meth:`feed`), returns what an
    untagged launcher would have printed, and keeps the per-rank output (:attr:`output`).

    ``limit``: bytes of rank output kept in memory, all ranks together (None: no bound).
    ``on_event`` gets :class:`RankEvent` objects (decoded text, one per rank and stream per
    chunk) while the command runs.
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
        self.marker = b"\x1e" + self.token + b" "
        self.limit = limit
        self.spill_dir = spill_dir
        self.on_event = on_event
        self.label = label
        self.output = MpiOutput()
        self._streams = {STDOUT: _Stream(STDOUT), STDERR: _Stream(STDERR)}
        self._runs: dict[int, MpiRun] = {}
        self._memory = 0
        self._decoders: dict[tuple[Any, int], Any] = {}
        self._patterns: dict[str, re.Pattern[bytes]] = {}
        self._line_patterns: dict[bytes, tuple[re.Pattern[bytes], ...]] = {}
        self._launcher_kept = 0
        self._run_launcher: dict[int, list[str]] = {}
        self._ended: dict[int, set[int]] = {}  # run -> the channels whose end marker came
        self._pending: dict[tuple[tuple[str, int], int], tuple[MpiRun, list[bytes]]] = {}
        self._plain: list[bytes | memoryview] = []

    # -- feeding ------------------------------------------------------------------------------
    def feed(self, channel: int, data: bytes | memoryview) -> bytes | memoryview:
        """Take a chunk of ``channel``; returns its bytes as an untagged run would show them
        (possibly held back in part until the next chunk: a marker or tag cut in two)."""
        plain = self.feed_pieces(channel, data)
        return plain[0] if len(plain) == 1 else b"".join(plain)

    def feed_pieces(self, channel: int, data: bytes | memoryview) -> list[bytes | memoryview]:
        """:meth:`feed`, its bytes in pieces (not joined: a rank's pieces are the same)."""
        st = self._streams[channel]
        raw = data if isinstance(data, bytes) else bytes(data)
        if st.run is None and not st.held and b"\x1e" not in raw:
            return [data]  # the usual case: no marker in sight
        buf = st.held + raw if st.held else raw
        st.held = b""
        self._plain = []
        self._parse(st, buf)
        self._flush_pending()
        plain, self._plain = self._plain, []
        return plain

    def close(self) -> dict[int, bytes]:
        """The streams ended: what was held back is output (returned per channel), a run not
        ended ends now (without an exit code when no end marker came)."""
        rest = {}
        for channel, st in self._streams.items():
            self._plain = []
            if st.held:
                held, st.held = st.held, b""
                if st.run is not None:
                    self._text(st, held)
                else:
                    self._plain.append(held)
            self._end_line(st)
            self._flush_pending()
            st.run = None
            rest[channel] = b"".join(self._plain)
            self._plain = []
        for run in list(self._runs.values()):
            self._finish_run(run)
        self._runs = {}
        return rest

    # -- the state machine ---------------------------------------------------------------------
    def _parse(self, st: _Stream, buf: bytes) -> None:
        pos = 0
        n = len(buf)
        while pos < n:
            if st.run is None:
                at = buf.find(self.marker, pos)
                if at < 0:
                    keep = self._partial_marker(buf, pos)
                    self._plain.append(buf[pos:keep])
                    st.held = buf[keep:]
                    return
                if at > pos:
                    self._plain.append(buf[pos:at])
                pos = self._marker(st, buf, at)
                if pos < 0:
                    return
                continue
            pos = self._parse_run(st, buf, pos)
            if pos < 0:
                return

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
        map_start = MAP_STARTS[0] if run.map_added else None
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
            start = m.start() if m is not None else self._partial_tag(st, buf, pos)
            if start > pos:
                text = buf[pos:start]
                nl = text.find(b"\n")
                # the end of a rank's line (or all of it, cut by the next tag); with at most its
                # newline at its end, a job map can only start in it so (_map_start)
                if (
                    st.owner.__class__ is tuple
                    and (nl < 0 or nl == len(text) - 1)
                    and not (map_start is not None and map_start in text)
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

    def _partial_marker(self, buf: bytes, pos: int) -> int:
        """Where a marker cut at the end of ``buf`` would start (``len(buf)``: none)."""
        at = buf.rfind(b"\x1e", max(pos, len(buf) - len(self.marker)))
        if at >= 0 and self.marker.startswith(buf[at:]):
            return at
        return len(buf)

    def _partial_tag(self, st: _Stream, buf: bytes, pos: int) -> int:
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
        if st.run.map_added and st.channel == STDOUT:  # a job map's start (_map_start), cut
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

    def _marker(self, st: _Stream, buf: bytes, at: int) -> int:
        """Read the marker line at ``at``; returns where parsing goes on (-1: it is cut off,
        held for the next chunk)."""
        end = buf.find(b"\n", at)
        if end < 0:
            if len(buf) - at > MAX_MARKER:  # no marker is that long: it was output
                self._plain.append(buf[at:])
                return -1
            st.held = buf[at:]
            return -1
        words = buf[at + len(self.marker) : end].decode("ascii", "replace").split()
        if words[:1] == ["begin"] and len(words) >= 8:
            self._end_line(st)
            self._flush_pending()
            st.run = self._begin(words)
            st.owner = None
            st.tags = {}
            watch = {TAG_START[st.run.impl], b"\x1e"} | ({b"["} if st.run.map_added else set())
            st.watch = tuple(sorted(watch))
        elif words[:1] == ["end"] and len(words) >= 3:
            self._end_line(st)
            self._flush_pending()
            run = self._runs.get(_int(words[1]) or 0)
            st.run = None
            st.owner = None
            st.tags = {}
            if run is not None:
                run.returncode = _int(words[2])
                ended = self._ended.setdefault(run.index, set())
                ended.add(st.channel)
                if len(ended) == len(self._streams):
                    self._finish_run(run)  # both streams said it ended: its report is whole
        return end + 1

    def _begin(self, words: list[str]) -> MpiRun:
        index = _int(words[1]) or 0
        run = self._runs.get(index)
        if run is not None:
            return run
        _begin, _n, impl, map_added, np, hf, env, launcher, *hosts = words
        hostfile: dict[str, int] = {}
        for item in hosts:
            name, _eq, slots = item.partition("=")
            hostfile[name] = _int(slots) or 1
        run = MpiRun(
            index=index,
            launcher=launcher,
            impl=impl if impl in TAGS else OPENMPI4,
            map_added=map_added == "1",
            np=_int(np),
            hostfile_arg=hf == "1",
            env="" if env == "-" else env,
            hostfile=hostfile,
        )
        self._runs[index] = run
        self.output.runs.append(run)
        self._run_launcher[index] = []
        if self.on_event is not None:
            self.on_event(RankEvent("begin", run))
        return run

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
        key = (st.owner, st.rank_stream)
        pending = self._pending.get(key)
        if pending is None:
            self._pending[key] = (st.run, [piece])
        else:
            pending[1].append(piece)

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
                cut = _map_start(data, nl)
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
        if st.run is not None and self.on_event is not None:
            stream = "stdout" if st.channel == STDOUT else "stderr"
            text = data.decode("utf-8", "replace")
            self.on_event(RankEvent("launcher", st.run, stream=stream, text=text))

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
        self._keep_launcher(st, line)

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

    def _keep_launcher(self, st: _Stream, line: bytes) -> None:
        text = line.decode("utf-8", "replace")
        stream = "stdout" if st.channel == STDOUT else "stderr"
        if self._launcher_kept < LAUNCHER_KEEP:
            self._launcher_kept += len(line)
            self.output.launcher_lines.append((stream, text.rstrip("\n")))
        else:
            self.output.launcher_dropped += len(line)
        run = st.run
        if run is not None:
            kept = self._run_launcher.setdefault(run.index, [])
            if sum(map(len, kept)) < LAUNCHER_KEEP:
                kept.append(text)

    def _flush_pending(self) -> None:
        """Hand each rank stream's pieces of this chunk to its buffer and the view."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for (key, channel), (run, pieces) in pending.items():
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
            if self.on_event is not None:
                decoder = self._decoders.get((key, channel))
                if decoder is None:
                    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
                    self._decoders[(key, channel)] = decoder
                text = decoder.decode(data)
                if text:
                    self.on_event(
                        RankEvent(
                            "output",
                            run,
                            rank=key[1],
                            host=out.host,
                            stream="stdout" if channel == STDOUT else "stderr",
                            text=text,
                        )
                    )
        if self.limit is not None and self._memory > self.limit:
            self._spill()

    def _spill(self) -> None:
        """Over the budget: the largest in-memory buffers go to spill files."""
        buffers = sorted(
            (
                (b.in_memory, key, ch, b)
                for key, out in self.output.ranks.items()
                for ch, b in out._buffers.items()
                if b.in_memory
            ),
            key=lambda t: -t[0],
        )
        spill_dir = self.spill_dir or default_spill_dir()
        for _size, (_job, rank), ch, buffer in buffers:
            if self.limit is None or self._memory <= self.limit // 2:
                break
            name = "stdout" if ch == STDOUT else "stderr"
            self._memory -= buffer.spill(spill_dir, f"{self.label}-rank{rank}-{name}-")
        release_freed_memory()

    def _finish_run(self, run: MpiRun) -> None:
        """The run is over: the failed rank from the launcher's report."""
        self._runs.pop(run.index, None)
        returncode = run.returncode
        if returncode not in (0, None):
            text = "".join(self._run_launcher.get(run.index, []))
            run.failure = parse_failure(text, run)
            if run.failure is not None:
                run.failure.returncode = returncode
                out = self._rank_output(run.failure.rank)
                if out is not None:
                    run.failure.last_lines = out.last_lines()
                    run.failure.host = run.failure.host or out.host
                if run.failure.rank is not None and not run.failure.host:
                    run.failure.host = run.hosts.get(run.failure.rank, "")
        if self.on_event is not None:
            self.on_event(RankEvent("end", run))

    def _rank_output(self, rank: int | None) -> RankOutput | None:
        if rank is None:
            return None
        return next((o for (_job, r), o in self.output.ranks.items() if r == rank), None)

    def result(self) -> MpiOutput:
        """The per-rank output (call after :meth:`close`); buffers are frozen."""
        for out in self.output.ranks.values():
            out.freeze()
        return self.output


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


# ---------------------------------------------------------------------------- failure reports

# Open MPI 4 (ORTE) and 5 (PRRTE, help-prun.txt [prun:non-zero-exit]): the tool's name first.
_NONZERO = re.compile(
    r"detected that one or more processes exited with non-zero status.*?"
    r"Process name:\s*\[(?:\[[^\]]*\]|[^\],]*),(?P<rank>\d+)\]\s*Exit code:\s*(?P<code>-?\d+)",
    re.S,
)
# [prun:proc-aborted-strsignal] / ORTE's: "... noticed that process rank 1 with PID 0 on node vm
# exited on signal 9 (Killed)."
_SIGNAL = re.compile(
    r"noticed that process rank (?P<rank>\d+) with PID \d+ on node (?P<host>\S+) exited on "
    r"signal (?P<sig>\d+)(?: \((?P<name>[^)]*)\))?"
)
# [prun:proc-ordered-abort] / [prun:proc-exit-no-sync]
_ABORT = re.compile(
    r"has exited due to process rank (?P<rank>\d+) with PID \d+ on\s+node (?P<host>\S+) "
    r"(?P<how>calling \"abort\"|exiting improperly)"
)
# Hydra: "=   RANK 3 PID 1234 RUNNING AT host" (newer) or "=   PID 1234 RUNNING AT host" (4.0),
# then "=   KILLED BY SIGNAL: 9 (Killed)", "=   EXIT STATUS: 3" or "=   EXIT CODE: 9".
_HYDRA = re.compile(
    r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\s*\n=\s+(?:RANK (?P<rank>\d+) )?"
    r"PID \d+ RUNNING AT (?P<host>\S+)\s*\n=\s+(?:KILLED BY SIGNAL: (?P<sig>\d+)"
    r"(?: \((?P<name>[^)]*)\))?|EXIT (?:CODE|STATUS): (?P<code>-?\d+))"
)
_HYDRA_STRING = re.compile(r"EXIT STRING: (?P<name>.*?) \(signal (?P<sig>\d+)\)")


def parse_failure(text: str, run: MpiRun) -> RankFailure:
    """The first failed rank from the launcher's own report (its lines in ``text``); a
    failure naming no rank when the launcher said nothing (Open MPI prints no report when every
    rank failed at once; Hydra none for a plain non-zero exit)."""
    found: list[tuple[int, RankFailure]] = []
    m = _NONZERO.search(text)
    if m:
        found.append((m.start(), RankFailure(int(m["rank"]), exit_code=int(m["code"]), how="exit")))
    m2 = _SIGNAL.search(text)
    if m2:
        failure = RankFailure(int(m2["rank"]), host=m2["host"], signal=int(m2["sig"]), how="signal")
        failure.signal_name = m2["name"] or ""
        found.append((m2.start(), failure))
    m3 = _ABORT.search(text)
    if m3:
        found.append((m3.start(), RankFailure(int(m3["rank"]), host=m3["host"], how="abort")))
    m4 = _HYDRA.search(text)
    if m4:
        rank = int(m4["rank"]) if m4["rank"] else _only_rank_on(run, m4["host"])
        failure = RankFailure(rank, host=m4["host"])
        if m4["sig"]:
            failure.signal, failure.signal_name, failure.how = (
                int(m4["sig"]),
                m4["name"] or "",
                "signal",
            )
        else:
            code = int(m4["code"])
            string = _HYDRA_STRING.search(text)
            if string and int(string["sig"]) == code:  # 4.0: the raw wait status of a signal
                failure.signal, failure.signal_name, failure.how = code, string["name"], "signal"
            else:
                failure.exit_code, failure.how = code, "exit"
        found.append((m4.start(), failure))
    if not found:
        return RankFailure(None, launcher=run.launcher)
    failure = min(found, key=lambda t: t[0])[1]
    failure.launcher = run.launcher
    return failure


def _only_rank_on(run: MpiRun, host: str) -> int | None:
    """The rank that ran on ``host`` when it is the only one there (Hydra 4.0 names a pid and
    a host, not a rank)."""
    ranks = [r for r, h in run.hosts.items() if h == host]
    return ranks[0] if len(ranks) == 1 else None


# ------------------------------------------------------------------------------ the world check

HOSTFILE_HINT = "pass --hostfile /etc/mpi/hostfile"
OMPI5_ORTE_CAUSE = (
    "likely cause: Open MPI 5 does not read the OMPI_MCA_orte_* variables the runtime sets, so "
    "the hostfile was never read (kubeflow/trainer#4028)"
)
NOT_READ_CAUSE = "likely cause: the hostfile was not read"


@dataclass(frozen=True)
class JobPod:
    """A pod of the job, as the world check matches hosts to it."""

    name: str
    hostname: str = ""  # spec.hostname (JobSet sets it), else ''


def pod_matcher(pods: Iterable[JobPod]) -> Callable[[str], str]:
    """host -> pod name: the pod whose name or ``spec.hostname`` is the host's first label, or
    whose name is that label plus the pod's random suffix; '' when none is."""
    pods = list(pods)

    def pod_of(host: str) -> str:
        label = host.split(".", 1)[0]
        for p in pods:
            if label in (p.name, p.hostname):
                return p.name
        hits = [p.name for p in pods if p.name.rsplit("-", 1)[0] == label]
        return hits[0] if len(hits) == 1 else ""

    return pod_of


def world_warning(run: MpiRun, pods: Sequence[JobPod]) -> str:
    """One line when the ranks ran on fewer pods than the job has (or a count of ranks other
    than asked), naming the pods used and unused and the likely cause; '' otherwise."""
    if run.returncode is None or not run.hosts or not pods:
        return ""
    pod_of = pod_matcher(pods)
    host_pods = {h: pod_of(h) for h in set(run.hosts.values())}
    used = sorted({p for p in host_pods.values() if p})
    expected = [p.name for p in pods]
    if run.hostfile:  # the pods in the job's hostfile are the MPI hosts (not a non-node launcher)
        named = {pod_of(h) for h in run.hostfile}
        if named - {""}:
            expected = [p for p in expected if p in named]
    unused = [p for p in expected if p not in used]
    ranks = len(run.world)
    asked = run.np if run.np is not None else sum(run.hostfile.values()) or None
    # the job map names every rank; tags only those that printed
    known = run.map_read or (asked is not None and ranks >= asked)
    slots_used = sum(s for h, s in run.hostfile.items() if pod_of(h) in used) or len(used)
    fewer_pods = known and bool(unused) and (run.np is None or ranks > slots_used)
    other_count = asked is not None and (ranks > asked or (run.map_read and ranks != asked))
    if run.hostfile_arg and run.np is None:
        other_count = False  # the user's own hosts decide how many ranks run
    if not fewer_pods and not other_count:
        return ""
    if run.hostfile_arg and not other_count:
        return ""  # the user chose the hosts
    what = []
    if fewer_pods:
        what.append(f"{ranks} rank{'s' if ranks != 1 else ''} ran on {len(used)} of the job's "
                    f"{len(expected)} pods")  # fmt: skip
    if other_count:
        what.append(f"{ranks} ranks ran where {asked} were asked")
    cause = NOT_READ_CAUSE
    if run.impl == OPENMPI5 and "orte" in run.env and "prte" not in run.env:
        cause = OMPI5_ORTE_CAUSE
    fix = "" if run.hostfile_arg else f"; {HOSTFILE_HINT}"
    strangers = sorted(f"host {h} (no pod of the job)" for h, p in host_pods.items() if not p)
    names = f"used: {', '.join(used + strangers)}; unused: {', '.join(unused) or 'none'}"
    return f"warning: {' and '.join(what)} ({names}); {cause}{fix}"


def job_pods(pods: Iterable[Mapping[str, Any]]) -> list[JobPod]:
    """:class:`JobPod` rows from pod objects (dicts as the API returns them)."""
    rows = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        if meta.get("deletionTimestamp"):
            continue
        rows.append(JobPod(str(meta.get("name") or ""), str(spec.get("hostname") or "")))
    return rows


__all__ = [
    "HYDRA",
    "OPENMPI4",
    "OPENMPI5",
    "RANKS_SCRIPT",
    "JobPod",
    "MpiOutput",
    "MpiRun",
    "OnRankEvent",
    "RankDemux",
    "RankEvent",
    "RankFailure",
    "RankOutput",
    "job_pods",
    "new_token",
    "parse_failure",
    "pod_matcher",
    "ranked_argv",
    "wants_ranks",
    "world_warning",
]


# ------------------------------------------------------------------- an exec's streams, untagged


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
        from .output import OutputBuffer

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
        from ..result import ExecResult

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
        from ..result import ExecResult

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
