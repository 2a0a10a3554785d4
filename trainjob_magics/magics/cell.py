"""``%%trainjob``: run the cell body in the trainer pod (or several pods) with live output."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .arguments import check_positive, check_var, chosen_session
from .errors import TrainJobCellError, TrainJobUsageError, as_one_line
from .multipod_output import PrefixedTextView, TabbedWidgetView
from .text_output import NullOutputView, TextOutputView, footer_text
from .worker import Pump

if TYPE_CHECKING:
    from .magics import TrainJobMagics
    from .registry import Entry

_LAST: list[Any] = [None]


def last_result() -> Any:
    """The ``ExecResult`` of the last ``%%trainjob`` cell in this process (None before)."""
    return _LAST[0]


def run_cell(magics: TrainJobMagics, args: Any, cell: str) -> None:
    """Check the options, run the body, keep the result; raise when the cell should fail."""
    for var, opt in ((args.out, "--out"), (args.err, "--err"), (args.result, "--result")):
        check_var(var, opt)
    check_positive(args.timeout, "--timeout")
    if not cell.strip():
        raise TrainJobUsageError("the cell is empty: write the shell commands below %%trainjob")
    entry = magics.entry(chosen_session(args))
    if args.pod and args.pod.strip() != "trainer":
        run_multi_cell(magics, entry, cell, args)
        return
    where = f"{args.result or '_trainjob'}.stdout / .stderr"
    view = NullOutputView() if args.quiet else output_view(magics, where)
    result, error = run_exec(entry, cell, args, view)
    store(magics, result, args)
    if error is not None:
        raise error
    if result.returncode != 0 and magics.raise_on_error and not args.no_raise_error:
        pod = f" (pod {result.pod})" if result.pod else ""
        if result.returncode is None:
            msg = f"remote command ended without an exit status{pod}"
        else:
            msg = f"remote command exited with code {result.returncode}{pod}"
        raise TrainJobCellError(msg, result)


def _view_limits(magics: TrainJobMagics, where: str) -> dict[str, Any]:
    return {
        "max_lines": magics.display_max_lines,
        "max_line_chars": magics.display_max_line_chars,
        "interval": magics.update_interval,
        "where": where,
    }


def output_view(magics: TrainJobMagics, where: str) -> Any:
    """A widget output view, or streamed text where no widget front end is present."""
    if magics.use_widgets():
        from .widgets_output import WidgetOutputView

        return WidgetOutputView(**_view_limits(magics, where))
    return TextOutputView(**_view_limits(magics, where))


INTERRUPT_WAIT = 2.0  # seconds to wait for the stopped command's result after Ctrl-C
TAIL_CHARS = 64 << 10  # characters per stream kept for a partial result the engine did not give


class OutputTail:
    """The last ``limit`` characters of each stream (chunks, so adding is cheap)."""

    def __init__(self, limit: int = TAIL_CHARS) -> None:
        self.limit = limit
        self.chunks: dict[str, deque[str]] = {"stdout": deque(), "stderr": deque()}
        self.sizes = {"stdout": 0, "stderr": 0}

    def add(self, stream: str, text: str) -> None:
        chunks = self.chunks.setdefault(stream, deque())
        chunks.append(text)
        size = self.sizes.get(stream, 0) + len(text)
        while len(chunks) > 1 and size - len(chunks[0]) >= self.limit:
            size -= len(chunks.popleft())
        self.sizes[stream] = size

    def text(self, stream: str) -> str:
        return "".join(self.chunks.get(stream, ()))[-self.limit :]


def partial_result(tail: OutputTail, started: float, pod: str) -> Any:
    """An ``ExecResult`` without exit code from the end of the output received so far."""
    from ..engine.result import ExecResult

    return ExecResult(
        stdout=tail.text("stdout"),
        stderr=tail.text("stderr"),
        returncode=None,
        duration=time.monotonic() - started,
        pod=pod,
    )


def stopped_result(pump: Pump, wait: float = INTERRUPT_WAIT) -> Any:
    """The engine's result of a command stopped after Ctrl-C: what it returned, or the
    ``.partial`` of what it raised; None when it did not end within ``wait`` seconds."""
    try:
        if not pump.join(wait):
            return None
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
        return None
    if pump.error is not None:
        return getattr(pump.error, "partial", None)
    return pump.value


def run_exec(entry: Entry, cell: str, args: Any, view: Any) -> tuple[Any, BaseException | None]:
    """Run the body; returns (result, error to raise) with the view finished."""
    session = entry.session
    started = time.monotonic()
    tail = OutputTail()

    def work(emit: Callable[..., None]) -> Any:
        return session.execute(
            ["sh", "-c", cell], container=args.container, timeout=args.timeout, on_output=emit
        )

    def handle(stream: str, text: str) -> None:
        tail.add(stream, text)
        view.write(stream, text)

    pump = Pump()
    pod = str(getattr(session, "trainer_pod", None) or getattr(session, "pod", None) or "")
    try:
        result = pump.run(work, handle, view.tick)
    except KeyboardInterrupt:
        pump.cancel()
        message, stopped = interrupt_remote(session, pod)
        partial = stopped_result(pump) if stopped else None
        if partial is None:
            partial = partial_result(tail, started, pod)
        finish(view, partial, "interrupted", interrupted=True)
        return partial, TrainJobCellError(message, partial)
    except Exception as exc:
        partial = getattr(exc, "partial", None)
        if partial is None:
            partial = partial_result(tail, started, pod)
        finish(view, partial, type(exc).__name__)
        return partial, as_one_line(exc)
    finish(view, result)
    return result, None


def finish(view: Any, result: Any, extra: str = "", interrupted: bool = False) -> None:
    """Footer of a single-pod cell; the hidden-lines note names the spill file, if any."""
    view.output_path = getattr(result, "stdout_path", None)
    ok = result.ok and not extra
    footer = footer_text(result.returncode, result.duration, result.pod, extra)
    view.finish(footer, ok=ok, interrupted=interrupted)


def interrupt_remote(session: Any, pod: str) -> tuple[str, bool]:
    """Stop the session's remote commands (SIGINT, SIGTERM, SIGKILL): one line saying how,
    and whether a command was stopped (so its result is on its way)."""
    where = f" (pod {pod})" if pod else ""
    fallback = f"interrupted: stopped reading; the remote command may still be running{where}"
    interrupt = getattr(session, "interrupt", None)
    if interrupt is None:
        return fallback, False
    try:
        reports = interrupt()
    except Exception as exc:
        return f"{fallback}; stopping it failed: {type(exc).__name__}: {exc}", False
    if not isinstance(reports, list):
        return f"interrupted: sent an interrupt to the remote command{where}", False
    from ..engine.exec.commands import interrupted_message

    return interrupted_message(pod, reports), any(r.stopped for r in reports)


def store(magics: TrainJobMagics, result: Any, args: Any, per_pod: bool = False) -> None:
    """Keep the result reachable: ``_trainjob``, ``last_result()``, --out/--err/--result.

    For several pods ``_trainjob``/--result get the ``MultiExecResult`` and --out/--err dicts
    pod -> text.
    """
    _LAST[0] = result
    ns = magics.shell.user_ns if magics.shell is not None else {}
    ns["_trainjob"] = result
    if args.out:
        ns[args.out] = {p: r.stdout for p, r in result.items()} if per_pod else result.stdout
    if args.err:
        ns[args.err] = {p: r.stderr for p, r in result.items()} if per_pod else result.stderr
    if args.result:
        ns[args.result] = result


# ------------------------------------------------------------------ %%trainjob --pod


class _QuietView:
    """Per-pod view of ``--quiet``: shows nothing."""

    def write(self, pod: str, stream: str, text: str) -> None:
        pass

    def tick(self) -> None:
        pass

    def pod_done(self, pod: str, result: Any, error: BaseException | None) -> None:
        pass

    def finish(self, summary: str, ok: bool = True) -> None:
        pass


def multi_view(magics: TrainJobMagics, pods: list[tuple[str, str]], where: str) -> Any:
    """Tab per pod (widgets) or prefixed lines (text)."""
    if magics.use_widgets():
        return TabbedWidgetView(pods, **_view_limits(magics, where))
    return PrefixedTextView(pods, max_line_chars=magics.display_max_line_chars)


def run_multi_cell(magics: TrainJobMagics, entry: Entry, cell: str, args: Any) -> None:
    """``%%trainjob --pod TARGET``: run the body on every target pod, grouped output per pod.

    Ctrl-C stops the command on every pod. The cell fails (naming the pods) when any pod
    failed, unless --no-raise-error.
    """
    from ..engine import jobops

    session = entry.session
    try:
        targets = jobops.commands(session, session.pods(args.pod), args.container)
    except Exception as exc:
        raise as_one_line(exc) from None
    where = f"{args.result or '_trainjob'}[pod].stdout"
    view = (
        _QuietView()
        if args.quiet
        else multi_view(magics, [(t.pod, t.label) for t in targets], where)
    )

    def work(emit: Callable[..., None]) -> Any:
        return session.execute(
            ["sh", "-c", cell],
            pods=[t.pod for t in targets],
            container=args.container,
            timeout=args.timeout,
            on_output=lambda pod, stream, text: emit("out", pod, stream, text),
            on_done=lambda pod, result, error: emit("done", pod, result, error),
        )

    def handle(kind: str, pod: str, *rest: Any) -> None:
        if kind == "out":
            view.write(pod, *rest)
        else:
            view.pod_done(pod, *rest)

    pump = Pump()
    try:
        result = pump.run(work, handle, view.tick)
    except KeyboardInterrupt:
        pump.cancel()
        message, stopped = interrupt_pods(session, len(targets))
        partial = stopped_result(pump) if stopped else None
        view.finish("interrupted", ok=False, interrupted=True)
        if partial is not None:
            store(magics, partial, args, per_pod=True)
        raise TrainJobCellError(message, partial) from None
    except Exception as exc:
        view.finish(type(exc).__name__, ok=False)
        raise as_one_line(exc) from None
    view.finish(result.summary(), ok=result.ok)
    store(magics, result, args, per_pod=True)
    if not result.ok and magics.raise_on_error and not args.no_raise_error:
        raise TrainJobCellError(result.summary(), result)


def interrupt_pods(session: Any, n: int) -> tuple[str, bool]:
    """Stop the session's remote commands on every pod: one line saying how, and whether
    a command was stopped."""
    from ..engine.exec.stop import stop_summary

    where = f"on {n} pod{'s' if n != 1 else ''}"
    try:
        reports = session.interrupt()
    except Exception as exc:
        return (
            f"interrupted: stopped reading; the command may still be running {where}; "
            f"stopping it failed: {type(exc).__name__}: {exc}"
        ), False
    return "interrupted: " + stop_summary(where, reports), any(r.stopped for r in reports)
