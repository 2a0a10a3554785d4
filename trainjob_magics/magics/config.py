"""Configuration of the magics, settable by ``%config TrainJobMagics.x = ...`` and profiles."""

from __future__ import annotations

from traitlets import Bool, CaselessStrEnum, Float, Int, Unicode
from traitlets.config import Configurable


class TrainJobConfig(Configurable):
    """Settings of the TrainJob magics (mixed into the ``TrainJobMagics`` class)."""

    namespace = Unicode(
        "",
        help="Namespace for new sessions; empty: the kubeconfig context's namespace.",
    ).tag(config=True)
    default_runtime = Unicode(
        "",
        help="Runtime used by %trainjob_connect when none is given (e.g. 'mpi-interactive').",
    ).tag(config=True)
    connect_timeout = Float(
        600.0,
        help="Seconds %trainjob_connect waits for the trainer pod before giving up.",
    ).tag(config=True)
    keep_alive_command = Unicode(
        "",
        help="Shell command that keeps the trainer pod alive; empty: the engine's default.",
    ).tag(config=True)
    idle_timeout = Float(
        1800.0,
        help="Seconds without a heartbeat from this kernel after which a new session's TrainJob "
        "ends itself and frees its resources (heartbeats flow while the kernel lives, so this "
        "bounds how long a killed kernel's job lingers); 0 keeps it forever.",
    ).tag(config=True)
    context = Unicode("", help="Kubeconfig context to use; empty: the current one.").tag(
        config=True
    )
    kubeconfig = Unicode("", help="Kubeconfig file; empty: $KUBECONFIG or ~/.kube/config.").tag(
        config=True
    )
    display_max_lines = Int(
        1000,
        help="Lines of a cell's output kept on screen; earlier lines are hidden (not lost).",
    ).tag(config=True)
    display_max_line_chars = Int(
        10000, help="Characters shown per output line; the rest is cut on screen."
    ).tag(config=True)
    update_interval = Float(
        0.1, help="Minimum seconds between two screen updates of a streaming output."
    ).tag(config=True)
    raise_on_error = Bool(
        True,
        help="A non-zero remote exit code fails the cell (stops Run All, nbconvert, papermill).",
    ).tag(config=True)
    widgets = CaselessStrEnum(
        ["auto", "on", "off"],
        default_value="auto",
        help="Widget output: 'auto' uses widgets in a Jupyter kernel and text in a terminal.",
    ).tag(config=True)
    close_timeout = Float(
        180.0, help="Seconds %trainjob_close waits for the TrainJob's pods to go."
    ).tag(config=True)
    exit_close_timeout = Float(
        4.0,
        help="Seconds to wait per session when closing at kernel exit, restart or %reset.",
    ).tag(config=True)
