"""``%trainjob_connect``: create (or attach to) a TrainJob with live status, reuse on re-run."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from ..engine import (
    ConnectTimeoutError,
    NotFoundError,
    QueuedTimeoutError,
    SessionClosedError,
    manifest_yaml,
)
from . import idle_stop, restarts
from .detach import show_after_attach
from .failures import TrainJobMagicError, TrainJobUsageError
from .host import MagicsHost
from .options import check_positive, cluster_settings, parse_env
from .queued import QueuedJob, queued_message
from .registry import session_name
from .sessions import render_status
from .views.status_text import duration_seconds
from .worker import Pump

# The pod-shaping options, as connect() keywords (the magic's dest -> the keyword).
SHAPING_OPTIONS = {
    "volume": "volumes",
    "shm_size": "shm_size",
    "service_account": "service_account",
    "node_selector": "node_selector",
    "toleration": "tolerations",
    "image_pull_secret": "image_pull_secrets",
    "label": "labels",
    "annotation": "annotations",
    "env_from": "env_from",
    "pod_patch": "pod_patch",
}
SHAPING_KEYS = tuple(SHAPING_OPTIONS)

# Options that create something new; --attach takes the existing TrainJob as it is.
_NEW_JOB_OPTIONS = (
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
    *SHAPING_KEYS,
    "dry_run",
)
_CONNECT_KEYS = (
    "image",
    "num_nodes",
    "command",
    "cpu",
    "memory",
    "gpu",
    "env",
    "idle_timeout",
    "image_pull_retries",
)
_KUEUE_KEYS = ("queue", "priority_class", "max_runtime")


def is_live(session: Any) -> bool:
    """Whether a session can still run commands (closed, finished or deleted ones cannot)."""
    if session.closed:
        return False
    try:
        state = session.status().state
    except (NotFoundError, SessionClosedError):
        return False
    except Exception:
        return True
    return state not in ("Complete", "Failed", "Deleted")


# ------------------------------------------------------------------ the magic


def connect(host: MagicsHost, args: Any) -> None:
    """Reuse a live session with the same settings, else connect and register a new one."""
    settings = connect_settings(host, args)
    if args.dry_run:
        dry_run(host, settings)
        return
    alias = args.alias or args.attach or args.name or "default"
    queued = _queued_entry(host, alias, args.attach, settings)
    if queued is not None:  # wait again for the TrainJob whose connect timed out in its queue
        alias = queued.alias
        settings = {**queued.settings, "attach": queued.session.name, "runtime": None}
    existing = host.registry.find(alias)
    if existing is not None and queued is None:
        if is_live(existing.session):
            if existing.settings == settings and not args.replace:
                print(
                    f"Reusing the live session {alias!r} (TrainJob "
                    f"{session_name(existing.session)}); --replace starts a new one."
                )
                render_status(host, existing, quiet_errors=True)
                return
            check_new_runtime(host, existing.settings, settings)
            if not args.replace:
                raise TrainJobUsageError(
                    f"session {alias!r} is live with other settings: run "
                    f"%trainjob_close {alias} first, add --replace, or pick another --as ALIAS"
                )
            closed = host.registry.close(
                alias, timeout=host.settings.close_timeout, by="%trainjob_connect --replace"
            )
            print(closed.line())
        else:
            host.registry.remove(alias)
    idle_stop.parse_idle_stop(getattr(args, "idle_stop", None) or host.settings.idle_stop)
    timeout = args.timeout if args.timeout is not None else host.settings.connect_timeout
    try:
        session, view = run_connect(host, settings, timeout, alias)
    except StillQueued as still:
        if queued is None:
            host.registry.add(alias, still.job, settings)
        raise TrainJobMagicError(str(still)) from None
    entry = host.registry.add(alias, session, queued.settings if queued is not None else settings)
    idle_stop.arm(host, alias, session, getattr(args, "idle_stop", None) or host.settings.idle_stop)
    widget = getattr(view, "widget_view", None)
    entry.status_widget = widget
    entry.watch(widget)
    if not getattr(view, "widgets", False):  # the panel says it; text front ends get a line
        print(ready_line(alias, session))
    if settings["attach"]:
        show_after_attach(session)  # the job's detached run: command, since when, last lines


def check_new_runtime(host: MagicsHost, live: dict[str, Any], settings: dict[str, Any]) -> None:
    """A runtime other than the live session's must exist before that session is in the way:
    an unknown one is the one line that names it and the runtimes there are (and --replace
    does not close the live session for it)."""
    runtime = settings["runtime"]
    if not runtime or runtime == live.get("runtime"):
        return
    common = {k: settings[k] for k in ("namespace", "context", "config_file")}
    host.engine.check_runtime(runtime, **common)


def ready_line(alias: str, session: Any) -> str:
    """``Session 'a' ready: TrainJob x in namespace ns, trainer pod p. Run ...``."""
    return (
        f"Session {alias!r} ready: TrainJob {session_name(session)} in namespace "
        f"{session.namespace}, trainer pod {session.pod}. Run commands in %%trainjob cells."
    )


class StillQueued(Exception):
    """The connect timed out while the TrainJob waits in its queue; ``job`` stands for it."""

    def __init__(self, message: str, job: QueuedJob) -> None:
        super().__init__(message)
        self.job = job


def _queued_entry(
    host: MagicsHost, alias: str, attach: str | None, settings: dict[str, Any]
) -> Any:
    """The registry entry of a queued TrainJob this connect waits for again: ``--attach
    NAME`` of a queued TrainJob, or the same connect line re-run."""
    for entry in host.registry.entries():
        if not isinstance(entry.session, QueuedJob):
            continue
        same_line = entry.alias == alias and entry.settings == settings
        if (entry.session.name == attach) if attach else same_line:
            return entry
    return None


def connect_settings(host: MagicsHost, args: Any) -> dict[str, Any]:
    """The settings that define a session (compared when a connect line is re-run)."""
    runtime = args.runtime or host.settings.default_runtime or None
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
    check_positive(args.timeout, "--timeout")
    if args.attach:
        extra = [o for o in _NEW_JOB_OPTIONS if getattr(args, o)]
        if extra:
            opts = ", ".join(f"--{o.replace('_', '-')}" for o in extra)
            raise TrainJobUsageError(f"--attach takes the existing TrainJob as it is; drop {opts}")
    keep_alive = host.settings.keep_alive_command
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
        **cluster_settings(args, host.settings),
        "command": ["sh", "-c", keep_alive] if keep_alive else None,
        "idle_timeout": host.settings.idle_timeout if host.settings.idle_timeout > 0 else None,
        "image_pull_retries": host.settings.image_pull_retries,
        **{kw: getattr(args, dest, None) for dest, kw in SHAPING_OPTIONS.items()},
    }


def dry_run(host: MagicsHost, settings: dict[str, Any]) -> None:
    """``--dry-run``: print the TrainJob YAML after a server-side dry run (nothing created)."""
    kw = {k: settings[k] for k in _CONNECT_KEYS}
    kw.update({k: settings[k] for k in _KUEUE_KEYS if settings.get(k) is not None})
    kw.update({k: settings[k] for k in SHAPING_OPTIONS.values() if settings.get(k)})
    common = {k: settings[k] for k in ("namespace", "context", "config_file")}
    manifest = host.engine.connect(
        settings["runtime"],
        name=settings["name"] or host.engine.new_name(),
        api_retry_seconds=host.settings.api_retry_seconds,
        dry_run=True,
        **kw,
        **common,
    )
    print(manifest_yaml(manifest), end="")


def run_connect(
    host: MagicsHost, settings: dict[str, Any], timeout: float, alias: str = "default"
) -> tuple[Any, Any]:
    """connect()/attach() in a worker thread with the live status shown here; the session and
    its status view. An interrupted, timed-out or failed connect leaves the view frozen in
    that final state."""
    widgets = host.use_widgets()
    view = host.views.connect_status(
        widgets, max_runtime=duration_seconds(settings.get("max_runtime"))
    )
    if widgets:
        restarts.note_live_panels(host.shell)
    seen: dict[str, Any] = {}
    common = {k: settings[k] for k in ("namespace", "context", "config_file")}
    common["timeout"] = timeout
    common["api_retry_seconds"] = host.settings.api_retry_seconds
    job_name = None if settings["attach"] else settings["name"] or host.engine.new_name()

    def work(emit: Callable[..., None]) -> Any:
        if settings["attach"]:
            return host.engine.attach(settings["attach"], on_status=emit, **common)
        kw = {k: settings[k] for k in _CONNECT_KEYS}
        kw.update({k: settings[k] for k in _KUEUE_KEYS if settings.get(k) is not None})
        kw.update({k: settings[k] for k in SHAPING_OPTIONS.values() if settings.get(k)})
        return host.engine.connect(
            settings["runtime"], on_status=emit, name=job_name, **kw, **common
        )

    def handle(status: Any) -> None:
        seen["status"] = status
        view.update(status)

    pump = Pump()
    try:
        session = pump.run(work, handle, view.tick)
    except KeyboardInterrupt:
        pump.cancel()
        deleted = abandon_connect(host, pump, settings, job_name)
        message = interrupt_message(settings, job_name, seen.get("status"), deleted)
        view.final("Interrupted")  # the error below the panel says what happened, once
        raise TrainJobMagicError(message) from None
    except QueuedTimeoutError as exc:
        name = exc.job or settings["attach"] or job_name or "NAME"
        namespace = exc.namespace or settings["namespace"]
        message = queued_message(exc, name, brief=view.widgets)
        view.final("Timed out")
        job = QueuedJob(host, name, namespace, settings["runtime"] or "", common)
        raise StillQueued(message, job) from None
    except Exception as exc:
        timed_out = isinstance(exc, (ConnectTimeoutError, QueuedTimeoutError))
        view.final("Timed out" if timed_out else "Failed")
        raise
    try:
        final = session.status()
    except Exception:
        final = seen.get("status")
    view.finish(final, refresh=session.status, note=ready_line(alias, session))
    return session, view


def abandon_connect(
    host: MagicsHost, pump: Pump, settings: dict[str, Any], name: str | None
) -> bool:
    """After Ctrl-C while waiting: delete the new TrainJob now, and close it if connect()
    still returns a session later. True when the delete request was accepted now."""
    if settings["attach"] or not name:
        return False  # attaching created nothing; leave the existing TrainJob alone
    try:
        deleted = host.engine.abandon(
            name,
            settings["namespace"],
            context=settings["context"],
            config_file=settings["config_file"],
        )
    except Exception:
        deleted = False

    def close_when_connected() -> None:
        pump.join()
        if pump.value is not None:
            with contextlib.suppress(Exception):
                pump.value.close()

    threading.Thread(target=close_when_connected, daemon=True, name="trainjob-abandon").start()
    return bool(deleted)


def interrupt_message(
    settings: dict[str, Any], name: str | None, status: Any, deleted: bool
) -> str:
    """One line after Ctrl-C while connecting: what happened to the TrainJob."""
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
