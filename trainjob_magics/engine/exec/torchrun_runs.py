"""A tagged ``torchrun`` run: what its begin marker says (:mod:`.torchrun_prelude`), the tag its
lines carry, and which rank a tag names.

The tag is the one torchrun's ``--tee`` writes before each line it copies from a worker's file
(torch/distributed/elastic/multiprocessing/tail_log.py):

- ``template`` (torch >= 2.3, the prelude's ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``):
  ``\\x1e{rank}:{local_rank}\\x1f``, the global rank as the agent assigned it;
- ``default``: ``[{role}{local_rank}]:``. The global rank then follows from the local rank only
  with a static rendezvous, where the agent's group rank is the node rank and each node's ranks
  follow those of the nodes before it (torch/distributed/elastic/agent/server/api.py,
  ``_get_ranks``: the sum of the lower group ranks' local world sizes, plus the local rank):
  ``node_rank * nproc_per_node + local_rank`` when every node runs as many workers, known here
  for one node, or when this node's count is the job's ``PET_NPROC_PER_NODE`` (Trainer's torch
  plugin gives every node of the job the same ``PET_NNODES``, ``PET_NPROC_PER_NODE``,
  ``PET_NODE_RANK``, ``PET_MASTER_ADDR``/``PORT``: kubeflow/trainer
  pkg/runtime/framework/plugins/torch/torch.go). Otherwise (c10d or etcd rendezvous, a range of
  nodes, another count than the job's) the ranks are the local ranks, and the run says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .marker_demux import int_word
from .output import SpillDir
from .ranks_model import TAIL_BYTES, MpiRun, RankOutput

TORCHRUN = "torchrun"  # MpiRun.impl of a torchrun run
TEMPLATE, DEFAULT = "template", "default"
OPTION = "--tee 3"


@dataclass
class TorchRun(MpiRun):
    """One ``torchrun`` of the command, tagged by the engine (an :class:`MpiRun` for the result,
    the footer and the ranks' panel)."""

    form: str = DEFAULT  # TEMPLATE or DEFAULT
    role: str = "default"
    torch_version: str = ""
    host: str = ""  # the pod's hostname, as the prelude read it
    pod: str = ""  # the pod the command ran in
    node_rank: int | None = None  # the rank offset's parts, when the global rank is known
    nproc: int | None = None
    why_local: str = ""  # why the ranks are local ranks ('' when they are global)

    @property
    def option(self) -> str:
        return OPTION

    @property
    def global_ranks(self) -> bool:
        return not self.why_local

    def note(self) -> str:
        """The footer's words: how the ranks were tagged and what their numbers are."""
        head = f"ranks tagged by {self.launcher} {OPTION}"
        if self.form == TEMPLATE:
            return head + " (global ranks from TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)"
        if self.global_ranks and self.node_rank:
            return head + f" (rank = node rank {self.node_rank} * {self.nproc} + local rank)"
        if self.global_ranks:
            return head
        torch = f"torch {self.torch_version}" if self.torch_version else "this torch"
        return (
            f"local ranks tagged by {self.launcher} {OPTION} ({torch}'s prefix has no global "
            f"rank; {self.why_local})"
        )

    def pattern(self) -> bytes:
        """The tag's regex (groups ``rank`` and ``local``; the default form has no ``rank``)."""
        if self.form == TEMPLATE:
            return rb"\x1e(?P<rank>\d+):(?P<local>\d+)\x1f"
        return rb"\[" + re.escape(self.role.encode()) + rb"(?P<local>\d+)\]:"

    def records(self) -> tuple[bytes, bytes, bytes]:
        """Regexes of whole tagged lines: a run of them, the tag alone, and a line after a tag
        (its group). A line holds no tag start, nor anything a marker starts with."""
        if self.form == TEMPLATE:
            tag, line = rb"\x1e\d+:\d+\x1f", rb"[^\n\x1e]*+\n"
        else:
            tag = rb"\[" + re.escape(self.role.encode()) + rb"\d+\]:"
            plain = rb"[^\n\[\x1e]*+"
            line = plain + rb"(?:\[(?!" + tag[2:] + b")" + plain + rb")*+\n"
        return b"(?:" + tag + line + b")++", tag, b"(" + line + b")"

    def is_tag_prefix(self, tail: bytes) -> bool:
        """``tail`` (the end of a chunk) may be the start of a tag cut there."""
        if self.form == TEMPLATE:
            return re.fullmatch(rb"\x1e(?:\d*|\d+:\d*)", tail) is not None
        head = b"[" + self.role.encode()
        if len(tail) <= len(head):
            return head.startswith(tail)
        return tail.startswith(head) and re.fullmatch(rb"\d*|\d+\]", tail[len(head) :]) is not None

    def rank_of(self, rank: bytes | None, local: int) -> int:
        """The rank a tag names: its global rank when known, else the local rank."""
        if rank is not None:
            return int(rank)
        if self.global_ranks and self.node_rank is not None and self.nproc is not None:
            return self.node_rank * self.nproc + local
        return local


def torch_run(words: list[str], *, pod: str) -> TorchRun:
    """The run a ``tbegin`` marker's words describe: ``N FORM ROLE BACKEND NNODES NODE_RANK
    NPROC JOB_NPROC NPROC_GIVEN LAUNCHER VERSION HOST`` ('-': not plain, or not known)."""
    words = words + ["-"] * (12 - len(words))
    n, form, role, backend, nnodes, node_rank, nproc, job_nproc, given, launcher, ver, host = words[
        :12
    ]
    run = TorchRun(
        index=int_word(n) or 0,
        launcher=launcher if launcher != "-" else TORCHRUN,
        impl=TORCHRUN,
        form=TEMPLATE if form == TEMPLATE else DEFAULT,
        role=role,
        torch_version="" if ver == "-" else ver,
        host="" if host == "-" else host,
        pod=pod,
    )
    if run.form == DEFAULT:
        run.node_rank, run.nproc, run.why_local = global_rank_rule(
            backend, nnodes, node_rank, nproc, job_nproc, given == "1"
        )
    return run


def global_rank_rule(
    backend: str, nnodes: str, node_rank: str, nproc: str, job_nproc: str, given: bool
) -> tuple[int | None, int | None, str]:
    """(node rank, workers per node, '') when ``node_rank * nproc + local_rank`` is each
    worker's global rank under the default prefix; else (None, None, why it is not known)."""
    lo, _, hi = nnodes.partition(":")
    nodes = int_word(lo)
    if hi and int_word(hi) != nodes:
        nodes = None
    rank, count = int_word(node_rank), int_word(nproc)
    if backend != "static":
        return None, None, f"{backend} rendezvous"
    if nodes is None or rank is None or rank >= nodes:
        return None, None, "nodes or node rank not fixed"
    if count is None:
        return None, None, "workers per node not fixed"
    if nodes > 1 and given and nproc != job_nproc:
        return None, None, "--nproc-per-node may differ between nodes"
    if nodes > 1 and not given and job_nproc == "-":
        return None, None, "other nodes' worker counts unknown"
    return rank, count, ""


class TorchRankOutput(RankOutput):
    """A rank's output of a torchrun run (its ``local_rank`` too), filled by
    :class:`~.torchrun_demux.TorchDemux`."""

    def __init__(self, rank: int, local_rank: int, host: str = "", pod: str = "") -> None:
        super().__init__(rank, host=host)
        self.local_rank = local_rank
        self.pod = pod

    def take(self, channel: int, data: bytes) -> bool:
        """Add ``data`` to the channel's stream; True when it stays in memory."""
        buffer = self._buffers[channel]
        buffer.add(data)
        self.tail += data[-TAIL_BYTES:]
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]
        return not buffer.spilled

    def in_memory(self) -> list[tuple[int, int]]:
        """(channel, bytes in memory) of each stream still in memory."""
        return [(ch, b.in_memory) for ch, b in self._buffers.items() if b.in_memory]

    def spill(self, channel: int, spill_dir: SpillDir, prefix: str) -> int:
        """Move the channel's bytes to a spill file; the bytes of memory given up."""
        return self._buffers[channel].spill(spill_dir, prefix)


__all__ = [
    "DEFAULT",
    "TEMPLATE",
    "TORCHRUN",
    "TorchRankOutput",
    "TorchRun",
    "global_rank_rule",
    "torch_run",
]
