"""A local cluster speaking the Kubernetes API subset trainjob_magics uses."""

from .cluster import LocalCluster

__all__ = ["LocalCluster"]
