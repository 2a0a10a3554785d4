"""Without the permission to read what a session names (403 on the pre-check), the user's
mistake is found in the Events within seconds, on the local cluster as a kubelet, scheduler and
Job controller report it: one line naming the object, and the TrainJob is deleted."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.helpers.kube import trainjob_names
from trainjob_magics import connect
from trainjob_magics.engine.errors import PodStartError
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

CASES = {
    "pvc": (
        "persistentvolumeclaims",
        {"volumes": ["pvc:{m}:/data"]},
        'PersistentVolumeClaim "{m}"',
    ),
    "service-account": ("serviceaccounts", {"service_account": "{m}"}, 'service account "{m}"'),
    "secret": ("secrets", {"volumes": ["secret:{m}:/etc/s"]}, 'Secret "{m}"'),
    "configmap": ("configmaps", {"volumes": ["configmap:{m}:/etc/c"]}, 'ConfigMap "{m}"'),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_missing_object_is_named_from_the_events(
    cluster: LocalCluster, unique_name: Callable[[str], str], case: str
) -> None:
    resource, options, needle = CASES[case]
    missing, name = unique_name("missing"), unique_name("ev")
    cluster.faults.fail_requests("GET", rf"/{resource}/{missing}$", 403, times=5)
    filled = {
        k: [v.format(m=missing) for v in val] if isinstance(val, list) else val.format(m=missing)
        for k, val in options.items()
    }
    started = time.monotonic()
    with pytest.raises(PodStartError) as info:
        connect(
            "torch-distributed",
            name=name,
            config_file=str(cluster.kubeconfig_path),
            timeout=60,
            **filled,
        )
    took = time.monotonic() - started
    message = str(info.value)
    print(f"EVENTS-ERROR {case} {took:.1f}s: {message}")
    assert needle.format(m=missing) in message and "not found" in message, message
    assert "\n" not in message
    assert took < 20, took
    assert name not in trainjob_names(cluster.kubeconfig_path, include_deleting=False)
