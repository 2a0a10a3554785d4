"""A session's TrainJob tied to the notebook's pod (engine/trainjob/notebook_pod.py): only for
the pod's own ServiceAccount, only in the pod's namespace, and untied for a detached run. The
end-to-end behaviour (the hub stops the server, the garbage collector deletes the TrainJob) is
tests/realstack/test_jupyterhub.py's."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trainjob_magics.engine.errors import PermissionDeniedError
from trainjob_magics.engine.kube import credentials
from trainjob_magics.engine.trainjob import notebook_pod


def _api(in_cluster: bool) -> Any:
    configuration = SimpleNamespace()
    setattr(
        configuration,
        credentials.ATTRIBUTE,
        SimpleNamespace(in_cluster=in_cluster),
    )
    return SimpleNamespace(configuration=configuration)


@pytest.fixture
def pod_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "namespace").write_text("team-a\n")
    monkeypatch.setattr(notebook_pod, "service_account_dir", lambda: tmp_path)
    return tmp_path


def test_a_kernel_in_its_pods_namespace_ties_the_job_to_the_pod(
    pod_namespace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def request(api: Any, method: str, path: str, **kw: Any) -> dict[str, Any]:
        asked.append(f"{method} {path}")
        return {"metadata": {"name": socket.gethostname(), "uid": "u-1"}}

    monkeypatch.setattr(notebook_pod, "request", request)
    ref = notebook_pod.owner_reference(_api(True), "team-a")
    assert ref == {"apiVersion": "v1", "kind": "Pod", "name": socket.gethostname(), "uid": "u-1"}
    assert asked == [f"GET /api/v1/namespaces/team-a/pods/{socket.gethostname()}"]


@pytest.mark.parametrize(
    ("in_cluster", "namespace"),
    [(False, "team-a"), (True, "team-b")],
    ids=["a kubeconfig, not the pod's account", "another namespace (the GC would delete it)"],
)
def test_no_tie_outside_the_pods_own_account_and_namespace(
    in_cluster: bool, namespace: str, pod_namespace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def request(*a: Any, **kw: Any) -> dict[str, Any]:
        raise AssertionError("no request expected")

    monkeypatch.setattr(notebook_pod, "request", request)
    assert notebook_pod.owner_reference(_api(in_cluster), namespace) is None


def test_a_pod_that_cannot_be_read_ties_nothing(
    pod_namespace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def request(*a: Any, **kw: Any) -> dict[str, Any]:
        raise PermissionDeniedError("permission denied: cannot get pods", status=403)

    monkeypatch.setattr(notebook_pod, "request", request)
    assert notebook_pod.owner_reference(_api(True), "team-a") is None


def test_release_removes_only_the_pod_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(
        notebook_pod, "request", lambda api, method, path, **kw: sent.append(kw["body"])
    )
    other = {"apiVersion": "x/v1", "kind": "Thing", "name": "t", "uid": "t-1"}
    pod = {"apiVersion": "v1", "kind": "Pod", "name": "jupyter-alice", "uid": "p-1"}
    job = {"metadata": {"name": "j", "namespace": "team-a", "ownerReferences": [pod, other]}}
    assert notebook_pod.release(_api(True), job) is True
    assert sent == [{"metadata": {"ownerReferences": [other]}}]
    sent.clear()
    job["metadata"]["ownerReferences"] = [pod]
    assert notebook_pod.release(_api(True), job) is True
    assert sent == [{"metadata": {"ownerReferences": None}}]
    sent.clear()
    assert notebook_pod.release(_api(True), {"metadata": {"name": "j", "namespace": "n"}}) is False
    assert sent == []
