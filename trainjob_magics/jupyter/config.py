"""The server extension's settings (``c.TrainJobSessions.namespaces = [...]`` in
``jupyter_server_config.py``, or ``--TrainJobSessions.namespaces=...``)."""

from __future__ import annotations

from traitlets import Bool, List, Unicode
from traitlets.config import Configurable


class TrainJobSessions(Configurable):
    """Where the sidebar looks for sessions, besides the kubeconfig's namespace and the ones
    this user's kernels connected in."""

    namespaces = List(
        Unicode(), help="More namespaces to list sessions in (each watched once)."
    ).tag(config=True)
    kubeconfig = Unicode(
        "", help="The kubeconfig file (default: KUBECONFIG, ~/.kube/config, in-cluster)."
    ).tag(config=True)
    context = Unicode("", help="The kubeconfig context (default: its current one).").tag(
        config=True
    )
    all_users = Bool(
        False, help="List every user's sessions, not only those this OS user created."
    ).tag(config=True)
