"""``%%trainjob --python``, ``%trainjob_push``, ``%trainjob_pull``, ``%trainjob_python_reset``.

The engine runs the code in the pods' persistent interpreters (``session.start_python``) and
owns interrupts; this module shows the run's output in the shell cells' views, shows the value
(rich forms through IPython's display) and turns a remote exception into the cell's error,
whose traceback is the remote one.
"""

from __future__ import annotations

from typing import Any

from IPython.display import display

from ..engine import MultiPythonResult, PythonResult, PythonRun, RemoteError
from .cell import QuietPodsView, SinglePodView, key_cell_panel, multi_summary
from .failures import TrainJobCellError, TrainJobUsageError
from .host import MagicsHost
from .options import check_positive, check_var, chosen_session
from .outcomes import learn_from_cell, learn_from_cell_error
from .views.text import NullOutputView
from .worker import Pump

RED = "\x1b[0;31m"
RESET = "\x1b[0m"


class RemoteValue:
    """The last expression's value, as the remote interpreter rendered it (``Out[n]``)."""

    def __init__(self, data: dict[str, str]) -> None:
        self.data = dict(data)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return dict(self.data)

    def __repr__(self) -> str:
        return self.data.get("text/plain", "")


class RemotePythonCellError(TrainJobCellError):
    """A ``--python`` cell whose code raised: shown as the remote traceback."""

    def __init__(self, message: str, result: Any, sections: list[tuple[str, RemoteError]]):
        super().__init__(message, result)
        self.sections = sections

    def _render_traceback_(self) -> list[str]:
        lines: list[str] = []
        for header, error in self.sections:
            if header:
                lines.append(header)
            text = error.traceback.rstrip("\n") or error.line()
            body = text.split("\n")
            if body and body[-1].startswith(error.type):
                body[-1] = f"{RED}{error.type}{RESET}{body[-1][len(error.type) :]}"
            lines += body
        return lines


def _pods_arg(args: Any) -> str | None:
    return args.pod.strip() if args.pod and args.pod.strip() != "trainer" else None


def _session(host: MagicsHost, args: Any) -> Any:
    return host.entry(chosen_session(args)).session


def run_cell(host: MagicsHost, args: Any, cell: str) -> Any:
    """Run the body in the pods' interpreters; returns the value to show as ``Out``."""
    for var, opt in ((args.out, "--out"), (args.err, "--err"), (args.result, "--result")):
        check_var(var, opt)
    check_positive(args.timeout, "--timeout")
    if not cell.strip():
        raise TrainJobUsageError(
            "the cell is empty: write the Python code below %%trainjob --python"
        )
    entry = host.entry(chosen_session(args))
    session = entry.session
    pump = Pump()
    try:
        run = session.start_python(
            cell,
            pods=_pods_arg(args),
            container=args.container,
            timeout=args.timeout,
            interpreter=host.settings.python,
            on_output=lambda pod, stream, text: pump.emit("out", pod, stream, text),
            on_done=lambda pod, result, error: pump.emit("done", pod, result, _why(result, error)),
        )
    except Exception as exc:
        learn_from_cell_error(entry, exc)  # e.g. preempted, or the job ended
        raise
    view = _view(host, run, args)
    key_cell_panel(view, session)
    result, error = _follow(run, pump, view)
    learn_from_cell(entry, result, error)
    if result is not None:
        _store(host, result, args)
    if error is not None:
        raise error
    return _show(host, result, args)


class RemoteException(Exception):
    """A pod's remote exception, for the per-pod footer (``ZeroDivisionError: ...``)."""


def _why(result: Any, error: BaseException | None) -> BaseException | None:
    """What a pod's footer shows: the exec's error, else the code's exception."""
    if error is None and isinstance(result, PythonResult) and result.error is not None:
        named = type(result.error.type, (RemoteException,), {})
        return named(result.error.message)
    return error


def _view(host: MagicsHost, run: PythonRun, args: Any) -> Any:
    where = f"{args.result or '_trainjob'}"
    if run.multi:
        if args.quiet:
            return QuietPodsView()
        pods = [(r.name, r.label if r.role != "trainer" else "") for r in run.pods]
        return host.pods_view(pods, f"{where}[pod].stdout")
    return _SingleView(NullOutputView() if args.quiet else host.output_view(f"{where}.stdout"))


class _SingleView(SinglePodView):
    """The shell cell's single-pod adapter, finished with a summary line (no exit code)."""

    def finish(self, summary: str, ok: bool = True, interrupted: bool = False) -> None:
        self.view.finish(summary, ok=ok, interrupted=interrupted)


def _follow(run: PythonRun, pump: Pump, view: Any) -> tuple[Any, BaseException | None]:
    """Show the run's events until it ends; (result or partial, error to raise)."""

    def handle(kind: str, pod: str, *rest: Any) -> None:
        if kind == "out":
            view.write(pod, *rest)
        else:
            view.pod_done(pod, *rest)

    try:
        result = pump.run(lambda emit: run.result(), handle, view.tick)
    except KeyboardInterrupt:
        pump.cancel()
        error = run.interrupt()
        view.finish(_footer(error.partial, "interrupted"), ok=False, interrupted=True)
        return error.partial, TrainJobCellError(str(error), error.partial)
    except Exception as exc:
        partial = getattr(exc, "partial", None)
        view.finish(_footer(partial, type(exc).__name__), ok=False)
        return partial, exc
    view.finish(_footer(result), ok=result.ok)
    return result, None


