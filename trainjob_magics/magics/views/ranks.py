"""The ranks of an ``mpirun`` cell shown as ``--pod all`` shows pods (engine/exec/ranks.py gives
the data: :class:`RankEvent` objects while it runs).

- Text (no widgets): the output streams as mpirun prints it; after the footer, the ranks'
  summary (:func:`ranks_summary_text`): a row per rank or group of alike ranks, failed first.
- Widgets: the per-pod panel (:class:`MultiPodWidgetView`) with one entry per rank, added as
  ranks first print, plus the launcher's: the summary folds identical output, the failed rank
  comes first and is selected, each rank's lines are apart in the dropdown; frozen to static
  HTML (and the same text) when the cell ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .pod_summary import ENDED, FAILED, OK, RUNNING
from .pods import MultiPodWidgetView

LAUNCHER_KEY = "mpirun"


def rank_key(rank: int) -> str:
    return f"rank {rank}"


def rank_label(rank: int, host: str) -> str:
    """``rank 2 · node-1`` (the host's first label)."""
    short = host.split(".", 1)[0] if host else ""
    return f"rank {rank} · {short}" if short else f"rank {rank}"


class RanksWidgetView(MultiPodWidgetView):
    """The per-pod panel over ranks: starts with the launcher's entry, a rank's entry appears
    when it first prints (or when the job map names it)."""

    TAB_LIMIT = -1  # always the dropdown: ranks come and go in number
    UNIT = "rank"

    def __init__(self, launcher: str = "mpirun", **kwargs: Any) -> None:
        kwargs.setdefault("where", "_trainjob.by_rank[rank].stdout")
        super().__init__([(LAUNCHER_KEY, f"{launcher} (launcher)")], **kwargs)
        self._make: Callable[[], Any] = lambda: None
        self._limits = {
            k: kwargs[k] for k in ("max_lines", "max_line_chars", "interval") if k in kwargs
        }

    def add(self, rank: int, host: str) -> str:
        key = rank_key(rank)
        label = rank_label(rank, host)
        if key in self.views:
            if self.labels[key] != label:
                self.labels[key] = label
                self._set_titles()
            return key
        from .output import WidgetOutputView

        self.views[key] = WidgetOutputView(where=self.where, show=False, **self._limits)
        self.labels[key] = label
        self.state[key], self.code[key], self.duration[key] = RUNNING, "running", None
        self._set_titles()
        return key

    def outcomes(self) -> list[Any]:
        """The launcher's outcome, then the ranks' in rank order (not in the order they
        first printed)."""

        return sorted(super().outcomes(), key=lambda o: _order(o.pod))

    def _options(self) -> list[tuple[str, str]]:
        """The dropdown's entries: the failed rank first, then the launcher, then the ranks in
        rank order (not in the order they first printed: 9, 10, 8, ...)."""
        return sorted(super()._options(), key=lambda o: (self.state[o[1]] != FAILED, _order(o[1])))

    def counts(self, outcomes: list[Any]) -> str:
        """``4 ranks · 3 ✓ · 1 ✗ · mpirun ok``: the ranks counted apart from the launcher."""
        from .pod_summary import counts_line

        ranks = [o for o in outcomes if o.pod != LAUNCHER_KEY]
        launcher = next((o for o in outcomes if o.pod == LAUNCHER_KEY), None)
        line = counts_line(ranks, self.UNIT)
        return line + (f" · {launcher.label.split(' ')[0]} {launcher.code}" if launcher else "")

    def event(self, event: Any) -> None:
        if event.kind == "begin":
            for rank, host in sorted(event.run.hosts.items()):
                self.add(rank, host)
        elif event.kind == "output" and event.rank is not None:
            self.write(self.add(event.rank, event.host), event.stream, event.text)
        elif event.kind == "launcher":
            self.write(LAUNCHER_KEY, event.stream, event.text)
        elif event.kind == "end":
            for rank, host in sorted(event.run.hosts.items()):
                self.add(rank, host)
            self.tick()

    def settle(self, mpi: Any, interrupted: bool = False) -> None:
        """Every rank's outcome from the launcher's report: the failed rank ✗ (selected), the
        others ✓ when the run succeeded, else ended (mpirun stopped them)."""
        failure = mpi.failure if mpi is not None else None
        ok = mpi is not None and all(r.returncode == 0 for r in mpi.runs)
        for key, view in self.views.items():
            rank = None if key == LAUNCHER_KEY else int(key.split()[1])
            out = mpi.by_rank.get(rank) if mpi is not None and rank is not None else None
            if out is not None and out.pod:
                self.labels[key] = rank_label(rank or 0, out.pod)
            if failure is not None and rank is not None and rank == failure.rank:
                mark, code = FAILED, _how(failure)
            elif interrupted:
                mark, code = ENDED, "interrupted"
            elif ok:
                mark, code = OK, "exit 0" if key != LAUNCHER_KEY else "ok"
            else:
                mark, code = ENDED, "ended"
            self.state[key], self.code[key] = mark, code
            self._outcomes = True
            view.output_path = out.stdout_path if out is not None else None
            view.finish(f"{code} · {self.labels[key]}", ok=mark != FAILED)
            if mark == FAILED and not self._chose_failed:
                self._chose_failed = True
                self._select(key)
        self._set_titles()
        self._render_overview()


def ranks_summary_text(mpi: Any, interrupted: bool = False) -> str:
    """The ranks as text, after a cell's plain output (no widgets): one row per rank, or per
    group of ranks whose output ended alike, the failed rank first, with its last line."""
    from .pod_summary import PodOutcome, summary_text

    failure = mpi.failure
    ok = all(r.returncode == 0 for r in mpi.runs)
    outcomes = []
    for rank, out in mpi.by_rank.items():
        if failure is not None and rank == failure.rank:
            mark, code = FAILED, _how(failure)
        elif interrupted:
            mark, code = ENDED, "interrupted"
        else:
            mark, code = (OK, "exit 0") if ok else (ENDED, "ended")
        last = tuple(("stdout", line) for line in out.last_lines(1))
        label = rank_label(rank, out.pod or out.host)
        # alike: the same outcome, last line and size (``hidden`` carries the size here, so
        # that the grouping needs no rank's whole output, which may be in a spill file)
        outcomes.append(PodOutcome(f"rank {rank}", label, mark, code, lines=last, hidden=out.size))
    if not outcomes:
        return ""
    n = len(outcomes)
    failed = sum(o.mark == FAILED for o in outcomes)
    head = f"{n} rank{'s' if n != 1 else ''}" + (f" · {failed} ✗" if failed else "")
    return summary_text(outcomes, head, unit="rank")


def _order(key: str) -> tuple[int, int]:
    """The launcher's entry first, then the ranks by number (2 before 10)."""
    return (-1, 0) if key == LAUNCHER_KEY else (0, int(key.split()[1]))


def _how(failure: Any) -> str:
    if failure.signal is not None:
        return f"signal {failure.signal}"
    if failure.exit_code is not None:
        return f"exit {failure.exit_code}"
    return "failed"


__all__ = ["RanksWidgetView", "rank_label", "ranks_summary_text"]
