"""The Jupyter server extension's REST API (trainjob_magics/jupyter) against the local cluster,
in a real JupyterLab server started as the browser tests start it: the sessions of this user
with what they hold, one job by name and uid, a job deleted behind its back, close (token,
XSRF), no answer without Jupyter's authentication, and a user whose Role does not cover the
kubeconfig's namespace."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import JupyterLab, start_jupyterlab
from tests.helpers.rest_records import problems
from trainjob_magics import connect
from trainjob_magics.engine.inventory import schema
from trainjob_magics.localcluster import LocalCluster

API = "/trainjob-magics/api"


@pytest.fixture
def lab_for(tmp_path: Path) -> Iterator[Callable[[Path, list[str]], JupyterLab]]:
    started: list[JupyterLab] = []

    def start(kubeconfig: Path, extra: list[str] | None = None) -> JupyterLab:
        state = tmp_path / f"lab{len(started)}"
        env = {"KUBECONFIG": str(kubeconfig)}
        if extra:
            cfg = state / "config"
            cfg.mkdir(parents=True)
            (cfg / "jupyter_server_config.json").write_text(
                json.dumps({"TrainJobSessions": {"namespaces": extra}})
            )
            env["JUPYTER_CONFIG_DIR"] = str(cfg)
        lab = start_jupyterlab(tmp_path, state, env)
        started.append(lab)
        return lab

    yield start
    for lab in started:
        lab.stop()


def _mine(snapshot: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in snapshot["sessions"] if s["name"] == name), None)


def test_sessions_api_reads_holds_deletes_and_closes(
    own_cluster: LocalCluster, tmp_path: Path, lab_for: Any
) -> None:
    kubeconfig = own_cluster.write_kubeconfig(tmp_path / "kubeconfig")
    first = connect(
        "torch-distributed", num_nodes=2, gpu=2, cpu=4, config_file=str(kubeconfig), timeout=120
    )
    second = connect("mpi-interactive", num_nodes=2, config_file=str(kubeconfig), timeout=120)
    try:
        lab = lab_for(kubeconfig)
        snap = lab.api_until(
            f"{API}/sessions",
            lambda s: (r := _mine(s, first.name)) is not None and r["podsReady"] == "2/2",
        )
        rec = _mine(snap, first.name)
        assert rec is not None and rec["state"] == "Running"
        assert rec["runtime"] == "torch-distributed"
        assert len(rec["pods"]) == 2 and all(p["ready"] for p in rec["pods"])
        # 2 pods x (2 GPU, 4 CPU) requested, held since they were placed
        assert (rec["holds"]["gpu"], rec["holds"]["cpu"]) == (4, 8)
        assert rec["holds"]["text"].startswith("4 GPU · 8 CPU · held ")
        assert " GPU-h) · idle " in rec["holds"]["text"]
        assert _mine(snap, second.name) is not None
        assert snap["problems"] == []
        # no credential in any answer
        assert own_cluster.token not in json.dumps(snap)
        # every answer has exactly the fields schema.py types, each of its type
        assert problems(snap, schema.Snapshot) == []
        assert all("notebook" in r and "kernelAlive" in r for r in snap["sessions"])

        # one job by name and uid
        one = lab.api(f"{API}/sessions/{rec['namespace']}/{first.name}?uid={rec['uid']}")
        assert one["state"] == "Running" and one["uid"] == rec["uid"]
        assert problems(one, schema.SessionRecord) == [] and "version" in one
        stale = lab.api(f"{API}/sessions/{rec['namespace']}/{first.name}?uid=not-its-uid")
        assert stale["state"] == "Gone"
        assert problems(stale, schema.GoneRecord) == []

        # deleted behind its back (what kubectl delete does): Gone, and why, within 2 s
        uid2 = lab.api(f"{API}/sessions/{second.namespace}/{second.name}")["uid"]
        own_cluster_api_delete(own_cluster, kubeconfig, second.namespace, second.name)
        started = time.monotonic()
        gone = lab.api_until(
            f"{API}/sessions/{second.namespace}/{second.name}?uid={uid2}",
            lambda r: r["state"] == "Gone",
            timeout=2.0,
        )
        assert time.monotonic() - started < 2.0
        assert "deleted outside trainjob-magics" in gone["gone"]["reason"]
        assert problems(gone, schema.GoneRecord) == []

        # close: unauthenticated is refused, with the token it closes and says who closed it
        path = f"{API}/sessions/{first.namespace}/{first.name}/close"
        req = urllib.request.Request(f"{lab.url}{path}", method="POST", data=b"")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 403
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(f"{lab.url}{API}/sessions", timeout=10)
        assert anonymous.value.code == 403
        closed = lab.api(path, method="POST", body={})
        assert closed["message"].startswith(f"Closed TrainJob {first.name}")
        assert problems(closed, schema.Message) == []
        after = lab.api(f"{API}/sessions/{first.namespace}/{first.name}?uid={rec['uid']}")
        assert after["state"] == "Gone" and after["gone"]["reason"] == "closed by the sidebar"
    finally:
        for s in (first, second):
            s.close()


def own_cluster_api_delete(cluster: LocalCluster, kubeconfig: Path, ns: str, name: str) -> None:
    """DELETE the TrainJob as kubectl does (no annotation of ours)."""
    from kubernetes import client, config

    api = config.new_client_from_config(str(kubeconfig))
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", name
    )


def test_a_namespace_the_user_may_not_list_is_one_line(
    own_cluster: LocalCluster, tmp_path: Path, lab_for: Any
) -> None:
    admin = own_cluster.write_kubeconfig(tmp_path / "admin")
    token = own_cluster.add_user("alice", deny_namespaces=["default"])
    alice = own_cluster.write_kubeconfig(tmp_path / "alice", token)
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(str(admin)))
    core.create_namespace({"metadata": {"name": "tjm"}})
    session = connect(
        "torch-distributed", num_nodes=1, namespace="tjm", config_file=str(alice), timeout=120
    )
    try:
        lab = lab_for(alice, ["tjm"])
        snap = lab.api_until(f"{API}/sessions", lambda s: _mine(s, session.name) and s["problems"])
        assert snap["namespaces"] == ["default", "tjm"]
        assert len(snap["problems"]) == 1
        assert snap["problems"][0].startswith("namespace default: ")
        assert "permission" in snap["problems"][0] or "forbidden" in snap["problems"][0]
        assert token not in json.dumps(snap)
        assert problems(snap, schema.Snapshot) == []
        # a job in the namespace it may not list: Unknown, saying why, typed as the others
        unknown = lab.api(f"{API}/sessions/default/{session.name}")
        assert unknown["state"] == "Unknown" and unknown["problem"]
        assert problems(unknown, schema.UnknownRecord) == []
    finally:
        session.close()
