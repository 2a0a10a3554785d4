"""The controller of the local cluster: TrainJob -> JobSet -> pods, reacting to store events.

Builds the JobSet and pod bodies from the runtime (:mod:`.podspec`), walks each pod through its
phases and runs its main command through the kubelet (:mod:`.pod_lifecycle`), and writes the
TrainJob and JobSet status (:mod:`.job_status`).

Imports ``core/``, ``kubelet/`` and ``runtimes/`` from the rest of the local cluster.
"""

from .trainjob_controller import Controller

__all__ = ["Controller"]
