"""The failed rank of a ``torchrun`` run, from torchrun's own report.

When a worker fails, torchrun's agent raises ``ChildFailedError``, whose text (printed with the
agent's traceback on its stderr) ends with the root cause, the first failure observed
(torch/distributed/elastic/multiprocessing/errors/__init__.py, ``_MSG_FORMAT_TEMPLATE`` and
``_FAILURE_FORMAT_TEMPLATE``, the same in 1.13 and 2.6)::

    Root Cause (first observed failure):
    [0]:
      time      : 2026-12-07_18:22:54
      host      : node-0.job
      rank      : 2 (local_rank: 2)
      exitcode  : 3 (pid: 22819)
      error_file: <N/A>
      traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
    ============================================================

``exitcode`` is negative for a signal (``traceback : Signal 9 (SIGKILL) received by PID 1``);
``traceback`` is the worker's Python traceback (indented by two spaces) when its entry point
recorded one in its error file (``@record``). Without the report (torchrun stopped before it:
a usage error, an interrupt), the agent's ``failed (exitcode: N) local_rank: L (pid: P)`` log line
names the local rank (torch/distributed/elastic/multiprocessing/api.py); else no rank is named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .ranks_model import RankFailure
from .torchrun_runs import TorchRun

ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):\s*\n\[\d+\]:\s*\n"
    r"\s*time\s*: [^\n]*\n"
    r"\s*host\s*: (?P<host>[^\n]*)\n"
    r"\s*rank\s*: (?P<rank>-?\d+) \(local_rank: (?P<local>-?\d+)\)\s*\n"
    r"\s*exitcode\s*: (?P<code>-?\d+) \(pid: [^\n]*\)\s*\n"
    r"\s*error_file: (?P<file>[^\n]*)\n"
    r"\s*traceback : (?P<message>.*?)\n=+[ \t]*(?:\n|$)",
    re.S,
)
FAILED_LINE = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid:")
SIGNAL_MESSAGE = re.compile(r"Signal (?P<sig>\d+) \((?P<name>\w+)\) received by PID")
NO_TRACEBACK = "To enable traceback see"


@dataclass
class TorchFailure(RankFailure):
    """The root cause torchrun reported. ``rank`` is the key of the failed rank in
    ``by_rank`` (its global rank, or its local rank when the run's ranks are local);
    ``global_rank``/``local_rank`` are the report's; ``cause`` its traceback's last line."""

    global_rank: int | None = None
    local_rank: int | None = None
    cause: str = ""
    local_only: bool = False  # the run's ranks are local ranks

    def line(self) -> str:
        """``torchrun: rank 2 (local rank 2, pod x) failed first: exit code 3; root cause:
        ValueError: bad; last lines: a | b``."""
        if self.rank is None and self.local_rank is None:
            return super().line()
        who = f"rank {self.global_rank}" if self.global_rank is not None else "a rank"
        place = [f"local rank {self.local_rank}"] if self.local_rank is not None else []
        if self.pod or self.host:
            place.append(f"pod {self.pod}" if self.pod else f"host {self.host}")
        head = f"{self.launcher}: {who} ({', '.join(place)}) failed first: "
        if self.signal is not None:
            name = f" ({self.signal_name})" if self.signal_name else ""
            head += f"killed by signal {self.signal}{name}"
        elif self.exit_code is not None:
            head += f"exit code {self.exit_code}"
        else:
            head += "ended abnormally"
        if self.cause:
            head += f"; root cause: {self.cause}"
        if self.last_lines:
            head += "; last lines: " + " | ".join(self.last_lines)
        return head


def parse_report(text: str, run: TorchRun) -> TorchFailure:
    """The root cause from torchrun's report in its own lines ``text``; the agent's ``failed``
    line when there is no report; a failure naming no rank when there is neither."""
    failure = TorchFailure(None, launcher=run.launcher, local_only=not run.global_ranks)
    m = ROOT_CAUSE.search(text)
    if m is not None:
        failure.global_rank, failure.local_rank = int(m["rank"]), int(m["local"])
        code = int(m["code"])
        failure.host = m["host"].strip()
        message = [ln.strip() for ln in m["message"].splitlines() if ln.strip()]
        signal = SIGNAL_MESSAGE.search(message[0]) if message else None
        if code < 0:
            failure.signal, failure.how = -code, "signal"
            failure.signal_name = signal["name"] if signal else ""
        else:
            failure.exit_code, failure.how = code, "exit"
        if message and NO_TRACEBACK not in message[0] and signal is None:
            failure.cause = message[-1]
    else:
        m2 = FAILED_LINE.search(text)
        if m2 is None:
            return failure
        failure.local_rank, code = int(m2["local"]), int(m2["code"])
        if code < 0:
            failure.signal, failure.how = -code, "signal"
        else:
            failure.exit_code, failure.how = code, "exit"
        if run.global_ranks and run.form != "template":
            failure.global_rank = run.rank_of(None, failure.local_rank)
    if failure.local_only or failure.global_rank is None:
        failure.rank = failure.local_rank
    else:
        failure.rank = failure.global_rank
    return failure


__all__ = ["TorchFailure", "parse_report"]
