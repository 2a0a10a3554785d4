"""The IPython magics: a thin layer over the session engine.

Engine calls run in a worker thread while the cell's thread renders the events they report
(status, output chunks) and stays interruptible; so every display update happens in the cell's
own thread and lands in the right output area.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from . import frontend
from .config import TrainJobConfig
from .registry import (
    Entry,
    SessionRegistry,
    install_hooks,
    session_name,
    set_exit_timeout,
    uninstall_hooks,
)
from .text_output import (
    NullOutputView,
    SessionRow,
    TextOutputView,
    footer_text,
    format_sessions,
    format_status,
)
from .widgets_status import ConnectStatusView

# ------------------------------------------------------------------ errors


class TrainJobMagicError(Exception):
    """A magic failed; IPython shows it as one line, without a traceback, and fails the cell."""

    def _render_traceback_(self) -> list[str]:
        return [one_line(self)]


class TrainJobUsageError(UsageError):
    """Bad magic usage; one line, and (unlike a plain ``UsageError``) a proper error reply."""

    def _render_traceback_(self) -> list[str]:
        return [one_line(self)]


class TrainJobCellError(TrainJobMagicError):
    """A ``%%trainjob`` cell failed (non-zero exit, timeout, interrupt); ``result`` holds output."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


def one_line(exc: BaseException) -> str:
    """``Name: message`` on one line, the name in red (ANSI) as IPython shows errors."""
    msg = " ".join(str(exc).split())
    return f"\x1b[0;31m{type(exc).__name__}\x1b[0m: {msg}"


def as_one_line(exc: BaseException) -> BaseException:
    """Make an engine error render as one line (keeps its type for nbclient's ``ename``)."""
    try:
        exc._render_traceback_ = lambda: [one_line(exc)]  # type: ignore[attr-defined]
    except Exception:
        return TrainJobMagicError(f"{type(exc).__name__}: {exc}")
    return exc


# ------------------------------------------------------------------ last result

_LAST: list[Any] = [None]


def last_result() -> Any:
    """The ``ExecResult`` of the last ``%%trainjob`` cell in this process (None before)."""
    return _LAST[0]


# ------------------------------------------------------------------ engine access


def engine_connect(runtime: str, **kwargs: Any) -> Any:
    """``trainjob_magics.engine.connect`` (imported late; tests may replace this)."""
    from trainjob_magics.engine import connect

    return connect(runtime, **kwargs)


def engine_attach(name: str, **kwargs: Any) -> Any:
    """``trainjob_magics.engine.attach``."""
    from trainjob_magics.engine import attach

    return attach(name, **kwargs)


def engine_delete(
    name: str, namespace: str | None, context: str | None, config_file: str | None
) -> bool:
    """Delete a TrainJob whose connect was interrupted; False when it does not exist (yet)."""
    from trainjob_magics.engine import kubeconfig
    from trainjob_magics.engine.session import delete_trainjob

    api, default_namespace = kubeconfig.load(config_file, context)
    try:
        return delete_trainjob(api, namespace or default_namespace, name)
    finally:
        close = getattr(api, "close", None)
        if close is not None:
            close()


def new_job_name() -> str:
    """A random TrainJob name, chosen here so an interrupted connect can delete its job."""
    from trainjob_magics.engine.trainjob_body import generate_name

    return generate_name()


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


# ------------------------------------------------------------------ pump


