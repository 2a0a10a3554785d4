"""``%%trainjob --detach``: start the cell as a run that belongs to the TrainJob, and show
detached runs where the user looks (attach, the end of ``%trainjob_logs --follow``)."""

from __future__ import annotations

import time
from typing import Any

from ..engine import DetachedState, TrainJobError
from .failures import TrainJobUsageError
from .host import MagicsHost
from .options import chosen_session

TAIL_LINES = 10
ATTACH_READS = 3  # tries to read the detached run at attach (0.5 s, then 1 s apart)
END_WAIT = 30.0  # seconds a follow that ended waits for the run's exit code to show


def detach_cell(host: MagicsHost, args: Any, cell: str) -> Any:
    """Start the cell body as the session's detached run; ``_trainjob`` holds its handle."""
    given = [
        opt
        for opt, value in (
            ("--pod", args.pod),
            ("--timeout", args.timeout),
            ("--out", args.out),
            ("--err", args.err),
            ("--python", args.python),
        )
        if value
    ]
    if given:
        raise TrainJobUsageError(
            f"--detach takes no {', '.join(given)}: the run goes to the pods running the "
            "keep-alive (torch: every node; MPI: the launcher), its output to their logs"
        )
    if not cell.strip():
        raise TrainJobUsageError("the cell is empty: write the shell commands below %%trainjob")
    entry = host.entry(chosen_session(args))
    run = entry.session.detach(cell, container=args.container)
    host.last_result = run
    ns = host.user_ns()
    ns["_trainjob"] = run
    if args.result:
        ns[args.result] = run
    if not args.quiet:
        print(
            f"{run.line()}: follow it with %trainjob_logs --follow, or attach from any kernel "
            f"with %trainjob_connect --attach {run.trainjob}"
        )
    return None


def run_text(state: DetachedState, lines: int = TAIL_LINES) -> str:
    """The run's summary line, then its last lines indented."""
    tail = [f"  {line}" for line in state.tail.splitlines()[-lines:]] if lines else []
    return "\n".join([state.summary(), *tail])


def show_after_attach(session: Any) -> None:
    """``%trainjob_connect --attach``: the job's detached run, when it has one."""
    read = getattr(session, "detached", None)  # a queued job's stand-in has none
    if read is None:
        return
    state, error = None, None
    for attempt in range(ATTACH_READS):  # a pod just attached to may refuse an exec a moment
        try:
            state, error = read(lines=TAIL_LINES), None
            break
        except TrainJobError as exc:
            error = exc
            time.sleep(0.5 * (attempt + 1))
    if error is not None:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"Detached run: not read ({first}); follow it with %trainjob_logs --follow")
    elif state is not None:
        print(run_text(state))


def show_after_follow(session: Any) -> None:
    """After ``%trainjob_logs --follow`` ended: how the session's detached run ended (the
    log ends with the container; its exit code shows in the pod status right after)."""
    if getattr(session, "detached_run", None) is None:
        return
    deadline = time.monotonic() + END_WAIT
    state = None
    while time.monotonic() < deadline:
        try:
            state = session.detached(lines=0)
        except TrainJobError:
            break
        if state is None or not state.live:
            break
        time.sleep(0.5)  # the pod status is read again, not waited on: a short poll
    if state is not None:
        print(state.summary())


def detached_mark(session: Any) -> str:
    """`` · detached run N`` for the session list (what this kernel saw; no I/O)."""
    state = getattr(session, "detached_run", None)
    if state is None:
        return ""
    return f" · detached run {state.run}" + ("" if state.live else " (ended)")


__all__ = ["detach_cell", "detached_mark", "show_after_attach", "show_after_follow"]
