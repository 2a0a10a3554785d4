"""The IPython magics: one class declaring every magic, each body one line.

The work is in the command modules (``connect``, ``cell``, ``sessions``, ``files``), which get
a :class:`~.host.MagicsHost` and never call back into this class. Every magic runs under
:func:`~.failures.magic_errors`, the one place that decides how its errors are shown. Settings
come from :class:`~.config.TrainJobConfig` (``%config TrainJobMagics``).
"""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from . import cell, connect, detach, files, forward, python, restarts, sessions
from .config import TrainJobConfig
from .failures import magic_errors
from .host import MagicsHost
from .options import (
    POD_HELP,
    PYTHON_HELP,
    cluster_args,
    connect_args,
    exec_args,
    no_verify,
    output_args,
    parse,
    retries_option,
    session_args,
    session_option,
)
from .registry import SessionRegistry, install_hooks, uninstall_hooks


@magics_class
class TrainJobMagics(Magics, TrainJobConfig):
    """Magics for interactive TrainJobs; settings via ``%config TrainJobMagics``."""

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        registry = SessionRegistry(exit_timeout=lambda: self.exit_close_timeout)
        self.host = MagicsHost(shell=shell, settings=self, registry=registry)
        if shell is not None:
            install_hooks(shell, self.close_all)

    @property
    def registry(self) -> SessionRegistry:
        """This kernel's sessions."""
        return self.host.registry

    def close_all(self, reason: str = "") -> None:
        """Close every session (kernel shutdown or restart, %reset, %unload_ext) and report."""
        exiting = reason in ("shutdown", "restart")
        final = "Closed at kernel exit" if exiting else "Deleted"
        by = {"reset": "%reset", "unload": "%unload_ext"}.get(reason, "")
        reports = self.host.registry.close_all(
            timeout=self.exit_close_timeout, final_state=final, by=by
        )
        for report in reports:
            print(report.line())
        if exiting:  # for the kernel after a restart: the panels it cannot update any more
            # a session left running (its detached run lives) was not closed: the next kernel
            # says so ("list them with %trainjob_sessions --all"), as after a crash
            closed = not any(r.left for r in reports)
            restarts.note_exit(self.shell, restart=reason == "restart", closed=closed)

    def unload(self) -> None:
        """Close this kernel's sessions and remove the hooks."""
        self.close_all("unload")
        restarts.forget(self.shell)
        if self.shell is not None:
            uninstall_hooks(self.shell)

    @magic_errors
    @magic_arguments()
    @connect_args
    @line_magic
    def trainjob_connect(self, line: str = "") -> None:
        """Create (or attach to) an interactive TrainJob and wait until its trainer pod runs.

        Re-running the same line reuses the live session instead of creating a second TrainJob.
        """
        connect.connect(self.host, parse(self.trainjob_connect, line))

    @magic_errors
    @magic_arguments()
    @session_args
    @argument(
        "--pod",
        metavar="TARGET",
        help="Run on these pods at once: all, node, node-2, launcher, a pod name, a comma list "
        "(default: the trainer). Output grouped per pod.",
    )
    @argument("--python", action="store_true", help=PYTHON_HELP)
    @argument(
        "--detach",
        action="store_true",
        help="Start the cell as a run of the TrainJob, not of this kernel: returns at once, "
        "outlives the kernel, ends the job with its exit code (%%trainjob_logs --follow).",
    )
    @argument(
        "--no-ranks",
        dest="no_ranks",
        action="store_true",
        help="Run mpirun/mpiexec as written: no per-rank output (TrainJobMagics.rank_output).",
    )
    @argument(
        "--no-world-check",
        dest="no_world_check",
        action="store_true",
        help="No warning when mpirun's ranks ran on fewer pods than the job has "
        "(TrainJobMagics.world_check).",
    )
    @exec_args
    @output_args
    @cell_magic
    def trainjob(self, line: str, cell_body: str) -> Any:
        """Run the cell body as a shell script (``sh -c``) in the session's trainer pod; with
        --python, as Python in the pod's persistent interpreter (names stay for the next cell).

        Output streams live; a non-zero exit (or a Python exception) fails the cell. The result
        is kept in ``_trainjob`` (and ``trainjob_magics.magics.last_result()``).
        """
        args = parse(self.trainjob, line)
        if args.detach:
            return detach.detach_cell(self.host, args, cell_body)
        if args.python:
            return python.run_cell(self.host, args, cell_body)
        cell.run_cell(self.host, args, cell_body)
        return None

    @magic_errors
    @magic_arguments()
    @argument("names", nargs="+", metavar="NAME", help="Variables of the notebook to send.")
    @argument("--pod", default="trainer", help=POD_HELP)
    @session_option
    @line_magic
    def trainjob_push(self, line: str = "") -> None:
        """Send notebook variables (pickled) into the pods' Python interpreters."""
        python.push(self.host, parse(self.trainjob_push, line))

    @magic_errors
    @magic_arguments()
    @argument("names", nargs="+", metavar="NAME", help="Variables of the remote interpreter.")
    @argument(
        "--pod",
        default="trainer",
        help="One pod (trainer, node-2, a pod name), or several (all, node): then each NAME "
        "becomes a dict pod -> value.",
    )
    @session_option
    @line_magic
    def trainjob_pull(self, line: str = "") -> None:
        """Bring values (pickled) from a pod's Python interpreter into the notebook."""
        python.pull(self.host, parse(self.trainjob_pull, line))

    @magic_errors
    @magic_arguments()
    @argument("--pod", default="trainer", help=POD_HELP)
    @session_option
    @line_magic
    def trainjob_python_reset(self, line: str = "") -> None:
        """Restart the pods' Python interpreters: every name defined there is gone."""
        python.reset(self.host, parse(self.trainjob_python_reset, line))

    @magic_errors
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
        sessions.list_sessions(self.host, parse(self.trainjob_sessions, line))

    @magic_errors
    @magic_arguments()
    @session_args
    @cluster_args
    @line_magic
    def trainjob_status(self, line: str = "") -> None:
        """Show a session's TrainJob and pods (a status panel, or a text table); the session's
        earlier panels (e.g. the connect cell's) show the new status too.

        ALIAS may also name any TrainJob trainjob-magics created (see %trainjob_sessions --all);
        the cluster options say where to look for it.
        """
        sessions.show_status(self.host, parse(self.trainjob_status, line))

    @magic_errors
    @magic_arguments()
    @session_args
    @argument("--all", action="store_true", help="Close every session of this kernel.")
    @argument(
        "--force",
        action="store_true",
        help="Also when a detached run lives: delete the TrainJob and kill the run.",
    )
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
        sessions.close(self.host, parse(self.trainjob_close, line))

    @magic_errors
    @magic_arguments()
    @argument("path", help="File to write in the pod(s); relative to the working directory.")
    @argument("--pod", default="trainer", help=POD_HELP)
    @session_option
    @cell_magic
    def trainjob_writefile(self, line: str, cell: str) -> None:
        """Write the cell body to PATH in the pod(s), as ``%%writefile`` does locally."""
        files.write_file(self.host, parse(self.trainjob_writefile, line), cell)

    @magic_errors
    @magic_arguments()
    @argument("local", help="Local file or directory.")
    @argument("remote", help="Destination in the pod(s); ending in / means inside that directory.")
    @argument("--pod", default="trainer", help=POD_HELP)
    @no_verify
    @retries_option
    @session_option
    @line_magic
    def trainjob_upload(self, line: str = "") -> None:
        """Copy a local file or directory to the pod(s) as a tar stream (like kubectl cp)."""
        files.upload(self.host, parse(self.trainjob_upload, line))

    @magic_errors
    @magic_arguments()
    @argument("remote", help="File or directory in the pod.")
    @argument("local", help="Local destination; ending in / means inside that directory.")
    @argument("--pod", default="trainer", help="One pod: trainer, node-2, a pod name.")
    @no_verify
    @retries_option
    @session_option
    @line_magic
    def trainjob_download(self, line: str = "") -> None:
        """Copy a file or directory from a pod, refusing archive members that escape LOCAL."""
        files.download(self.host, parse(self.trainjob_download, line))

    @magic_errors
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
        files.logs(self.host, parse(self.trainjob_logs, line))

    @magic_errors
    @magic_arguments()
    @argument("words", nargs="*", metavar="[ALIAS] PORT", help="Session, and the pod's port.")
    @argument("--pod", metavar="TARGET", help="One pod: trainer (default), node-1, a pod name.")
    @argument(
        "--local-port", type=int, metavar="N", help="Port on this host (default: a free one)."
    )
    @argument("--address", metavar="ADDR", help="Address to listen on (default: 127.0.0.1).")
    @argument("--show", action="store_true", help="Show the page in an IFrame below the link.")
    @argument("--list", action="store_true", help="List the open forwards.")
    @argument(
        "--stop",
        nargs="?",
        const="all",
        metavar="PORT|all",
        help="Stop the forward of PORT, or all of them (the default).",
    )
    @session_option
    @line_magic
    def trainjob_forward(self, line: str = "") -> None:
        """Forward a port of this host to PORT of the session's trainer pod (TensorBoard, a
        profiler, a dashboard) through pods/portforward, and show the link.

        Each connection is its own stream; new connections follow a replaced trainer pod; a
        forward ends with its session (close, kernel exit or restart, %reset).
        """
        forward.forward(self.host, parse(self.trainjob_forward, line))


__all__ = ["TrainJobMagics"]
