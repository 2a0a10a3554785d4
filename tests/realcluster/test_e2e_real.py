"""The seed end-to-end flow against a real cluster (Kubeflow Trainer v2 installed).

Runs only when TRAINJOB_MAGICS_E2E_KUBECONFIG names a kubeconfig; optional
TRAINJOB_MAGICS_E2E_RUNTIME (default mpi-interactive) and TRAINJOB_MAGICS_E2E_NAMESPACE.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from trainjob_magics import connect
from trainjob_magics.engine import errors as E
from trainjob_magics.engine.trainjob.orphans import list_trainjobs

KUBECONFIG = os.environ.get("TRAINJOB_MAGICS_E2E_KUBECONFIG", "")
RUNTIME = os.environ.get("TRAINJOB_MAGICS_E2E_RUNTIME", "mpi-interactive")
NAMESPACE = os.environ.get("TRAINJOB_MAGICS_E2E_NAMESPACE") or None

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not KUBECONFIG,
        reason="set TRAINJOB_MAGICS_E2E_KUBECONFIG to a real cluster's kubeconfig to run",
    ),
]


def test_seed_flow_on_a_real_cluster() -> None:
    s = connect(RUNTIME, config_file=KUBECONFIG, namespace=NAMESPACE, timeout=600)
    try:
        r = s.execute("hostname; echo ok")
        assert r.ok and r.stdout.endswith("ok\n")
        assert s.status().state == "Running"
        assert s.name in {j.name for j in list_trainjobs(NAMESPACE, config_file=KUBECONFIG)}
        box: dict = {}

        def run() -> None:
            try:
                s.execute("echo started; sleep 1000 & sleep 1000; wait")
            except E.TrainJobError as exc:
                box["e"] = exc

        t = threading.Thread(target=run)
        t.start()
        time.sleep(3)
        reports = s.interrupt()
        t.join(30)
        assert reports and all(r.stopped for r in reports), reports
        left = s.execute("ps -eo args 2>/dev/null | grep -c '^sleep 1000' || true")
        assert left.stdout.strip() in ("0", "")
    finally:
        s.close(timeout=300)
    assert s.closed
