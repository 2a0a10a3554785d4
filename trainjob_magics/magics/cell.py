"""``%%trainjob``: run the cell body in the trainer pod (or several pods) with live output.

The engine does the work and owns interrupts and partial output: ``session.start`` returns a
``CommandRun``; this module shows its events, and on Ctrl-C asks the run for the error to raise
(which carries the output so far). Nothing here keeps output of its own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..engine import (
    CommandInterruptedError,
    CommandRun,
    MultiExecResult,
    PodGoneError,
    TrainJobGoneError,
)
from .failures import TrainJobCellError, TrainJobMagicError, TrainJobUsageError
from .host import MagicsHost
from .options import check_positive, check_var, chosen_session
from .outcomes import learn_from_cell, learn_from_cell_error
from .registry import Entry, session_name
from .views.live import panel_ref
from .views.ranks import RanksWidgetView, ranks_summary_text
from .views.text import NullOutputView, footer_text
from .worker import Pump, join_text


class QuietPodsView:
    """Per-pod view of ``--quiet``: shows nothing."""

    def write(self, pod: str, stream: str, text: str) -> None:
        pass

    def tick(self) -> None:
        pass

    def pod_done(self, pod: str, result: Any, error: BaseException | None) -> None:
        pass

    def finish(self, summary: str, ok: bool = True, interrupted: bool = False) -> None:
        pass


def run_cell(host: MagicsHost, args: Any, cell: str) -> None:
    """Check the options, run the body, keep the result; raise when the cell should fail."""
    for var, opt in ((args.out, "--out"), (args.err, "--err"), (args.result, "--result")):
        check_var(var, opt)
    check_positive(args.timeout, "--timeout")
    if not cell.strip():
        raise TrainJobUsageError("the cell is empty: write the shell commands below %%trainjob")
    entry = host.entry(chosen_session(args))  # one line if it was stopped for being idle
    session = entry.session
    _run_in(host, args, cell, entry, session)


def _run_in(host: MagicsHost, args: Any, cell: str, entry: Entry, session: Any) -> None:
    pump = Pump()
    pods = args.pod.strip() if args.pod and args.pod.strip() != "trainer" else None
    try:
        session.api_retry_seconds = host.settings.api_retry_seconds
        run = session.start(
            ["sh", "-c", cell],
            pods=pods,
            container=args.container,
            timeout=args.timeout,
            on_output=lambda pod, stream, text: pump.emit("out", pod, stream, text),
            on_done=lambda pod, result, error: pump.emit("done", pod, result, error),
            on_notice=lambda line: pump.emit("note", "", line),
            **rank_options(host, args, pump),
        )
    except Exception as exc:
        learn_from_cell_error(entry, exc)  # e.g. preempted, or the job ended
        if isinstance(exc, TrainJobGoneError):
            raise TrainJobMagicError(gone_line(host, entry, exc)) from None
        raise
    view = _view(host, run, args)
    key_cell_panel(view, session)
    raises = bool(host.settings.raise_on_error and not args.no_raise_error)
    if isinstance(view, SinglePodView):
        view.raises = raises
    result, error = follow(run, pump, view, raises=raises)
    learn_from_cell(entry, result, _engine_error(error))
    if isinstance(error, TrainJobGoneError):
        raise TrainJobMagicError(gone_line(host, entry, error)) from None
    if result is not None:
        store(host, result, args)
    if error is not None:
        raise error
    if raises:
        failure = failure_line(result)
        if failure:
            raise TrainJobCellError(failure, result)


def rank_options(host: MagicsHost, args: Any, pump: Pump) -> dict[str, Any]:
    """Per-rank output of mpirun (engine/exec/ranks.py), unless turned off. With widgets the
    ranks' live text goes to the cell's thread as ``rank`` events (the ranks' panel); as text,
    the output streams as mpirun prints it and the ranks' summary follows."""
    settings = host.settings
    live = host.use_widgets() and not args.quiet
    return {
        "ranks": bool(getattr(settings, "rank_output", True) and not args.no_ranks),
        "world_check": bool(getattr(settings, "world_check", True) and not args.no_world_check),
        "on_ranks": (lambda event: pump.emit("rank", "", event)) if live else None,
    }


def gone_line(host: MagicsHost, entry: Entry, error: TrainJobGoneError) -> str:
    """The one line of a cell whose session's TrainJob was deleted by someone else (the
    sidebar, kubectl): what happened, and the magic that starts a new session. The session is
    forgotten, so that magic can take its name again."""
    session = entry.session
    when = f" at {error.at:%H:%M:%S}" if error.at is not None else ""
    runtime = str(getattr(session, "runtime", "") or "RUNTIME")
    alias = "" if entry.alias == "default" else f" --as {entry.alias}"
    if host.registry.find(entry.alias) is entry:
        host.registry.remove(entry.alias)
    return (
        f"TrainJob {session_name(session)} of session {entry.alias!r} is gone, {error.why}{when}: "
        f"start a new session with %trainjob_connect {runtime}{alias} (and the options you used)"
    )


def _engine_error(error: BaseException | None) -> BaseException | None:
    """The engine's error behind what the cell raises (a user's interrupt or a non-zero exit
    say nothing about the job)."""
    return None if isinstance(error, TrainJobCellError) else error


def _view(host: MagicsHost, run: CommandRun, args: Any) -> Any:
    if run.multi:
        if args.quiet:
            return QuietPodsView()
        where = f"{args.result or '_trainjob'}[pod].stdout"
        return host.pods_view(
            [(r.name, r.label if r.role != "trainer" else "") for r in run.pods], where
        )
    if args.quiet:
        return SinglePodView(NullOutputView())
    where = f"{args.result or '_trainjob'}.stdout / .stderr"
    if not host.use_widgets():
        return SinglePodView(host.output_view(where), rank_summary=True)
    return SinglePodView(host.output_view(where), ranks=lambda name: _ranks_view(host, name))


def _ranks_view(host: MagicsHost, launcher: str) -> Any:
    """The ranks' panel (views/ranks.py)."""
    return RanksWidgetView(launcher, live_summary=True, **host.view_limits("_trainjob"))


def key_cell_panel(view: Any, session: Any) -> None:
    """The cell's panel, once frozen, carries its TrainJob's name and uid (views/live.py): where
    the lab extension runs, the job's live state shows above the output, which stays static."""
    display = getattr(getattr(view, "view", view), "display", None)
    if display is not None:
        display.panel = panel_ref(
            "cell",
            session_name(session),
            str(getattr(session, "namespace", "") or ""),
            str(getattr(session, "job_uid", "") or ""),
        )


class SinglePodView:
    """The single-pod output view behind the per-pod event interface the run emits; the ranks
    of an ``mpirun`` in it get a view of their own (``ranks(launcher)`` makes it)."""

    def __init__(
        self, view: Any, ranks: Callable[[str], Any] | None = None, rank_summary: bool = False
    ) -> None:
        self.view = view
        self.make_ranks = ranks
        self.rank_summary = rank_summary  # text: the ranks' summary after the output
        self.ranks: Any = None
        self.raises = False  # the cell's error will say why it failed (else the view does)

    def write(self, pod: str, stream: str, text: str) -> None:
        self.view.write(stream, text)

    def rank(self, event: Any) -> None:
        """Live text of a tagged mpirun (engine/exec/ranks.py's RankEvent)."""
        if self.ranks is None and self.make_ranks is not None:
            self.ranks = self.make_ranks(event.run.launcher)
        if self.ranks is not None:
            self.ranks.event(event)

    def pod_done(self, pod: str, result: Any, error: BaseException | None) -> None:
        pass

    def tick(self) -> None:
        self.view.tick()
        if self.ranks is not None:
            self.ranks.tick()

    def finish_result(self, result: Any, extra: str = "", interrupted: bool = False) -> None:
        """Footer of a single-pod cell (saying the ranks were tagged, when they were); the
        hidden-lines note names the spill file, if any; then the ranks' view ends."""
        self.view.output_path = getattr(result, "stdout_path", None)
        ok = bool(getattr(result, "ok", False)) and not extra
        mpi = getattr(result, "mpi", None)
        notes = " · ".join([extra, *mpi.notes()] if mpi is not None else [extra])
        footer = footer_text(result.returncode, result.duration, result.pod, notes.strip(" ·"))
        self.finish_ranks(mpi, interrupted)
        self.view.finish(footer, ok=ok, interrupted=interrupted)
        if mpi is not None and self.rank_summary:
            summary = ranks_summary_text(mpi, interrupted)
            if summary:
                print(summary, flush=True)
        if mpi is not None:
            for line in mpi.warnings:  # the world check: after the footer, before any error
                print(line, file=sys.stderr, flush=True)
            if mpi.failure is not None and not self.raises:  # the cell's last line
                print(mpi.failure.line(), file=sys.stderr, flush=True)

    def finish_ranks(self, mpi: Any, interrupted: bool = False) -> None:
        if self.ranks is None:
            return
        self.ranks.settle(mpi, interrupted)
        ok = mpi is not None and mpi.failure is None and not interrupted
        self.ranks.finish("", ok=ok, interrupted=interrupted)


def follow(
    run: CommandRun, pump: Pump, view: Any, raises: bool = False
) -> tuple[Any, BaseException | None]:
    """Show the run's events until it ends; returns (result or partial, error to raise).

    ``raises``: a failed multi-pod result will fail the cell, whose error names the failed
    pods, so the view does not say it a second time.
    """

    def handle(kind: str, pod: str, *rest: Any) -> None:
        if kind == "out":
            view.write(pod, *rest)
        elif kind == "note":  # e.g. "API server unreachable, retrying": shown, not output
            print(rest[0], file=sys.stderr, flush=True)
        elif kind == "rank":  # a tagged mpirun's text (views/ranks.py)
            getattr(view, "rank", lambda event: None)(rest[0])
        else:
            view.pod_done(pod, *rest)

    try:
        result = pump.run(lambda emit: run.result(), handle, view.tick, join_text)
    except KeyboardInterrupt:
        pump.cancel()
        error = run.interrupt()
        _finish(view, error.partial, "interrupted", interrupted=True)
        return error.partial, TrainJobCellError(str(error), error.partial)
    except TrainJobGoneError as exc:  # nothing ran: no footer (no exit code, no time); the
        _finish(view, None, "")  # cell's one line says what happened
        return None, exc
    except Exception as exc:
        partial = getattr(exc, "partial", None)
        cause = getattr(exc, "cause", "") if isinstance(exc, PodGoneError) else ""
        _finish(view, partial, f"pod {cause}" if cause else type(exc).__name__)
        if isinstance(exc, CommandInterruptedError):
            return partial, TrainJobCellError(str(exc), partial)
        return partial, exc
    _finish(view, result, raises=raises)
    return result, None


def _finish(
    view: Any, result: Any, extra: str = "", interrupted: bool = False, raises: bool = False
) -> None:
    if isinstance(view, SinglePodView):
        if result is not None:
            view.finish_result(result, extra, interrupted)
        else:
            view.view.finish(extra, ok=False, interrupted=interrupted)
    elif isinstance(result, MultiExecResult) and not extra:
        said_by_the_error = raises and not result.ok
        view.finish("" if said_by_the_error else multi_summary(result), ok=result.ok)
    else:
        view.finish(extra or "failed", ok=False, interrupted=interrupted)


def multi_summary(result: Any) -> str:
    """``4 pods ok · 2.00 s`` (durations as the footers write them), or the failed pods."""
    if not result.ok:
        return result.summary()
    n = len(result)
    return f"{n} pod{'s' if n != 1 else ''} ok · {result.duration:.2f} s"


def failure_line(result: Any) -> str:
    """Why a finished cell fails (empty when it succeeded)."""
    if isinstance(result, MultiExecResult):
        return "" if result.ok else result.summary()
    if result.returncode == 0:
        return ""
    pod = f" (pod {result.pod})" if result.pod else ""
    if result.returncode is None:
        return f"remote command ended without an exit status{pod}"
    note = f": {result.note}" if getattr(result, "note", "") else ""
    line = f"remote command exited with code {result.returncode}{pod}{note}"
    failure = getattr(getattr(result, "mpi", None), "failure", None)
    return f"{line}; {failure.line()}" if failure is not None else line


def store(host: MagicsHost, result: Any, args: Any) -> None:
    """Keep the result reachable: ``_trainjob``, ``last_result()``, --out/--err/--result.

    For several pods ``_trainjob``/--result get the ``MultiExecResult`` and --out/--err dicts
    pod -> text.
    """
    host.last_result = result
    ns = host.user_ns()
    ns["_trainjob"] = result
    per_pod = isinstance(result, MultiExecResult)
    if args.out:
        ns[args.out] = {p: r.stdout for p, r in result.items()} if per_pod else result.stdout
    if args.err:
        ns[args.err] = {p: r.stderr for p, r in result.items()} if per_pod else result.stderr
    if args.result:
        ns[args.result] = result


__all__ = ["key_cell_panel", "run_cell"]
