"""What tests/realcluster is pointed at, from the environment (docs/real-cluster.md):

- ``TRAINJOB_MAGICS_E2E_KUBECONFIG``: the cluster; without it every test skips saying so.
- ``TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG``: for what a user's Role need not allow (reading a
  ClusterQueue, deleting a pod); the user's kubeconfig when unset.
- ``TRAINJOB_MAGICS_E2E_RUNTIME`` (default mpi-interactive) and ``TRAINJOB_MAGICS_E2E_RUNTIMES``
  (a comma list: the tests that take a runtime run on each; default the one runtime).
- ``TRAINJOB_MAGICS_E2E_NAMESPACE`` (default: the kubeconfig's), ``..._QUEUE_NAMESPACE``,
  ``..._QUEUE`` (a Kueue LocalQueue), ``TRAINJOB_MAGICS_E2E_TIMEOUT`` (seconds, default 600).
"""

from __future__ import annotations

import os

import pytest

KUBECONFIG = os.environ.get("TRAINJOB_MAGICS_E2E_KUBECONFIG", "")
ADMIN = os.environ.get("TRAINJOB_MAGICS_E2E_ADMIN_KUBECONFIG") or KUBECONFIG
RUNTIME = os.environ.get("TRAINJOB_MAGICS_E2E_RUNTIME", "mpi-interactive")
RUNTIMES = [
    r.strip() for r in os.environ.get("TRAINJOB_MAGICS_E2E_RUNTIMES", RUNTIME).split(",") if r
]
NAMESPACE = os.environ.get("TRAINJOB_MAGICS_E2E_NAMESPACE") or None
QUEUE = os.environ.get("TRAINJOB_MAGICS_E2E_QUEUE") or None
QUEUE_NAMESPACE = os.environ.get("TRAINJOB_MAGICS_E2E_QUEUE_NAMESPACE") or NAMESPACE
WAIT = float(os.environ.get("TRAINJOB_MAGICS_E2E_TIMEOUT", "600"))

NEEDS_CLUSTER = pytest.mark.skipif(
    not KUBECONFIG,
    reason="set TRAINJOB_MAGICS_E2E_KUBECONFIG to a real cluster's kubeconfig to run",
)
