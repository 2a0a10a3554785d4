"""The MultiKueue refusal's names when the user may read the LocalQueue but not the
cluster-scoped ClusterQueue (a namespaced role; seen on the real stack by tests/differential's
multikueue-refusal scenario): the ClusterQueue is still named, from the LocalQueue."""

from __future__ import annotations

from typing import Any

import pytest

from trainjob_magics.engine.errors import PermissionDeniedError
from trainjob_magics.engine.kueue import admission
from trainjob_magics.engine.kueue import api as kueue_api_mod


@pytest.fixture
def namespaced_user(monkeypatch: pytest.MonkeyPatch) -> None:
    def request(_api: Any, _method: str, path: str, **kw: Any) -> dict[str, Any]:
        if "/localqueues/" in path:
            return {"spec": {"clusterQueue": "multi-cq"}}
        raise PermissionDeniedError(f"cannot get {kw.get('resource')}", status=403)

    monkeypatch.setattr(kueue_api_mod, "request", request)
    monkeypatch.setattr(kueue_api_mod, "kueue_api", lambda _api: type("V", (), {"version": ""}))


def test_an_unreadable_cluster_queue_is_still_named(namespaced_user: None) -> None:
    assert kueue_api_mod.multikueue_check(None, "ns", "mk") == ("multi-cq", None)  # type: ignore[arg-type]
    job = {
        "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "mk"}},
        "spec": {"managedBy": "kueue.x-k8s.io/multikueue"},
    }
    line = admission.multikueue_refusal(None, "ns", "job", job)  # type: ignore[arg-type]
    assert line is not None and "(ClusterQueue multi-cq has the MultiKueue admission check;" in line
