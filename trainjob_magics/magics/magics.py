"""The IPython magics: declarations only; each body delegates to the module doing the work.

``connect.py`` (%trainjob_connect), ``cell.py`` (%%trainjob), ``sessions.py`` (sessions,
status, close); engine calls run through ``worker.Pump`` so the cell's thread stays
interruptible and renders every update; errors are one line (``errors.py``).
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from . import cell, connect, frontend, sessions
from .arguments import cluster_args, exec_args, output_args, parse, session_args
from .config import TrainJobConfig
from .errors import TrainJobUsageError
from .registry import Entry, SessionRegistry, install_hooks, set_exit_timeout, uninstall_hooks


@magics_class
class TrainJobMagics(Magics, TrainJobConfig):
    """Magics for interactive TrainJobs; settings via ``%config TrainJobMagics``."""

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.registry = SessionRegistry()
        set_exit_timeout(self.exit_close_timeout)
        if shell is not None:
            install_hooks(shell, self._close_for)

    # -- shared by the magic modules

    def use_widgets(self) -> bool:
        """Whether output goes to widgets (else text), per ``TrainJobMagics.widgets``."""
        return frontend.use_widgets(self.shell, self.widgets)

    def entry(self, alias: str | None) -> Entry:
        """The session ``alias`` (default when None), or a one-line usage error."""
        try:
            return self.registry.get(alias)
        except UsageError as exc:
            raise TrainJobUsageError(str(exc)) from None

    def show_status(self, entry: Entry, quiet_errors: bool = False) -> None:
        """Show a session's status (widget or text)."""
        sessions.render_status(self, entry, quiet_errors)

    def _close_for(self, reason: str) -> None:
        """Close every session (kernel shutdown/restart, %reset, %unload_ext) and report."""
        for rep in self.registry.close_all(timeout=self.exit_close_timeout):
            print(rep.line())

    def unload(self) -> None:
        """Close this kernel's sessions and remove the hooks."""
        self._close_for("unload")
        if self.shell is not None:
            uninstall_hooks(self.shell)

    # -- magics

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
    @argument(
        "--timeout",
        type=float,
        help="Seconds to wait for the trainer pod (default: TrainJobMagics.connect_timeout).",
    )
    @argument(
        "--as",
        "--session",
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
        connect.connect(self, parse(self.trainjob_connect, line))

    @magic_arguments()
    @session_args
    @argument(
        "--pod",
        metavar="TARGET",
        help="Run on these pods at once: all, node, node-2, launcher, a pod name, a comma list "
        "(default: the trainer). Output grouped per pod.",
    )
    @exec_args
    @output_args
    @cell_magic
    def trainjob(self, line: str, cell_body: str) -> None:
        """Run the cell body as a shell script (``sh -c``) in the session's trainer pod.

        Output streams live; a non-zero exit fails the cell. The result is kept in ``_trainjob``
        (and ``trainjob_magics.magics.last_result()``).
        """
        cell.run_cell(self, parse(self.trainjob, line), cell_body)

    @magic_arguments()
    @argument(
        "--all",
        action="store_true",
        help="List every TrainJob trainjob-magics created in the namespace (any kernel/host).",
    )
    @cluster_args
    @line_magic
    def trainjob_sessions(self, line: str = "") -> None:
        """List this kernel's sessions (the default one is marked); --all lists every
        TrainJob of the project in the namespace, with owner, age and state."""
        sessions.list_sessions(self, parse(self.trainjob_sessions, line))

    @magic_arguments()
    @session_args
    @cluster_args
    @line_magic
    def trainjob_status(self, line: str = "") -> None:
        """Show a session's TrainJob and pods (a widget with a Refresh button, or a text table).

        ALIAS may also name any TrainJob trainjob-magics created (see %trainjob_sessions --all);
        the cluster options say where to look for it.
        """
        sessions.show_status(self, parse(self.trainjob_status, line))

    @magic_arguments()
    @session_args
    @argument("--all", action="store_true", help="Close every session of this kernel.")
    @argument(
        "--timeout",
        type=float,
        help="Seconds to wait for the pods to go (default: TrainJobMagics.close_timeout).",
    )
    @cluster_args
    @line_magic
    def trainjob_close(self, line: str = "") -> None:
        """Close a session: delete its TrainJob and wait for its pods to go.

        ALIAS may also name any TrainJob trainjob-magics created (see %trainjob_sessions --all),
        e.g. one orphaned by a dead kernel; the cluster options say where to look for it.
        """
        sessions.close(self, parse(self.trainjob_close, line))
