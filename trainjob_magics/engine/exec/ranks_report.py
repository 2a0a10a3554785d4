"""The failed rank of an ``mpirun``/``mpiexec`` run, from the launcher's own report.

Where the reports come from (recorded outputs in ``tests/unit/data/mpi``): Open MPI 4.1.4 and
MPICH 4.0.2's Hydra, run on this machine; Open MPI 5 from PRRTE v3.0.6
``src/docs/show-help-files/help-prun.rst``.
"""

from __future__ import annotations

import re

from .ranks_model import MpiRun, RankFailure

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


__all__ = ["parse_failure"]
