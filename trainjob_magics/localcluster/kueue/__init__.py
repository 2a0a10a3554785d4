"""Kueue simulation for the local cluster (switched on with ``LocalCluster(kueue=...)``):
Workloads for queued TrainJobs, FIFO admission by quota, eviction and requeueing, queue status
and the visibility API.

Imports ``core/`` and ``controller/podspec.py`` (to size a TrainJob's pod sets) from the rest of
the local cluster.
"""

from __future__ import annotations

from .simulation import KueueSimulation
from .simulation_config import KueueConfig

__all__ = ["KueueConfig", "KueueSimulation"]
