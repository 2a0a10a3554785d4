"""The forms the launchers write: each launcher's tag (:data:`TAGS`, and the start of one cut at
a chunk's end: :data:`TAG_PREFIXES`), and Open MPI 4's job map (:data:`MAP_LINE`).

Where the formats come from (recorded outputs in ``tests/unit/data/mpi``): Open MPI 4.1.4
(Debian's ``openmpi-bin``) and MPICH 4.0.2's Hydra (Debian's ``mpich``), run on this machine;
Open MPI 5 from its sources: PMIx v5.0.6 ``src/common/pmix_iof.c`` (the tags).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .ranks_model import HYDRA, OPENMPI4, OPENMPI5


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


def map_start(data: bytes, nl: int) -> int:
    """Where a job map begins in ``data``, at or before its first newline (``nl``); -1."""
    found = -1
    for start in MAP_STARTS:
        i = data.find(start)
        if i >= 0 and (nl < 0 or i <= nl) and (found < 0 or i < found):
            found = i
    return found


__all__ = [
    "MAP_LINE",
    "MAP_STARTS",
    "MAX_TAG",
    "TAGS",
    "TAG_PREFIXES",
    "TAG_START",
    "TAG_STARTS",
    "map_start",
]
