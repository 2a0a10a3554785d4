"""Whole-job magics: ``%%trainjob_writefile``, ``%trainjob_upload``, ``%trainjob_download``,
``%trainjob_logs``. Thin: every call goes to the engine (jobops) in a worker thread while the
cell's thread renders per-pod output and progress. (``%%trainjob --pod`` lives in ``cell.py``.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .arguments import check_positive, parse, session_option
from .cell import multi_view
from .errors import TrainJobMagicError, TrainJobUsageError, as_one_line
from .multipod_output import ProgressView
from .worker import Pump

if TYPE_CHECKING:
    from .magics import TrainJobMagics

POD_HELP = "Target: trainer, all, node, node-2, a pod name."


def _main(shell: Any) -> TrainJobMagics:
    from .extension import loaded_magics

    found = loaded_magics(shell)
    if found is None:
        raise TrainJobUsageError("load the extension first: %load_ext trainjob_magics")
    return found


# ------------------------------------------------------------------ file and log magics


def _run_with_progress(main: TrainJobMagics, label: str, fn: Callable[..., Any]) -> Any:
    """Run ``fn(progress)`` in a worker; show its progress here once the transfer is large."""
    bar = ProgressView(label, main.use_widgets())

    def work(emit: Callable[..., None]) -> Any:
        return fn(lambda done, total: emit(done, total))

    pump = Pump()
    try:
        result = pump.run(work, bar.update)
    except KeyboardInterrupt:
        pump.cancel()
        bar.finish(ok=False)
        raise TrainJobMagicError(f"interrupted: {label.lower()} abandoned") from None
    except Exception as exc:
        bar.finish(ok=False)
        raise as_one_line(exc) from None
    bar.finish(ok=True)
    return result


def _no_verify(f: Callable[..., Any]) -> Callable[..., Any]:
    return argument("--no-verify", action="store_true", help="Skip the size/sha256 check.")(f)


@magics_class
class TrainJobFileMagics(Magics):
    """Files and logs across the job's pods."""

    def _session(self, alias: str | None) -> Any:
        return _main(self.shell).entry(alias).session

    def _transfer(self, label: str, args: Any, call: Callable[[Any, Any], Any]) -> None:
        """``call(session, progress)`` with a progress bar; prints the transfer's summary."""
        session = self._session(args.session)
        result = _run_with_progress(
            _main(self.shell), label, lambda progress: call(session, progress)
        )
        print(result.summary())

    @magic_arguments()
    @argument("path", help="File to write in the pod(s); relative to the working directory.")
    @argument("--pod", default="trainer", help=POD_HELP)
    @session_option
    @cell_magic
    def trainjob_writefile(self, line: str, cell: str) -> None:
        """Write the cell body to PATH in the pod(s), as ``%%writefile`` does locally."""
        args = parse(self.trainjob_writefile, line)
        session = self._session(args.session)
        try:
            result = session.write_file(args.path, cell, pods=args.pod)
        except Exception as exc:
            raise as_one_line(exc) from None
        where = result.pods[0] if len(result.pods) == 1 else f"{len(result.pods)} pods"
        print(f"Wrote {result.bytes} bytes to {args.path} on {where}.")

    @magic_arguments()
    @argument("local", help="Local file or directory.")
    @argument("remote", help="Destination in the pod(s); ending in / means inside that directory.")
    @argument("--pod", default="trainer", help=POD_HELP)
    @_no_verify
    @session_option
    @line_magic
    def trainjob_upload(self, line: str = "") -> None:
        """Copy a local file or directory to the pod(s) as a tar stream (like kubectl cp)."""
        args = parse(self.trainjob_upload, line)
        self._transfer(
            "Uploading",
            args,
            lambda session, progress: session.upload(
                args.local, args.remote, pods=args.pod, progress=progress, verify=not args.no_verify
            ),
        )

    @magic_arguments()
    @argument("remote", help="File or directory in the pod.")
    @argument("local", help="Local destination; ending in / means inside that directory.")
    @argument("--pod", default="trainer", help="One pod: trainer, node-2, a pod name.")
    @_no_verify
    @session_option
    @line_magic
    def trainjob_download(self, line: str = "") -> None:
        """Copy a file or directory from a pod, refusing archive members that escape LOCAL."""
        args = parse(self.trainjob_download, line)
        self._transfer(
            "Downloading",
            args,
            lambda session, progress: session.download(
                args.remote, args.local, pod=args.pod, progress=progress, verify=not args.no_verify
            ),
        )

    @magic_arguments()
    @argument("--pod", default="trainer", help=POD_HELP)
    @argument("--tail", type=int, help="Only the last N lines.")
    @argument("--follow", action="store_true", help="Keep streaming until interrupted.")
    @argument("--timeout", type=float, help="With --follow: stop after this many seconds.")
    @argument("--container", help="Container (default: the trainer container).")
    @session_option
    @line_magic
    def trainjob_logs(self, line: str = "") -> None:
        """Show pod logs (e.g. the sshd logs of MPI node pods), grouped per pod."""
        args = parse(self.trainjob_logs, line)
        if args.tail is not None and args.tail < 0:
            raise TrainJobUsageError(f"--tail must be >= 0, got {args.tail}")
        check_positive(args.timeout, "--timeout")
        main = _main(self.shell)
        session = self._session(args.session)
        from ..engine import jobops

        try:
            targets = jobops.commands(session, jobops.resolve(session, args.pod), args.container)
        except Exception as exc:
            raise as_one_line(exc) from None
        view = multi_view(main, [(t.pod, t.label) for t in targets], "session.logs()")
        stop = threading.Event()
        started = time.monotonic()

        def work(emit: Callable[..., None]) -> Any:
            from ..engine.files.logs import read_logs

            return read_logs(
                session.api_client,
                session.namespace,
                targets,
                tail=args.tail,
                follow=args.follow,
                on_output=lambda pod, text: emit(pod, "stdout", text),
                stop=stop,
            )

        def tick() -> None:
            view.tick()
            if args.timeout is not None and time.monotonic() - started > args.timeout:
                stop.set()

        pump = Pump()
        try:
            logs = pump.run(work, view.write, tick)
        except KeyboardInterrupt:
            stop.set()
            pump.cancel()
            view.finish("stopped following the logs", ok=True)
            return
        except Exception as exc:
            view.finish(type(exc).__name__, ok=False)
            raise as_one_line(exc) from None
        for pod in logs:
            error = logs.errors.get(pod)
            if error is not None:
                view.write(pod, "stderr", f"{type(error).__name__}: {error}\n")
        ok = not logs.errors
        n = len(logs)
        summary = f"logs of {n} pod{'s' if n != 1 else ''}" + (
            "" if ok else f"; {len(logs.errors)} could not be read: {', '.join(logs.errors)}"
        )
        view.finish(summary, ok=ok)
        if not ok:
            raise TrainJobMagicError(summary)


def register(shell: Any) -> None:
    """Register the file/log magics (idempotent)."""
    if "TrainJobFileMagics" not in shell.magics_manager.registry:
        shell.register_magics(TrainJobFileMagics(shell=shell))


def unregister(shell: Any) -> None:
    """Remove the file/log magics."""
    manager = shell.magics_manager
    found = manager.registry.pop("TrainJobFileMagics", None)
    if found is None:
        return
    for kind, names in found.magics.items():
        table = manager.magics.get(kind, {})
        for name in names:
            table.pop(name, None)
    if found in shell.configurables:
        shell.configurables.remove(found)
