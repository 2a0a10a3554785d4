"""Configuration of the magics, settable by ``%config TrainJobMagics.x = ...`` and profiles."""

from __future__ import annotations

from typing import Any

from traitlets import Bool, CaselessStrEnum, Float, Int, TraitType, Unicode
from traitlets.config import Configurable


def _setting(kind: type[TraitType], default: Any, help: str) -> Any:
    """A configurable trait (``%config`` and profiles can set it)."""
    return kind(default, help=help).tag(config=True)


class TrainJobConfig(Configurable):
    """Settings of the TrainJob magics (mixed into the ``TrainJobMagics`` class)."""

    namespace = _setting(
        Unicode, "", "Namespace for new sessions; empty: the kubeconfig context's namespace."
    )
    default_runtime = _setting(
        Unicode,
        "",
        "Runtime used by %trainjob_connect when none is given (e.g. 'mpi-interactive').",
    )
    connect_timeout = _setting(
        Float, 600.0, "Seconds %trainjob_connect waits for the trainer pod before giving up."
    )
    idle_stop = _setting(
        Unicode,
        "",
        "Close a session after this long without a command (30m, 2h); empty: off "
        "(%trainjob_connect --idle-stop overrides it).",
    )
    keep_alive_command = _setting(
        Unicode, "", "Shell command that keeps the trainer pod alive; empty: the engine's default."
    )
    idle_timeout = _setting(
        Float,
        1800.0,
        "Seconds without a heartbeat from this kernel after which a new session's TrainJob "
        "ends itself and frees its resources (heartbeats flow while the kernel lives, so this "
        "bounds how long a killed kernel's job lingers); 0 keeps it forever.",
    )
    image_pull_retries = _setting(
        Int,
        3,
        "Failed image pulls of the trainer pod after which %trainjob_connect gives up (and deletes "
        "the new TrainJob); an invalid image name gives up at once.",
    )
    api_retry_seconds = _setting(
        Float,
        30.0,
        "Seconds a cell or %trainjob_connect waits for an API server that answered before and "
        "is now unreachable (a restart, a control-plane upgrade), printing 'API server "
        "unreachable, retrying'; 0 fails at once.",
    )
    context = _setting(Unicode, "", "Kubeconfig context to use; empty: the current one.")
    kubeconfig = _setting(Unicode, "", "Kubeconfig file; empty: $KUBECONFIG or ~/.kube/config.")
    display_max_lines = _setting(
        Int, 1000, "Lines of a cell's output kept on screen; earlier lines are hidden (not lost)."
    )
    display_max_line_chars = _setting(
        Int, 10000, "Characters shown per output line; the rest is cut on screen."
    )
    update_interval = _setting(
        Float, 0.1, "Minimum seconds between two screen updates of a streaming output."
    )
    rank_output = _setting(
        Bool,
        True,
        "A cell that runs mpirun/mpiexec (Open MPI, MPICH's Hydra) gets each rank's output "
        "apart, from the launcher's own tagging added when the command chose no output form "
        "(%%trainjob --no-ranks turns it off for one cell).",
    )
    world_check = _setting(
        Bool,
        True,
        "After a tagged mpirun, one warning line when the ranks ran on fewer pods than the job "
        "has, or another count of ranks than asked (%%trainjob --no-world-check).",
    )
    raise_on_error = _setting(
        Bool,
        True,
        "A non-zero remote exit code fails the cell (stops Run All, nbconvert, papermill).",
    )
    show_tracebacks = _setting(
        Bool,
        False,
        "Show the full traceback of every error of a magic. Off: an error you can fix (a bad "
        "option, a missing pod, a denied permission) is one line, and only an unexpected one "
        "(a bug) shows its traceback.",
    )
    widgets = CaselessStrEnum(
        ["auto", "on", "off"],
        default_value="auto",
        help="Widget output: 'auto' uses widgets in a Jupyter kernel and text in a terminal.",
    ).tag(config=True)
    python = _setting(
        Unicode,
        "python3",
        "Python interpreter of %%trainjob --python, %trainjob_push and %trainjob_pull in the "
        "pods (a name on the pod's PATH or a path).",
    )
    close_timeout = _setting(
        Float, 180.0, "Seconds %trainjob_close waits for the TrainJob's pods to go."
    )
    exit_close_timeout = _setting(
        Float, 4.0, "Seconds to wait per session when closing at kernel exit, restart or %reset."
    )
    forward_url = _setting(
        Unicode,
        "auto",
        "The link %trainjob_forward shows: 'auto' is {base_url}proxy/PORT/ when "
        "jupyter-server-proxy is installed (works on JupyterHub), else http://127.0.0.1:PORT/; "
        "'direct' is always the local URL; anything else is a template with {port}, e.g. "
        "'https://hub.example.com/user/me/proxy/{port}/'.",
    )
