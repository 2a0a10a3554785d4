"""A local cluster speaking the Kubernetes API subset trainjob_magics uses.

Rooms, each of which may import only rooms named after it: ``cluster.py`` (:class:`LocalCluster`,
which wires the rest, plus ``tls.py`` and ``kubeconfig_file.py``); ``apiserver/`` (with
``clients/``); ``kueue/``; ``controller/``; ``kubelet/``; ``runtimes/``; ``core/`` (shared
leaves). ``apiserver/`` and ``controller/`` do not import each other.
"""

from .cluster import LocalCluster

__all__ = ["LocalCluster"]
