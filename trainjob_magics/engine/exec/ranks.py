"""Per-rank output of ``mpirun``/``mpiexec`` in a cell: the launcher's own tagging, undone.

The names the engine and the tests use, from the modules that do the work:

- :mod:`.ranks_prelude`: the POSIX-sh prelude that adds the launcher's tagging option and its
  marker lines (:data:`RANKS_SCRIPT`), and the argv that runs a command under it;
- :mod:`.ranks_model`: each rank's output, a run, its failed rank, a command's per-rank output,
  the live events;
- :mod:`.ranks_tags`: the launchers' tags and Open MPI 4's job map;
- :mod:`.marker_demux`: the chunk walk mpirun's and torchrun's demuxes share;
- :mod:`.ranks_demux`: :class:`RankDemux`, the markers and tags taken out of the streams;
- :mod:`.ranks_report`: the failed rank from the launcher's own report;
- :mod:`.ranks_world`: the world check's warning;
- :mod:`.ranks_streams`: an exec's streams untagged (:class:`RankedStreams`).
"""

from __future__ import annotations

from .marker_demux import LAUNCHER as LAUNCHER
from .marker_demux import LAUNCHER_KEEP as LAUNCHER_KEEP
from .marker_demux import MAX_MARKER as MAX_MARKER
from .ranks_demux import SHARED_PIECE as SHARED_PIECE
from .ranks_demux import RankDemux
from .ranks_model import (
    HYDRA,
    OPENMPI4,
    OPENMPI5,
    MpiOutput,
    MpiRun,
    OnRankEvent,
    RankEvent,
    RankFailure,
    RankOutput,
)
from .ranks_model import STDERR as STDERR
from .ranks_model import STDOUT as STDOUT
from .ranks_model import TAIL_BYTES as TAIL_BYTES
from .ranks_prelude import CALLS_LAUNCHER as CALLS_LAUNCHER
from .ranks_prelude import RANKS_SCRIPT, new_token, ranked_argv, wants_ranks
from .ranks_report import parse_failure
from .ranks_streams import RankedStreams, RankOptions
from .ranks_tags import MAP_LINE as MAP_LINE
from .ranks_tags import MAP_STARTS as MAP_STARTS
from .ranks_tags import MAX_TAG as MAX_TAG
from .ranks_tags import TAG_PREFIXES as TAG_PREFIXES
from .ranks_tags import TAG_START as TAG_START
from .ranks_tags import TAG_STARTS as TAG_STARTS
from .ranks_tags import TAGS as TAGS
from .ranks_world import HOSTFILE_HINT as HOSTFILE_HINT
from .ranks_world import NOT_READ_CAUSE as NOT_READ_CAUSE
from .ranks_world import OMPI5_ORTE_CAUSE as OMPI5_ORTE_CAUSE
from .ranks_world import JobPod, job_pods, pod_matcher, world_warning

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
    "RankOptions",
    "RankOutput",
    "RankedStreams",
    "job_pods",
    "new_token",
    "parse_failure",
    "pod_matcher",
    "ranked_argv",
    "wants_ranks",
    "world_warning",
]
