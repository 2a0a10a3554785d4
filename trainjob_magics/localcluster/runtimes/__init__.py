"""Training runtimes: the preloaded ClusterTrainingRuntime YAMLs of this folder and
:mod:`.loader`, which parses runtime YAML and reads a runtime's replicated jobs and MPI policy.

Imports nothing from the rest of the local cluster.
"""

from .loader import load_builtin_runtimes, parse_runtime_yaml

__all__ = ["load_builtin_runtimes", "parse_runtime_yaml"]
