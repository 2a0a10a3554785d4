"""``%%trainjob``: run the cell body in the trainer pod (or several pods) with live output."""

from __future__ import annotations

import time
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


def partial_result(stdout: list[str], stderr: list[str], started: float, pod: str) -> Any:
    """An ``ExecResult`` without exit code from the output received so far."""
    from trainjob_magics.engine.result import ExecResult

    out, err = "".join(stdout), "".join(stderr)
    return ExecResult(
        stdout=out,
        stderr=err,
        returncode=None,
        duration=time.monotonic() - started,
        stdout_bytes=out.encode("utf-8", "replace"),
        stderr_bytes=err.encode("utf-8", "replace"),
        pod=pod,
    )


def run_exec(entry: Entry, cell: str, args: Any, view: Any) -> tuple[Any, BaseException | None]:
    """Run the body; returns (result, error to raise) with the view finished."""
    session = entry.session
    started = time.monotonic()
    got: dict[str, list[str]] = {"stdout": [], "stderr": []}

    def work(emit: Callable[..., None]) -> Any:
        return session.execute(
            ["sh", "-c", cell],
            container=args.container,
            timeout=args.timeout,
            on_output=lambda stream, text: emit(stream, text),
        )

    def handle(stream: str, text: str) -> None:
        got.setdefault(stream, []).append(text)
        view.write(stream, text)

    pump = Pump()
    pod = str(getattr(session, "trainer_pod", None) or getattr(session, "pod", None) or "")
    try:
        result = pump.run(work, handle, view.tick)
    except KeyboardInterrupt:
        pump.cancel()
        message = interrupt_remote(session, pod)
        partial = partial_result(got["stdout"], got["stderr"], started, pod)
        view.finish(footer_text(None, partial.duration, partial.pod, "interrupted"), ok=False)
        return partial, TrainJobCellError(message, partial)
    except Exception as exc:
        partial = getattr(exc, "partial", None)
        if partial is None:
            partial = partial_result(got["stdout"], got["stderr"], started, pod)
        view.finish(footer_text(None, partial.duration, partial.pod, type(exc).__name__), ok=False)
        return partial, as_one_line(exc)
    view.finish(footer_text(result.returncode, result.duration, result.pod), ok=result.ok)
    return result, None


def interrupt_remote(session: Any, pod: str) -> str:
    """Stop the session's remote commands (SIGINT, SIGTERM, SIGKILL); one line saying how."""
    where = f" (pod {pod})" if pod else ""
    fallback = f"interrupted: stopped reading; the remote command may still be running{where}"
    interrupt = getattr(session, "interrupt", None)
    if interrupt is None:
        return fallback
    try:
        reports = interrupt()
    except Exception as exc:
        return f"{fallback}; stopping it failed: {type(exc).__name__}: {exc}"
    if not isinstance(reports, list):
        return f"interrupted: sent an interrupt to the remote command{where}"
    from trainjob_magics.engine.lifeline import interrupted_message

    return interrupted_message(pod, reports)


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
    return PrefixedTextView(pods)


def run_multi_cell(magics: TrainJobMagics, entry: Entry, cell: str, args: Any) -> None:
    """``%%trainjob --pod TARGET``: run the body on every target pod, grouped output per pod.

    The cell fails (naming the pods) when any pod failed, unless --no-raise-error.
    """
    from trainjob_magics.engine import jobops
    from trainjob_magics.engine.fanout import run_on_pods

    session = entry.session
    try:
        targets = jobops.commands(session, jobops.resolve(session, args.pod), args.container)
    except Exception as exc:
        raise as_one_line(exc) from None
    where = f"{args.result or '_trainjob'}[pod].stdout"
    pods = [(t.pod, t.label) for t in targets]
    view = _QuietView() if args.quiet else multi_view(magics, pods, where)

    def work(emit: Callable[..., None]) -> Any:
        return run_on_pods(
            session._exec,
            session.namespace,
            targets,
            ["sh", "-c", cell],
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
        view.finish("interrupted", ok=False)
        raise TrainJobCellError(
            f"interrupted: stopped reading; the command may still be running on {len(targets)} "
            "pod(s)"
        ) from None
    except Exception as exc:
        view.finish(type(exc).__name__, ok=False)
        raise as_one_line(exc) from None
    view.finish(result.summary(), ok=result.ok)
    store(magics, result, args, per_pod=True)
    if not result.ok and magics.raise_on_error and not args.no_raise_error:
        raise TrainJobCellError(result.summary(), result)