class Pump:
    """Runs ``fn(emit)`` in a worker thread; the caller's thread handles what ``emit`` sends.

    ``run`` returns ``fn``'s value or raises its exception. A ``KeyboardInterrupt`` in the
    caller's thread propagates with the worker still running; ``cancel`` then drops its events.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._box: dict[str, Any] = {}
        self.thread: threading.Thread | None = None

    def emit(self, *event: Any) -> None:
        """Queue an event for the caller's thread (dropped after ``cancel``)."""
        if not self.cancelled.is_set():
            self._q.put(event)

    def cancel(self) -> None:
        """Stop delivering events."""
        self.cancelled.set()

    def run(
        self,
        fn: Callable[[Callable[..., None]], Any],
        handle: Callable[..., None],
        tick: Callable[[], None] = lambda: None,
    ) -> Any:
        """Run ``fn`` and pump its events into ``handle`` until it returns."""

        def work() -> None:
            try:
                self._box["value"] = fn(self.emit)
            except BaseException as exc:  # re-raised in the caller's thread
                self._box["error"] = exc
            finally:
                self.done.set()
                self._q.put(None)

        self.thread = threading.Thread(target=work, daemon=True, name="trainjob-magics-worker")
        self.thread.start()
        while True:
            try:
                event = self._q.get(timeout=self.interval)
            except queue.Empty:
                event = None
            while event is not None:
                handle(*event)
                try:
                    event = self._q.get_nowait()
                except queue.Empty:
                    event = None
            tick()
            if self.done.is_set() and self._q.empty():
                break
        if "error" in self._box:
            raise self._box["error"]
        return self._box.get("value")


# ------------------------------------------------------------------ helpers


def parse_env(items: list[list[str]] | None) -> dict[str, str] | None:
    """``[['A=1', 'B=2'], ['C=3']]`` -> ``{'A': '1', ...}``; a bad item is a one-line error."""
    if not items:
        return None
    env: dict[str, str] = {}
    for group in items:
        for item in group:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise TrainJobUsageError(f"--env expects KEY=VALUE, got {item!r}")
            env[key] = value
    return env


def check_var(name: str | None, option: str) -> None:
    """Variable names of --out/--err/--result must be Python identifiers."""
    if name is not None and not name.isidentifier():
        raise TrainJobUsageError(f"{option} expects a Python variable name, got {name!r}")


def parse(fn: Callable[..., Any], line: str) -> Any:
    """``parse_argstring`` with errors turned into one line naming the magic."""
    try:
        return parse_argstring(fn, line)
    except UsageError as exc:
        msg = " ".join(str(exc).split())
        raise TrainJobUsageError(f"%{fn.__name__}: {msg}") from None


def is_live(session: Any) -> bool:
    """Whether a session can still run commands (closed, finished or deleted ones cannot)."""
    if getattr(session, "closed", False):
        return False
    try:
        state = session.status().state
    except Exception as exc:
        return type(exc).__name__ not in ("NotFoundError", "SessionClosedError")
    return state not in ("Complete", "Failed", "Deleted")


# ------------------------------------------------------------------ shared options
# Argument groups shared by magics (as ipyparallel's exec_args): later magics
# (%%trainjob_writefile, %trainjob_logs, --pod targets, Kueue options) reuse or extend them.


def _apply(f: Callable[..., Any], decorators: list[Callable[..., Any]]) -> Callable[..., Any]:
    for d in reversed(decorators):
        f = d(f)
    return f


def cluster_args(f: Callable[..., Any]) -> Callable[..., Any]:
    """--namespace, --context, --kubeconfig."""
    return _apply(
        f,
        [
            argument(
                "--namespace", help="Namespace (default: TrainJobMagics.namespace or kubeconfig)."
            ),
            argument("--context", help="Kubeconfig context (default: the current one)."),
            argument(
                "--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG or ~/.kube/config)."
            ),
        ],
    )


def exec_args(f: Callable[..., Any]) -> Callable[..., Any]:
    """--container, --timeout of a command in the trainer pod."""
    return _apply(
        f,
        [
            argument("--container", help="Container of the trainer pod (default: the trainer's)."),
            argument("--timeout", type=float, help="Seconds before the command is abandoned."),
        ],
    )


