"""The world check: one warning line when an ``mpirun``'s ranks ran on fewer of the job's pods
than it has (or another count of ranks than asked), and the hosts' pods (:func:`pod_matcher`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .ranks_model import OPENMPI5, MpiRun

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
    "HOSTFILE_HINT",
    "NOT_READ_CAUSE",
    "OMPI5_ORTE_CAUSE",
    "JobPod",
    "job_pods",
    "pod_matcher",
    "world_warning",
]
