"""``%trainjob_forward``: open, list and stop port forwards to a session's pods."""

from __future__ import annotations

import threading
from typing import Any

from .failures import TrainJobUsageError
from .host import MagicsHost
from .links import browser_url
from .registry import Entry, session_name
from .sidebar_notes import note_forwards
from .views.forward import ForwardPanel

USAGE = (
    "usage: %trainjob_forward [ALIAS] PORT [--pod TARGET] [--local-port N] [--address ADDR] "
    "[--show] | --list | --stop [PORT|all]"
)


def _alias_and_port(args: Any) -> tuple[str | None, str | None]:
    words = list(args.words or [])
    if len(words) > 2:
        raise TrainJobUsageError(f"too many arguments: {' '.join(words)}; {USAGE}")
    if len(words) == 2:
        alias, port = words
    elif len(words) == 1 and not words[0].isdigit():
        alias, port = words[0], None
    else:
        alias, port = None, (words[0] if words else None)
    option = args.session
    if alias and option and alias != option:
        raise TrainJobUsageError(
            f"two sessions given ({alias!r} and --session {option}): give one of them"
        )
    return option or alias, port


def forward(host: MagicsHost, args: Any) -> None:
    """Dispatch: --list, --stop, or open a forward."""
    alias, port = _alias_and_port(args)
    if args.list:
        list_forwards(host, alias)
    elif args.stop is not None:
        stop(host, alias, args.stop if port is None else port)
    elif port is None:
        raise TrainJobUsageError(f"give the PORT of the pod to forward; {USAGE}")
    else:
        start(host, host.entry(alias), port, args)


def start(host: MagicsHost, entry: Entry, port: str, args: Any) -> None:
    """Open a forward and show its panel (link, IFrame with --show)."""
    session = entry.session
    holder: dict[str, ForwardPanel] = {}
    early: list[str] = []
    lock = threading.Lock()

    def problem(message: str) -> None:  # from the forward's threads
        with lock:
            panel = holder.get("panel")
            if panel is None:
                early.append(message)
                return
        panel.problem(message)

    fwd = session.forward(
        port,
        pod=args.pod,
        local_port=args.local_port,
        address=args.address or "127.0.0.1",
        on_error=problem,
    )
    link = browser_url(fwd.url, fwd.local_port, host.settings.forward_url)
    panel = ForwardPanel(
        link=link,
        port=fwd.port,
        pod=fwd.pod,
        alias=entry.alias,
        widgets=host.use_widgets(),
        show=bool(args.show),
        job=(
            session_name(session),
            str(getattr(session, "namespace", "")),
            str(getattr(session, "job_uid", "") or ""),
        ),
    )
    with lock:
        holder["panel"] = panel
        waiting = list(early)
    for message in waiting:
        panel.problem(message)

    def link_of(f: Any) -> str:
        return browser_url(f.url, f.local_port, host.settings.forward_url)

    def closed(f: Any) -> None:
        panel.ended(_ended_state(f.closed_reason))
        if not session.closed:  # a closing session's job goes with its notes
            note_forwards(session, link_of)

    note_forwards(session, link_of)  # the sidebar lists it and opens it
    fwd.when_closed(closed)


def _ended_state(reason: str) -> str:
    return f"Stopped ({reason})" if reason else "Stopped"


def _entries(host: MagicsHost, alias: str | None) -> list[Entry]:
    if alias is None:
        return host.registry.entries()
    return [host.entry(alias)]


def list_forwards(host: MagicsHost, alias: str | None) -> None:
    """Print every open forward of this kernel's sessions (or of ALIAS)."""
    rows = [(e.alias, f) for e in _entries(host, alias) for f in getattr(e.session, "forwards", [])]
    if not rows:
        print("No port forwards. Open one with %trainjob_forward PORT.")
        return
    header = ("SESSION", "PORT", "POD", "VIA", "URL", "CONNECTIONS")
    table = [header] + [
        (
            a,
            str(f.port),
            f.pod,
            f.mode or "-",  # tunnel (one WebSocket carrying SPDY) or websocket (one each)
            browser_url(f.url, f.local_port, host.settings.forward_url),
            f"{f.active} open, {f.connections} total",
        )
        for a, f in rows
    ]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def stop(host: MagicsHost, alias: str | None, which: str) -> None:
    """Close the forwards of PORT (remote or local port), or all of them."""
    entries = _entries(host, alias)
    chosen = [
        f
        for e in entries
        for f in getattr(e.session, "forwards", [])
        if which == "all" or str(f.port) == which or str(f.local_port) == which
    ]
    if which != "all" and not which.isdigit():
        raise TrainJobUsageError(f"--stop takes a PORT or 'all', got {which!r}")
    if not chosen:
        if which == "all":
            print("No port forwards to stop.")
            return
        open_ports = ", ".join(str(f.port) for e in entries for f in e.session.forwards)
        raise TrainJobUsageError(
            f"no port forward of port {which} (open: {open_ports or 'none'}); see "
            "%trainjob_forward --list"
        )
    for f in chosen:
        f.close(reason="%trainjob_forward --stop")
        print(f"Stopped forwarding {f.url} -> port {f.port} of pod {f.pod}.")


__all__ = ["forward"]
