"""``%trainjob_sessions``, ``%trainjob_status``, ``%trainjob_close``: list, show, close.

A name that is not a session of this kernel may name any TrainJob trainjob-magics created
(e.g. one orphaned by a dead kernel); the cluster options say where to look for it.
"""

from __future__ import annotations

from typing import Any

from ..engine import NotFoundError, validate_name
from . import restarts
from .detach import detached_mark
from .failures import TrainJobMagicError, TrainJobUsageError
from .host import MagicsHost
from .options import chosen_session, cluster_settings
from .outcomes import ENDED_STATES
from .registry import Entry, session_name
from .views.gpus import gpu_html, gpu_text, worth_showing
from .views.jobs_table import format_trainjobs
from .views.status_text import SessionRow, duration_seconds, format_sessions, format_status

# ------------------------------------------------------------------ %trainjob_sessions


def list_sessions(host: MagicsHost, args: Any) -> None:
    """This kernel's sessions (a table widget or text); --all: every TrainJob of the project."""
    if args.all:
        list_all_trainjobs(host, args)
        return
    default = host.registry.default_alias
    rows = []
    for e in host.registry.entries():
        try:
            st = e.session.status()
            state, ns, runtime = st.state, st.namespace, st.runtime
        except Exception as exc:
            state = f"unknown ({type(exc).__name__})"
            ns = getattr(e.session, "namespace", "?")
            runtime = e.settings.get("runtime") or ""
        state += detached_mark(e.session)
        rows.append(
            SessionRow(e.alias, session_name(e.session), ns, runtime, state, e.alias == default)
        )
    if host.use_widgets():
        from .views.sessions import show_sessions

        show_sessions(rows)
    else:
        print(format_sessions(rows))
    for e in host.registry.entries():
        holds = _holds(host, e.session)
        if holds:
            print(f"{e.alias} ({session_name(e.session)}): {holds}")


def _holds(host: MagicsHost, session: Any) -> str:
    """``holds 8 GPU · 32 CPU · held 2 h 10 min (17.3 GPU-h) · idle 41 min`` (or ``requests
    no GPU or CPU · up 7 s``, ``holds nothing yet``), or '' if unreadable."""
    try:
        text = str(host.engine.holding_text(session))
    except Exception:
        return ""
    return f"holds {text}" if text[:1].isdigit() else text


def _managed_trainjobs(
    host: MagicsHost, args: Any, *, with_sessions: bool = False, problems: list[str] | None = None
) -> tuple[list[Any], list[str]]:
    """Every TrainJob the project created, and the namespaces searched: the one asked for
    (--namespace), else the configured one plus, ``with_sessions``, those of this kernel's
    sessions."""
    where = cluster_settings(args, host.settings)
    namespaces: list[str | None] = [where["namespace"]]
    if with_sessions and not args.namespace:
        namespaces += [e.session.namespace for e in host.registry.entries()]
    if problems is None:
        return host.engine.find_trainjobs(
            namespaces, context=where["context"], config_file=where["config_file"]
        )
    return host.engine.find_trainjobs(
        namespaces,
        context=where["context"],
        config_file=where["config_file"],
        problems=problems,
    )


def list_all_trainjobs(host: MagicsHost, args: Any) -> None:
    """``%trainjob_sessions --all``: every namespace of this kernel's sessions too."""
    problems: list[str] = []
    jobs, namespaces = _managed_trainjobs(host, args, with_sessions=True, problems=problems)
    own = {session_name(e.session) for e in host.registry.entries()}
    print(format_trainjobs(jobs, own, namespaces))
    for line in problems:  # a namespace this user may not list: one line, not a failure
        print(f"not listed: {line}")


# ------------------------------------------------------------------ %trainjob_status


def show_status(host: MagicsHost, args: Any) -> None:
    """A session's status; a NAME that is no session: that TrainJob's row from the cluster.

    With no session at all and no cluster option, NAME is taken as a session name (nothing is
    sent): the user most likely has not connected yet.
    """
    alias = chosen_session(args)
    has_sessions = bool(host.registry.entries())
    asks_cluster = bool(args.namespace or args.context or args.kubeconfig)
    if alias is not None and host.registry.find(alias) is None and (has_sessions or asks_cluster):
        _status_by_name(host, args, alias)
        return
    render_status(host, host.entry(alias))


def _status_by_name(host: MagicsHost, args: Any, name: str) -> None:
    jobs, namespaces = _managed_trainjobs(host, args)
    found = [j for j in jobs if j.name == name]
    if not found:
        raise TrainJobUsageError(
            f"no session or TrainJob named {name!r} (this kernel's sessions: "
            f"{host.known_aliases()}; list every TrainJob with %trainjob_sessions --all)"
        )
    print(format_trainjobs(found, set(), namespaces))


