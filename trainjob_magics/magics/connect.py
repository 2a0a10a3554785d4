"""``%trainjob_connect``: create (or attach to) a TrainJob with live status, reuse on re-run."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .arguments import check_positive, cluster_settings, parse_env
from .errors import TrainJobMagicError, TrainJobUsageError, as_one_line
from .registry import session_name
from .widgets_status import ConnectStatusView
from .worker import Pump

if TYPE_CHECKING:
    from .magics import TrainJobMagics

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
)
_CONNECT_KEYS = ("image", "num_nodes", "command", "cpu", "memory", "gpu", "env", "idle_timeout")
_KUEUE_KEYS = ("queue", "priority_class", "max_runtime")

# ------------------------------------------------------------------ engine access
# Imported late (``import trainjob_magics.magics`` stays light); tests replace these.


def engine_connect(runtime: str, **kwargs: Any) -> Any:
    """``trainjob_magics.engine.connect``."""
    from ..engine import connect

    return connect(runtime, **kwargs)


def engine_attach(name: str, **kwargs: Any) -> Any:
    """``trainjob_magics.engine.attach``."""
    from ..engine import attach

    return attach(name, **kwargs)


def engine_delete(
    name: str, namespace: str | None, context: str | None, config_file: str | None
) -> bool:
    """Delete a TrainJob whose connect was interrupted; False when it does not exist (yet)."""
    from ..engine.kube import kubeconfig
    from ..engine.trainjob.lifecycle import delete_trainjob

    api, default_namespace = kubeconfig.load(config_file, context)
    try:
        return delete_trainjob(api, namespace or default_namespace, name)
    finally:
        close = getattr(api, "close", None)
        if close is not None:
            close()


def new_job_name() -> str:
    """A random TrainJob name, chosen here so an interrupted connect can delete its job."""
    from ..engine.trainjob.body import generate_name

    return generate_name()


def is_live(session: Any) -> bool:
    """Whether a session can still run commands (closed, finished or deleted ones cannot)."""
    if getattr(session, "closed", False):
        return False
    try:
        state = session.status().state
    except Exception as exc:
        return type(exc).__name__ not in ("NotFoundError", "SessionClosedError")
    return state not in ("Complete", "Failed", "Deleted")


# ------------------------------------------------------------------ the magic


def connect(magics: TrainJobMagics, args: Any) -> None:
    """Reuse a live session with the same settings, else connect and register a new one."""
    settings = connect_settings(magics, args)
    alias = args.alias or args.attach or args.name or "default"
    existing = magics.registry.find(alias)
    if existing is not None:
        if is_live(existing.session):
            if existing.settings == settings and not args.replace:
                print(
                    f"Reusing the live session {alias!r} (TrainJob "
                    f"{session_name(existing.session)}); --replace starts a new one."
                )
                magics.show_status(existing, quiet_errors=True)
                return
            if not args.replace:
                raise TrainJobUsageError(
                    f"session {alias!r} is live with other settings: run "
                    f"%trainjob_close {alias} first, add --replace, or pick another --as ALIAS"
                )
            print(magics.registry.close(alias, timeout=magics.close_timeout).line())
        else:
            magics.registry.remove(alias)
    timeout = args.timeout if args.timeout is not None else magics.connect_timeout
    session, widget = run_connect(magics, settings, timeout)
    entry = magics.registry.add(alias, session, settings)
    entry.status_widget = widget
    pod = getattr(session, "trainer_pod", None) or getattr(session, "pod", None) or "?"
    print(
        f"Session {alias!r} ready: TrainJob {session_name(session)} in namespace "
        f"{getattr(session, 'namespace', '?')}, trainer pod {pod}. "
        "Run commands in %%trainjob cells."
    )


def connect_settings(magics: TrainJobMagics, args: Any) -> dict[str, Any]:
    """The settings that define a session (compared when a connect line is re-run)."""
    runtime = args.runtime or magics.default_runtime or None
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
    keep_alive = magics.keep_alive_command
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
        **cluster_settings(args, magics),
        "command": ["sh", "-c", keep_alive] if keep_alive else None,
        "idle_timeout": magics.idle_timeout if magics.idle_timeout > 0 else None,
    }


def run_connect(
    magics: TrainJobMagics, settings: dict[str, Any], timeout: float
) -> tuple[Any, Any]:
    """connect()/attach() in a worker thread with the live status shown here.

    Returns the session and its status widget (None in text mode).
    """
    view = ConnectStatusView(magics.use_widgets())
    seen: dict[str, Any] = {}
    common = {k: settings[k] for k in ("namespace", "context", "config_file")}
    common["timeout"] = timeout
    job_name = None if settings["attach"] else settings["name"] or new_job_name()

    def work(emit: Callable[..., None]) -> Any:
        if settings["attach"]:
            return engine_attach(settings["attach"], on_status=emit, **common)
        kw = {k: settings[k] for k in _CONNECT_KEYS}
        kw.update({k: settings[k] for k in _KUEUE_KEYS if settings.get(k) is not None})
        return engine_connect(settings["runtime"], on_status=emit, name=job_name, **kw, **common)

    def handle(status: Any) -> None:
        seen["status"] = status
        view.update(status)

    pump = Pump()
    try:
        session = pump.run(work, handle, view.tick)
    except KeyboardInterrupt:
        pump.cancel()
        view.finish(None)
        deleted = abandon_connect(pump, settings, job_name)
        raise TrainJobMagicError(
            interrupt_message(settings, job_name, seen.get("status"), deleted)
        ) from None
    except Exception as exc:
        view.finish(None)
        raise as_one_line(exc) from None
    try:
        final = session.status()
    except Exception:
        final = seen.get("status")
    view.finish(final, refresh=session.status)
    return session, view.widget_view


def abandon_connect(pump: Pump, settings: dict[str, Any], name: str | None) -> bool:
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
