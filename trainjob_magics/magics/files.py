"""``%%trainjob_writefile``, ``%trainjob_upload``, ``%trainjob_download``, ``%trainjob_logs``.

Every call goes to the session (engine) in a worker thread while the cell's thread renders
per-pod output and progress.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ..engine import TransferInterruptedError
from .detach import show_after_follow
from .failures import TrainJobMagicError, TrainJobUsageError
from .host import MagicsHost
from .options import check_positive
from .views.progress import transfer_line
from .worker import Pump

NOTE = "note"  # an event of the worker that is a line of its own (a retry), not progress
STOP_WAIT = 45.0  # seconds a stopped transfer gets to clean up (its pods' cleanup: 30 s at most)


class _Interrupt(threading.Event):
    """The ``cancel`` event of a magic's copy, set by Ctrl-C (the engine says why from it)."""

    why = "interrupted"


def _run_with_progress(
    host: MagicsHost, label: str, fn: Callable[..., Any], copies: int = 1
) -> Any:
    """Run ``fn(progress, note, cancel)`` in a worker; show its progress here once the
    transfer is large (``copies``: how many pods receive the same bytes), and each
    ``note(line)`` (a retry) as a line of its own. Ctrl-C sets ``cancel`` and waits (up to
    ``STOP_WAIT``; a second Ctrl-C stops waiting) until the transfer has stopped and removed
    what it staged, then says so in one line (one that had ended already: that it had)."""
    bar = host.views.progress(label, host.use_widgets(), copies=copies)
    cancel = _Interrupt()

    def work(emit: Callable[..., None]) -> Any:
        return fn(lambda done, total: emit(done, total), lambda line: emit(NOTE, line), cancel)

    def show(*event: Any) -> None:
        if event[0] == NOTE:
            bar.note(event[1])
        else:
            bar.update(*event)

    pump = Pump()
    try:
        result = pump.run(work, show)
    except KeyboardInterrupt:
        cancel.set()
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting
            pump.done.wait(STOP_WAIT)  # (not a join: see engine files/transfer._Countdown)
        if pump.done.is_set() and pump.error is None:
            bar.finish(ok=True)  # it had ended before the stop reached it: said, and in place
            raise TrainJobMagicError(
                f"interrupted after it had ended: {transfer_line(pump.value, copies)}"
            ) from None
        bar.finish(ok=False)
        if isinstance(pump.error, TransferInterruptedError):
            raise TrainJobMagicError(str(pump.error)) from None
        if pump.error is not None:
            raise pump.error from None
        raise TrainJobMagicError(
            f"interrupted: {label.lower()} is still being stopped; what it staged is removed "
            "when it stops, or swept by the next transfer into the same directory"
        ) from None
    except Exception:
        bar.finish(ok=False)
        raise
    bar.finish(ok=True)
    return result


def _transfer(
    host: MagicsHost, label: str, args: Any, call: Callable[[Any, Any, Any, Any, Any], Any]
) -> None:
    """``call(session, pods, progress, on_retry, cancel)`` with a progress bar and a line per
    retry;
    prints the transfer's summary (the size per pod x pods and the rate). An upload's pods
    are resolved here, once."""
    if args.retries < 0:
        raise TrainJobUsageError(f"--retries must be 0 or more, got {args.retries}")
    session = host.entry(args.session).session
    refs: Any = args.pod
    if label == "Uploading":  # resolved once: the same bytes go to each of these pods
        refs = session.pods(args.pod)
    copies = len(refs) if isinstance(refs, list) else 1
    result = _run_with_progress(
        host,
        label,
        lambda progress, note, cancel: call(session, refs, progress, note, cancel),
        copies=copies,
    )
    print(transfer_line(result, copies))


def write_file(host: MagicsHost, args: Any, cell: str) -> None:
    """Write the cell body to PATH in the pod(s)."""
    session = host.entry(args.session).session
    result = session.write_file(args.path, cell, pods=args.pod)
    where = result.pods[0] if len(result.pods) == 1 else f"{len(result.pods)} pods"
    print(f"Wrote {result.bytes} bytes to {args.path} on {where}.")


def upload(host: MagicsHost, args: Any) -> None:
    """Copy a local file or directory to the pod(s)."""
    _transfer(
        host,
        "Uploading",
        args,
        lambda session, refs, progress, note, cancel: session.upload(
            args.local,
            args.remote,
            pods=refs,
            progress=progress,
            verify=not args.no_verify,
            retries=args.retries,
            on_retry=note,
            cancel=cancel,
        ),
    )


def download(host: MagicsHost, args: Any) -> None:
    """Copy a file or directory from a pod."""
    _transfer(
        host,
        "Downloading",
        args,
        lambda session, refs, progress, note, cancel: session.download(
            args.remote,
            args.local,
            pod=refs,
            progress=progress,
            verify=not args.no_verify,
            retries=args.retries,
            on_retry=note,
            cancel=cancel,
        ),
    )


def logs(host: MagicsHost, args: Any) -> None:
    """Show pod logs grouped per pod; --follow streams until Ctrl-C or --timeout."""
    if args.tail is not None and args.tail < 0:
        raise TrainJobUsageError(f"--tail must be >= 0, got {args.tail}")
    check_positive(args.timeout, "--timeout")
    session = host.entry(args.session).session
    refs = session.pods(args.pod)
    pods = [(r.name, "" if r.role == "trainer" else r.label) for r in refs]
    view = host.pods_view(pods, "session.logs()", live_summary=False)
    stop = threading.Event()
    started = time.monotonic()

    def work(emit: Callable[..., None]) -> Any:
        return session.logs(
            refs,
            tail=args.tail,
            follow=args.follow,
            container=args.container,
            on_output=lambda pod, text: emit(pod, "stdout", text),
            stop=stop,
        )

    def tick() -> None:
        view.tick()
        if args.timeout is not None and time.monotonic() - started > args.timeout:
            stop.set()

    pump = Pump()
    try:
        found = pump.run(work, view.write, tick)
    except KeyboardInterrupt:
        stop.set()
        pump.cancel()
        view.finish("stopped following the logs", ok=True)
        return
    except Exception as exc:
        view.finish(type(exc).__name__, ok=False)
        raise
    for pod in found:
        error = found.errors.get(pod)
        if error is not None:
            view.write(pod, "stderr", f"{type(error).__name__}: {error}\n")
    ok = not found.errors
    n = len(found)
    summary = f"logs of {n} pod{'s' if n != 1 else ''}" + (
        "" if ok else f"; {len(found.errors)} could not be read: {', '.join(found.errors)}"
    )
    view.finish(summary, ok=ok)
    if args.follow and not stop.is_set():
        show_after_follow(session)  # the log ended with the container: how the run ended
    if not ok:
        raise TrainJobMagicError(summary)


__all__ = ["download", "logs", "upload", "write_file"]