def _footer(result: Any, extra: str = "") -> str:
    """``python · 0.05 s · pod p`` (or the error), for one pod or several."""
    if isinstance(result, MultiPythonResult):
        return extra or multi_summary(result)
    parts = []
    if isinstance(result, PythonResult):
        parts.append(result.error.type if result.error else "python")
        parts.append(f"{result.duration:.2f} s")
        if result.pod:
            parts.append(f"pod {result.pod}")
    if extra:
        parts.append(extra)
    return " · ".join(parts)


def _results(result: Any) -> list[tuple[str, PythonResult]]:
    """(label, result) per pod; the label is empty for a single pod."""
    if isinstance(result, MultiPythonResult):
        return [(result.labels.get(p) or p, r) for p, r in result.items()]
    return [("", result)]


def _show(host: MagicsHost, result: Any, args: Any) -> Any:
    """Notes, the value(s), and the cell's failure when the code raised."""
    pods = _results(result)
    for label, one in pods:
        for note in one.notes:
            print(f"[{label}] {note}" if label else note)
    errors = [(label, one, one.error) for label, one in pods if one.error is not None]
    raise_it = host.settings.raise_on_error and not args.no_raise_error
    if errors and raise_it:
        raise _cell_error(result, errors)
    for label, _, error in errors:
        text = error.traceback or error.line()
        print((f"[{label}]\n" if label else "") + text.rstrip("\n"))
    if args.quiet:
        return None
    if isinstance(result, MultiPythonResult):
        for label, one in pods:
            if one.data:
                display(_labelled(label, one.data), raw=True)
        return None
    return RemoteValue(result.data) if result.data else None


def _labelled(label: str, data: dict[str, str]) -> dict[str, str]:
    out = dict(data)
    out["text/plain"] = f"[{label}] {data.get('text/plain', '')}"
    if "text/html" in data:
        out["text/html"] = f"<div><b>{label}</b></div>{data['text/html']}"
    return out


def _cell_error(
    result: Any, errors: list[tuple[str, PythonResult, RemoteError]]
) -> RemotePythonCellError:
    """``errors``: (label, the pod's result, its error) of each pod whose code raised."""
    _, first, error = errors[0]
    where = f"pod {first.pod}" if len(errors) == 1 else f"{len(errors)} pods"
    message = f"{error.line()} (in {where})"
    sections = [(f"[{label}]" if label else "", err) for label, _, err in errors]
    return RemotePythonCellError(message, result, sections)


def _store(host: MagicsHost, result: Any, args: Any) -> None:
    """``_trainjob`` and --out/--err/--result, as shell cells keep theirs."""
    host.last_result = result
    ns = host.user_ns()
    ns["_trainjob"] = result
    multi = isinstance(result, MultiPythonResult)
    if args.out:
        ns[args.out] = {p: r.stdout for p, r in result.items()} if multi else result.stdout
    if args.err:
        ns[args.err] = {p: r.stderr for p, r in result.items()} if multi else result.stderr
    if args.result:
        ns[args.result] = result


# -- push, pull, reset ----------------------------------------------------------------------


def _where(pods: list[str]) -> str:
    return f"pod {pods[0]}" if len(pods) == 1 else f"{len(pods)} pods"


def push(host: MagicsHost, args: Any) -> None:
    """``%trainjob_push NAME...``: the notebook's variables into the interpreters."""
    ns = host.user_ns()
    missing = [n for n in args.names if n not in ns]
    if missing:
        raise TrainJobUsageError(f"no variable {missing[0]!r} in the notebook to push")
    session = _session(host, args)
    pods = session.push(
        {n: ns[n] for n in args.names},
        pods=_pods_arg(args),
        interpreter=host.settings.python,
    )
    print(f"pushed {', '.join(args.names)} to {_where(pods)}")


def pull(host: MagicsHost, args: Any) -> None:
    """``%trainjob_pull NAME...``: values of the interpreters into the notebook."""
    session = _session(host, args)
    got = session.pull(*args.names, pods=_pods_arg(args), interpreter=host.settings.python)
    ns = host.user_ns()
    spec = _pods_arg(args)
    if spec is not None and len(got) == 1 and spec != "all" and "," not in spec:
        got = next(iter(got.values()))  # one pod named: its value, not a dict
        spec = None
    if spec is not None:
        for i, name in enumerate(args.names):
            ns[name] = {
                pod: (value if len(args.names) == 1 else value[i]) for pod, value in got.items()
            }
        where = f"{len(got)} pods (a dict pod -> value each)"
    else:
        values = [got] if len(args.names) == 1 else list(got)
        for name, value in zip(args.names, values, strict=True):
            ns[name] = value
        where = "the pod" if _pods_arg(args) else f"pod {session.pod}"
    print(f"pulled {', '.join(args.names)} from {where}")


def reset(host: MagicsHost, args: Any) -> None:
    """``%trainjob_python_reset``: new interpreters, every name gone."""
    session = _session(host, args)
    pods = session.python_reset(pods=_pods_arg(args), interpreter=host.settings.python)
    print(f"restarted the Python interpreter in {_where(pods)}: its state is gone")


__all__ = ["RemoteValue", "pull", "push", "reset", "run_cell"]