def render_status(host: MagicsHost, entry: Entry, quiet_errors: bool = False) -> None:
    """Show ``entry``'s status: a new status panel (and the newer status in the session's
    other panels, e.g. the connect cell's), or a text table."""
    try:
        status = entry.session.status()
    except Exception:
        if quiet_errors:
            return
        raise
    holds = _holds(host, entry.session) if status.state not in ENDED_STATES else ""
    if host.use_widgets():
        from .views.status import StatusWidget

        limit = duration_seconds(entry.settings.get("max_runtime"))
        entry.push_status(status)
        restarts.note_live_panels(host.shell)
        panel = StatusWidget(status, refresh=entry.session.status, max_runtime=limit, show=False)
        panel.uid = str(getattr(entry.session, "job_uid", "") or "")
        # in the panel, not printed under it: the lab extension's live line says it already
        panel.set_holds(holds)
        panel.show()
        state = "Ready" if status.state == "Running" else status.state  # "Running" is the live word
        panel.mark_seen(f"{state} when shown")
        entry.watch(panel)
    else:
        print(
            format_status(status, max_runtime=duration_seconds(entry.settings.get("max_runtime")))
        )
        if holds:
            print(holds)
    gpus = _gpus(entry.session)
    if gpus:
        _show_gpus(host, gpus)


def _gpus(session: Any) -> list[dict[str, Any]]:
    """Each pod's GPU readings (engine ``session.gpus()``) when any pod has nvidia-smi or a
    command kept it from being sampled; [] otherwise, or when they cannot be read."""
    read = getattr(session, "gpus", None)
    if read is None:
        return []
    try:
        rows = [pod.as_dict() for pod in read()]
    except Exception:
        return []
    return rows if worth_showing(rows) else []


def _show_gpus(host: MagicsHost, rows: list[dict[str, Any]]) -> None:
    if host.use_widgets():
        from IPython.display import display

        display({"text/html": gpu_html(rows), "text/plain": gpu_text(rows)}, raw=True)
    else:
        print(gpu_text(rows))


# ------------------------------------------------------------------ %trainjob_close


def close(host: MagicsHost, args: Any) -> None:
    """Close one session (default), every session (--all) or a TrainJob by name."""
    alias = chosen_session(args)
    if args.all and alias:
        raise TrainJobUsageError("give either an ALIAS or --all, not both")
    timeout = args.timeout if args.timeout is not None else host.settings.close_timeout
    if alias and host.registry.find(alias) is None:
        named = [e for e in host.registry.entries() if session_name(e.session) == alias]
        if not named:
            _close_by_name(host, args, alias, timeout)
            return
        alias = named[0].alias  # %trainjob_close TRAINJOB-NAME of a session of this kernel
    if args.all or (alias is None and not host.registry.entries()):
        reports = host.registry.close_all(timeout=timeout, by="%trainjob_close", force=args.force)
        if not reports:
            print("No sessions to close.")
    else:
        reports = [
            host.registry.close(
                host.entry(alias).alias, timeout=timeout, by="%trainjob_close", force=args.force
            )
        ]
    for rep in reports:
        if not rep.refused:
            print(rep.line())
    refused = [r for r in reports if r.refused]
    if refused:
        raise TrainJobUsageError(
            "; ".join(
                r.refused.replace(
                    "close(force=True) (%trainjob_close --force)", "%trainjob_close --force"
                )
                for r in refused
            )
        )
    failed = [r for r in reports if r.error]
    if failed:
        raise TrainJobMagicError(
            failed[0].line() if len(failed) == 1 else f"{len(failed)} sessions could not be closed"
        )


def _refuse_if_detached(host: MagicsHost, name: str, where: dict[str, Any]) -> None:
    """``%trainjob_close NAME`` without --force: one line saying what it would kill."""
    try:
        live = host.engine.detached_run_of(
            name, where["namespace"], context=where["context"], config_file=where["config_file"]
        )
    except Exception:
        return  # no such job, no permission: closing says it
    if live is not None and live.live:
        raise TrainJobUsageError(
            f"{live.summary()}; closing would kill it: %trainjob_close {name} --force deletes "
            f"TrainJob {name} and the run, or leave it: it ends the job when it ends"
        )


def _close_by_name(host: MagicsHost, args: Any, name: str, timeout: float) -> None:
    """``%trainjob_close NAME`` for a TrainJob that is not a session of this kernel."""
    known = host.known_aliases()
    try:
        validate_name(name)
    except Exception:
        raise TrainJobUsageError(
            f"no session named {name!r} (this kernel's sessions: {known})"
        ) from None
    where = cluster_settings(args, host.settings)
    if not args.force:
        _refuse_if_detached(host, name, where)
    try:
        print(
            host.engine.close_trainjob(
                name,
                where["namespace"],
                context=where["context"],
                config_file=where["config_file"],
                timeout=timeout,
            )
        )
    except NotFoundError:
        raise TrainJobUsageError(
            f"no session or TrainJob named {name!r} (this kernel's sessions: {known}; "
            "list every TrainJob with %trainjob_sessions --all)"
        ) from None
