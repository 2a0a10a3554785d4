"""``%trainjob_sessions``, ``%trainjob_status``, ``%trainjob_close``: list, show, close.

A name that is not a session of this kernel may name any TrainJob trainjob-magics created
(e.g. one orphaned by a dead kernel); the cluster options say where to look for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .arguments import chosen_session, cluster_settings
from .errors import TrainJobMagicError, TrainJobUsageError, as_one_line
from .orphans import format_trainjobs
from .registry import Entry, session_name
from .text_output import SessionRow, format_sessions, format_status

if TYPE_CHECKING:
    from .magics import TrainJobMagics


def known_sessions(magics: TrainJobMagics) -> str:
    """``a, b`` (or ``none``): this kernel's session aliases, for error messages."""
    return ", ".join(e.alias for e in magics.registry.entries()) or "none"


# ------------------------------------------------------------------ %trainjob_sessions


def list_sessions(magics: TrainJobMagics, args: Any) -> None:
    """This kernel's sessions (a table widget or text); --all: every TrainJob of the project."""
    if args.all:
        list_all_trainjobs(magics, args)
        return
    default = magics.registry.default_alias
    rows = []
    for e in magics.registry.entries():
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
    if magics.use_widgets():
        from .widgets_sessions import show_sessions

        show_sessions(rows)
    else:
        print(format_sessions(rows))


def _managed_trainjobs(magics: TrainJobMagics, args: Any) -> tuple[list[Any], str]:
    """Every TrainJob the project created in the namespace, and that namespace."""
    from ..engine.trainjob.orphans import list_trainjobs

    where = cluster_settings(args, magics)
    try:
        jobs = list_trainjobs(
            where["namespace"], context=where["context"], config_file=where["config_file"]
        )
    except Exception as exc:
        raise as_one_line(exc) from None
    namespace = jobs[0].namespace if jobs else where["namespace"] or ""
    return jobs, namespace


def list_all_trainjobs(magics: TrainJobMagics, args: Any) -> None:
    """``%trainjob_sessions --all``."""
    jobs, namespace = _managed_trainjobs(magics, args)
    own = {session_name(e.session) for e in magics.registry.entries()}
    print(format_trainjobs(jobs, own, namespace))


# ------------------------------------------------------------------ %trainjob_status


def show_status(magics: TrainJobMagics, args: Any) -> None:
    """A session's status; a NAME that is no session: that TrainJob's row from the cluster.

    With no session at all and no cluster option, NAME is taken as a session name (nothing is
    sent): the user most likely has not connected yet.
    """
    alias = chosen_session(args)
    has_sessions = bool(magics.registry.entries())
    asks_cluster = bool(args.namespace or args.context or args.kubeconfig)
    if alias is not None and magics.registry.find(alias) is None and (has_sessions or asks_cluster):
        _status_by_name(magics, args, alias)
        return
    magics.show_status(magics.entry(alias))


def _status_by_name(magics: TrainJobMagics, args: Any, name: str) -> None:
    jobs, namespace = _managed_trainjobs(magics, args)
    found = [j for j in jobs if j.name == name]
    if not found:
        raise TrainJobUsageError(
            f"no session or TrainJob named {name!r} (this kernel's sessions: "
            f"{known_sessions(magics)}; list every TrainJob with %trainjob_sessions --all)"
        )
    print(format_trainjobs(found, set(), namespace))


def render_status(magics: TrainJobMagics, entry: Entry, quiet_errors: bool = False) -> None:
    """Show ``entry``'s status: a widget with a Refresh button, or a text table."""
    try:
        status = entry.session.status()
    except Exception as exc:
        if quiet_errors:
            return
        raise as_one_line(exc) from None
    if magics.use_widgets():
        from .widgets_status import StatusWidget

        entry.status_widget = StatusWidget(status, refresh=entry.session.status)
    else:
        print(format_status(status))


# ------------------------------------------------------------------ %trainjob_close


def close(magics: TrainJobMagics, args: Any) -> None:
    """Close one session (default), every session (--all) or a TrainJob by name."""
    alias = chosen_session(args)
    if args.all and alias:
        raise TrainJobUsageError("give either an ALIAS or --all, not both")
    timeout = args.timeout if args.timeout is not None else magics.close_timeout
    if alias and magics.registry.find(alias) is None:
        _close_by_name(magics, args, alias, timeout)
        return
    if args.all or (alias is None and not magics.registry.entries()):
        reports = magics.registry.close_all(timeout=timeout)
        if not reports:
            print("No sessions to close.")
    else:
        reports = [magics.registry.close(magics.entry(alias).alias, timeout=timeout)]
    for rep in reports:
        print(rep.line())
    failed = [r for r in reports if r.error]
    if failed:
        raise TrainJobMagicError(
            failed[0].line() if len(failed) == 1 else f"{len(failed)} sessions could not be closed"
        )


def _close_by_name(magics: TrainJobMagics, args: Any, name: str, timeout: float) -> None:
    """``%trainjob_close NAME`` for a TrainJob that is not a session of this kernel."""
    from ..engine.errors import NotFoundError
    from ..engine.trainjob.orphans import close_trainjob
    from ..engine.validation import validate_name

    known = known_sessions(magics)
    try:
        validate_name(name)
    except Exception:
        raise TrainJobUsageError(
            f"no session named {name!r} (this kernel's sessions: {known})"
        ) from None
    where = cluster_settings(args, magics)
    try:
        print(
            close_trainjob(
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
    except Exception as exc:
        raise as_one_line(exc) from None