def output_args(f: Callable[..., Any]) -> Callable[..., Any]:
    """--out, --err, --result, --no-raise-error, --quiet: where a command's result goes."""
    return _apply(
        f,
        [
            argument(
                "--out", metavar="VAR", help="Store the stdout text in the Python variable VAR."
            ),
            argument(
                "--err", metavar="VAR", help="Store the stderr text in the Python variable VAR."
            ),
            argument(
                "--result", metavar="VAR", help="Store the ExecResult in the Python variable VAR."
            ),
            argument(
                "--no-raise-error",
                action="store_true",
                help="A non-zero exit code does not fail the cell (TrainJobMagics.raise_on_error).",
            ),
            argument("--quiet", action="store_true", help="Do not show the output (still stored)."),
        ],
    )


# ------------------------------------------------------------------ magics


@magics_class
class TrainJobMagics(Magics, TrainJobConfig):
    """Magics for interactive TrainJobs; settings via ``%config TrainJobMagics``."""

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.registry = SessionRegistry()
        set_exit_timeout(self.exit_close_timeout)
        if shell is not None:
            install_hooks(shell, self._close_for)

    # -- plumbing

    def _widgets(self) -> bool:
        return frontend.use_widgets(self.shell, self.widgets)

    def _close_for(self, reason: str) -> None:
        """Close every session (kernel shutdown/restart, %reset, %unload_ext) and report."""
        for rep in self.registry.close_all(timeout=self.exit_close_timeout):
            print(rep.line())

    def _entry(self, alias: str | None) -> Entry:
        """The session ``alias`` (default when None), or a one-line usage error."""
        try:
            return self.registry.get(alias)
        except UsageError as exc:
            raise TrainJobUsageError(str(exc)) from None

    def unload(self) -> None:
        """Close this kernel's sessions and remove the hooks."""
        self._close_for("unload")
        if self.shell is not None:
            uninstall_hooks(self.shell)

    # -- %trainjob_connect

    @magic_arguments()
    @argument(
        "runtime",
        nargs="?",
        metavar="RUNTIME",
        help="Runtime name (default: TrainJobMagics.default_runtime).",
    )
    @argument("--nodes", type=int, help="Number of nodes (default: the runtime's).")
    @argument("--image", help="Container image of the trainer (default: the runtime's).")
    @argument("--cpu", help="CPU per node, a Kubernetes quantity (e.g. 2, 500m).")
    @argument("--memory", help="Memory per node, a Kubernetes quantity (e.g. 8Gi).")
    @argument("--gpu", type=int, help="GPUs (nvidia.com/gpu) per node.")
    @argument(
        "--env",
        nargs="+",
        action="append",
        metavar="K=V",
        help="Environment variables (repeatable).",
    )
    @argument("--name", help="TrainJob name (DNS-1035); default: a random one.")
    @argument("--queue", metavar="LQ", help="Kueue LocalQueue (label kueue.x-k8s.io/queue-name).")
    @argument(
        "--priority",
        metavar="PC",
        help="Kueue WorkloadPriorityClass (label kueue.x-k8s.io/priority-class).",
    )
    @argument(
        "--max-runtime",
        dest="max_runtime",
        metavar="DURATION",
        help="Maximum run time, e.g. 8h, 90m, 3600 (see docs/kueue.md).",
    )
    @cluster_args
    @argument("--timeout", type=float, help="Seconds to wait for the trainer pod (default: 600).")
    @argument(
        "--as",
        dest="alias",
        metavar="ALIAS",
        help="Session name in this kernel (default: the --attach/--name, else 'default').",
    )
    @argument("--attach", metavar="NAME", help="Attach to the existing TrainJob NAME instead.")
    @argument(
        "--replace",
        action="store_true",
        help="Close a live session with the same alias but other settings, then connect.",
    )
    @line_magic
    def trainjob_connect(self, line: str = "") -> None:
        """Create (or attach to) an interactive TrainJob and wait until its trainer pod runs.

        Re-running the same line reuses the live session instead of creating a second TrainJob.
        """
        args = parse(self.trainjob_connect, line)
        settings = self._connect_settings(args)
        alias = args.alias or args.attach or args.name or "default"
        existing = self.registry.find(alias)
        if existing is not None:
            if is_live(existing.session):
                if existing.settings == settings and not args.replace:
                    print(
                        f"Reusing the live session {alias!r} (TrainJob "
                        f"{session_name(existing.session)}); --replace starts a new one."
                    )
                    self._show_status(existing, fetch=True, quiet_errors=True)
                    return
                if not args.replace:
                    raise TrainJobUsageError(
                        f"session {alias!r} is live with other settings: run "
                        f"%trainjob_close {alias} first, add --replace, or pick another --as ALIAS"
                    )
                print(self.registry.close(alias, timeout=self.close_timeout).line())
            else:
                self.registry.remove(alias)
        timeout = args.timeout if args.timeout is not None else self.connect_timeout
        session, widget = self._run_connect(settings, timeout)
        entry = self.registry.add(alias, session, settings)
        entry.status_widget = widget
        pod = getattr(session, "trainer_pod", None) or getattr(session, "pod", None) or "?"
        print(
            f"Session {alias!r} ready: TrainJob {session_name(session)} in namespace "
            f"{getattr(session, 'namespace', '?')}, trainer pod {pod}. "
            "Run commands in %%trainjob cells."
        )

    def _connect_settings(self, args: Any) -> dict[str, Any]:
        """The settings that define a session (compared when a connect line is re-run)."""
        runtime = args.runtime or self.default_runtime or None
        if args.attach and args.runtime:
            raise TrainJobUsageError("give either a RUNTIME or --attach NAME, not both")
        if not args.attach and not runtime:
            raise TrainJobUsageError(
                "no runtime: %trainjob_connect RUNTIME (e.g. mpi-interactive), or set "
                "%config TrainJobMagics.default_runtime = 'NAME'"
            )
        if args.nodes is not None and args.nodes < 1:
            raise TrainJobUsageError(f"--nodes must be at least 1, got {args.nodes}")
        if args.gpu is not None and args.gpu < 0:
            raise TrainJobUsageError(f"--gpu must not be negative, got {args.gpu}")
        if args.timeout is not None and args.timeout <= 0:
            raise TrainJobUsageError(f"--timeout must be positive, got {args.timeout}")
        if args.attach:
            extra = [
                o
                for o in (
                    "nodes",
                    "image",
                    "cpu",
                    "memory",
                    "gpu",
                    "env",
                    "name",
                    "queue",
                    "priority",
                    "max_runtime",
                )
                if getattr(args, o)
            ]
            if extra:
                opts = ", ".join(f"--{o.replace('_', '-')}" for o in extra)
                raise TrainJobUsageError(
                    f"--attach takes the existing TrainJob as it is; drop {opts}"
                )
        return {
            "runtime": None if args.attach else runtime,
            "attach": args.attach,
            "num_nodes": args.nodes,
            "image": args.image,
            "cpu": args.cpu,
            "memory": args.memory,
            "gpu": args.gpu,
            "env": parse_env(args.env),
            "name": args.name,
            "queue": args.queue,
            "priority_class": args.priority,
            "max_runtime": args.max_runtime,
            "namespace": args.namespace or self.namespace or None,
            "context": args.context or self.context or None,
            "config_file": args.kubeconfig or self.kubeconfig or None,
            "command": ["sh", "-c", self.keep_alive_command] if self.keep_alive_command else None,
            "idle_timeout": self.idle_timeout if self.idle_timeout > 0 else None,
        }

    def _run_connect(self, settings: dict[str, Any], timeout: float) -> tuple[Any, Any]:
        """connect()/attach() in a worker thread with the live status shown here.

        Returns the session and its status widget (None in text mode).
        """
        view = ConnectStatusView(self._widgets())
        seen: dict[str, Any] = {}
        common = {
            "namespace": settings["namespace"],
            "context": settings["context"],
            "config_file": settings["config_file"],
            "timeout": timeout,
        }
        keys = ("image", "num_nodes", "command", "cpu", "memory", "gpu", "env", "idle_timeout")
        kueue_keys = ("queue", "priority_class", "max_runtime")
        job_name = None if settings["attach"] else settings["name"] or new_job_name()

        def work(emit: Callable[..., None]) -> Any:
            def on_status(status: Any) -> None:
                emit(status)

            if settings["attach"]:
                return engine_attach(settings["attach"], on_status=on_status, **common)
            kw = {k: settings[k] for k in keys}
            kw.update({k: settings[k] for k in kueue_keys if settings.get(k) is not None})
            kw["name"] = job_name
            return engine_connect(settings["runtime"], on_status=on_status, **kw, **common)

        def handle(status: Any) -> None:
            seen["status"] = status
            view.update(status)

        pump = Pump()
        try:
            session = pump.run(work, handle, view.tick)
        except KeyboardInterrupt:
            pump.cancel()
            view.finish(None)
            deleted = self._abandon_connect(pump, settings, job_name)
            msg = self._interrupt_message(settings, job_name, seen.get("status"), deleted)
            raise TrainJobMagicError(msg) from None
        except Exception as exc:
            view.finish(None)
            raise as_one_line(exc) from None
        try:
            final = session.status()
        except Exception:
            final = seen.get("status")
        view.finish(final, refresh=session.status)
        return session, view.widget_view

    def _abandon_connect(self, pump: Pump, settings: dict[str, Any], name: str | None) -> bool:
        """After Ctrl-C while waiting: delete the new TrainJob now, and close it if connect()
        still returns a session later. True when the delete request was accepted now."""
        if settings["attach"] or not name:
            return False  # attaching created nothing; leave the existing TrainJob alone
        try:
            deleted = engine_delete(
                name, settings["namespace"], settings["context"], settings["config_file"]
            )
        except Exception:
            deleted = False

        def close_when_connected() -> None:
            if pump.thread is not None:
                pump.thread.join()
            session = pump._box.get("value")
            if session is not None:
                with contextlib.suppress(Exception):
                    session.close()

        threading.Thread(target=close_when_connected, daemon=True, name="trainjob-abandon").start()
        return bool(deleted)

    @staticmethod
    def _interrupt_message(
        settings: dict[str, Any], name: str | None, status: Any, deleted: bool
    ) -> str:
        if settings["attach"]:
            return (
                f"interrupted: stopped waiting for TrainJob {settings['attach']}; it is left as it "
                "was. Attach again with %trainjob_connect --attach NAME"
            )
        ns = getattr(status, "namespace", None) or settings["namespace"] or "the default namespace"
        if deleted:
            return (
                f"interrupted: stopped waiting; TrainJob {name} in {ns} is deleted since nothing "
                f"ran in it yet (if it stays: kubectl delete trainjob {name} -n {ns})"
            )
        return (
            f"interrupted: stopped waiting; TrainJob {name} was not found in {ns}; if it still "
            f"gets created it is deleted once it is up (check: kubectl get trainjob {name} -n {ns})"
        )

    # -- %%trainjob

    @magic_arguments()
    @argument(
        "alias", nargs="?", metavar="ALIAS", help="Session to run in (default: the last connected)."
    )
    @argument(
        "--pod",
        metavar="TARGET",
        help="Run on these pods at once: all, node, node-2, launcher, a pod name, a comma list "
        "(default: the trainer). Output grouped per pod.",
    )
    @exec_args
    @output_args
    @cell_magic
    def trainjob(self, line: str, cell: str) -> None:
        """Run the cell body as a shell script (``sh -c``) in the session's trainer pod.

        Output streams live; a non-zero exit fails the cell. The result is kept in ``_trainjob``
        (and ``trainjob_magics.magics.last_result()``).
        """
        args = parse(self.trainjob, line)
        for var, opt in ((args.out, "--out"), (args.err, "--err"), (args.result, "--result")):
            check_var(var, opt)
        if args.timeout is not None and args.timeout <= 0:
            raise TrainJobUsageError(f"--timeout must be positive, got {args.timeout}")
        if not cell.strip():
            raise TrainJobUsageError("the cell is empty: write the shell commands below %%trainjob")
        entry = self._entry(args.alias)
        if args.pod and args.pod.strip() != "trainer":
            from .files_magics import run_multi_cell

            return run_multi_cell(self, entry, cell, args)
        raise_on_error = self.raise_on_error and not args.no_raise_error
        where = f"{args.result or '_trainjob'}.stdout / .stderr"
        view = NullOutputView() if args.quiet else self._output_view(where)
        result, error = self._run_exec(entry, cell, args, view)
        self._store(result, args)
        if error is not None:
            raise error
        if result.returncode != 0 and raise_on_error:
            pod = f" (pod {result.pod})" if result.pod else ""
            if result.returncode is None:
                msg = f"remote command ended without an exit status{pod}"
            else:
                msg = f"remote command exited with code {result.returncode}{pod}"
            raise TrainJobCellError(msg, result)

    def _output_view(self, where: str) -> Any:
        kw = {
            "max_lines": self.display_max_lines,
            "max_line_chars": self.display_max_line_chars,
            "interval": self.update_interval,
            "where": where,
        }
        if self._widgets():
            from .widgets_output import WidgetOutputView

            return WidgetOutputView(**kw)
        return TextOutputView(**kw)

    def _run_exec(
        self, entry: Entry, cell: str, args: Any, view: Any
    ) -> tuple[Any, BaseException | None]:
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
        pod = getattr(session, "trainer_pod", None) or getattr(session, "pod", None) or ""
        try:
            result = pump.run(work, handle, view.tick)
        except KeyboardInterrupt:
            pump.cancel()
            message = self._interrupt_remote(session, str(pod))
            partial = partial_result(got["stdout"], got["stderr"], started, str(pod))
            view.finish(footer_text(None, partial.duration, partial.pod, "interrupted"), ok=False)
            return partial, TrainJobCellError(message, partial)
        except Exception as exc:
            partial = getattr(exc, "partial", None)
            if partial is None:
                partial = partial_result(got["stdout"], got["stderr"], started, str(pod))
            view.finish(
                footer_text(None, partial.duration, partial.pod, type(exc).__name__), ok=False
            )
            return partial, as_one_line(exc)
        view.finish(footer_text(result.returncode, result.duration, result.pod), ok=result.ok)
        return result, None

    @staticmethod
    def _interrupt_remote(session: Any, pod: str) -> str:
        """Stop the session's remote commands (SIGINT, SIGTERM, SIGKILL); one line saying how
        that went."""
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

    def _store(self, result: Any, args: Any) -> None:
        """Keep the result reachable: ``_trainjob``, ``last_result()``, --out/--err/--result."""
        _LAST[0] = result
        ns = self.shell.user_ns if self.shell is not None else {}
        ns["_trainjob"] = result
        if args.out:
            ns[args.out] = result.stdout
        if args.err:
            ns[args.err] = result.stderr
        if args.result:
            ns[args.result] = result

    # -- %trainjob_sessions, %trainjob_status, %trainjob_close

    def _close_by_name(self, args: Any, timeout: float) -> None:
        """%trainjob_close NAME for a TrainJob that is not a session of this kernel."""
        from trainjob_magics.engine.errors import NotFoundError
        from trainjob_magics.engine.orphans import close_trainjob
        from trainjob_magics.engine.validation import validate_name

        name = args.alias
        known = ", ".join(e.alias for e in self.registry.entries()) or "none"
        try:
            validate_name(name)
        except Exception:
            raise TrainJobUsageError(
                f"no session named {name!r} (this kernel's sessions: {known})"
            ) from None
        try:
            print(
                close_trainjob(
                    name,
                    args.namespace or self.namespace or None,
                    context=args.context or self.context or None,
                    config_file=args.kubeconfig or self.kubeconfig or None,
                    timeout=timeout,
                )
            )
        except NotFoundError:
            raise TrainJobUsageError(
                f"no session or TrainJob named {name!r} (this kernel's sessions: {known}; "
                "list every TrainJob with %trainjob_sessions --all)"
            ) from None
        except Exception as exc:
            raise as_one_line(exc) from None

    @magic_arguments()
    @argument(
        "--all",
        action="store_true",
        help="List every TrainJob trainjob-magics created in the namespace (any kernel/host).",
    )
    @cluster_args
    @line_magic
    def trainjob_sessions(self, line: str = "") -> None:
        """List this kernel's sessions (the default one is marked with *); --all lists every
        TrainJob of the project in the namespace, with owner, age and state."""
        args = parse(self.trainjob_sessions, line)
        if args.all:
            self._list_all_trainjobs(args)
            return
        default = self.registry.default_alias
        rows = []
        for e in self.registry.entries():
            try:
                st = e.session.status()
                state, ns, runtime = st.state, st.namespace, st.runtime
            except Exception as exc:
                state = f"unknown ({type(exc).__name__})"
                ns = getattr(e.session, "namespace", "?")
                runtime = e.settings.get("runtime") or ""
            rows.append(
                SessionRow(e.alias, session_name(e.session), ns, runtime, state, e.alias == default)
            )
        print(format_sessions(rows))

    def _list_all_trainjobs(self, args: Any) -> None:
        from trainjob_magics.engine.orphans import list_trainjobs

        from .orphans import format_trainjobs

        try:
            jobs = list_trainjobs(
                args.namespace or self.namespace or None,
                context=args.context or self.context or None,
                config_file=args.kubeconfig or self.kubeconfig or None,
            )
        except Exception as exc:
            raise as_one_line(exc) from None
        own = {session_name(e.session) for e in self.registry.entries()}
        print(format_trainjobs(jobs, own, args.namespace or self.namespace))

    @magic_arguments()
    @argument("alias", nargs="?", metavar="ALIAS", help="Session (default: the last connected).")
    @line_magic
    def trainjob_status(self, line: str = "") -> None:
        """Show a session's TrainJob and pods (a widget with a Refresh button, or a text table)."""
        args = parse(self.trainjob_status, line)
        self._show_status(self._entry(args.alias), fetch=True)

    def _show_status(self, entry: Entry, fetch: bool, quiet_errors: bool = False) -> None:
        try:
            status = entry.session.status()
        except Exception as exc:
            if quiet_errors:
                return
            raise as_one_line(exc) from None
        if self._widgets():
            from .widgets_status import StatusWidget

            entry.status_widget = StatusWidget(status, refresh=entry.session.status)
        else:
            print(format_status(status))

    @magic_arguments()
    @argument(
        "alias", nargs="?", metavar="ALIAS", help="Session to close (default: the last connected)."
    )
    @argument("--all", action="store_true", help="Close every session of this kernel.")
    @argument("--timeout", type=float, help="Seconds to wait for the pods to go (default: 180).")
    @cluster_args
    @line_magic
    def trainjob_close(self, line: str = "") -> None:
        """Close a session: delete its TrainJob and wait for its pods to go.

        ALIAS may also name any TrainJob trainjob-magics created (see %trainjob_sessions --all),
        e.g. one orphaned by a dead kernel.
        """
        args = parse(self.trainjob_close, line)
        if args.all and args.alias:
            raise TrainJobUsageError("give either an ALIAS or --all, not both")
        timeout = args.timeout if args.timeout is not None else self.close_timeout
        if args.alias and self.registry.find(args.alias) is None:
            self._close_by_name(args, timeout)
            return
        if args.all:
            reports = self.registry.close_all(timeout=timeout)
            if not reports:
                print("No sessions to close.")
        else:
            reports = [self.registry.close(self._entry(args.alias).alias, timeout=timeout)]
        for rep in reports:
            print(rep.line())
        failed = [r for r in reports if r.error]
        if failed:
            raise TrainJobMagicError(
                failed[0].line()
                if len(failed) == 1
                else f"{len(failed)} sessions could not be closed"
            )
