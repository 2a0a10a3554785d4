"""The Jupyter server extension's REST API (trainjob_magics/jupyter) against a real cluster, as
the user of ``TRAINJOB_MAGICS_E2E_KUBECONFIG`` (on the real stack: a Role in two namespaces
only, none in the kubeconfig's own): it lists the session the user has, with its pods and what
it holds, says in one line each namespace it may not list instead of failing, never returns a
credential, refuses requests without Jupyter's authentication, and closes the job."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.browser.conftest import JupyterLab, start_jupyterlab
from tests.realcluster.settings import KUBECONFIG, NAMESPACE, NEEDS_CLUSTER, RUNTIMES, WAIT
from trainjob_magics import TrainJobSession, connect, list_trainjobs

API = "/trainjob-magics/api"
pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600), NEEDS_CLUSTER]


def _secrets(kubeconfig: str) -> list[str]:
    """What in the kubeconfig must never reach an answer: tokens, keys, passwords."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    found = []
    for user in config.get("users") or []:
        body = user.get("user") or {}
        for key in ("token", "client-key-data", "password"):
            if body.get(key):
                found.append(str(body[key]))
    return found


@pytest.fixture(scope="module")
def session() -> Iterator[TrainJobSession]:
    s = connect(
        RUNTIMES[0], config_file=KUBECONFIG, namespace=NAMESPACE, timeout=WAIT, num_nodes=1, cpu="1"
    )
    yield s
    s.close(timeout=300)


@pytest.fixture
def lab(session: TrainJobSession, tmp_path: Path) -> Iterator[JupyterLab]:
    config = tmp_path / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"TrainJobSessions": {"namespaces": [session.namespace]}})
    )
    env = {"KUBECONFIG": KUBECONFIG, "JUPYTER_CONFIG_DIR": str(config)}
    started = start_jupyterlab(tmp_path, tmp_path / "lab", env)
    yield started
    started.stop()


def _mine(snapshot: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in snapshot["sessions"] if s["name"] == name), None)


def test_the_users_session_with_what_it_holds_and_nothing_secret(
    session: TrainJobSession, lab: JupyterLab
) -> None:
    snap = lab.api_until(f"{API}/sessions", lambda s: _mine(s, session.name) is not None)
    rec = _mine(snap, session.name)
    assert rec is not None and rec["state"] == "Running", rec
    assert rec["namespace"] == session.namespace and rec["runtime"] == RUNTIMES[0]
    assert rec["pods"] and all(p["ready"] for p in rec["pods"]), rec["pods"]
    held = f"{len(rec['pods'])} CPU · held "  # every pod of the job asks for 1 CPU
    assert rec["holds"]["text"].startswith(held), rec["holds"]
    assert session.namespace in snap["namespaces"]
    # a namespace this user may not list is one line, never a failure of the whole view
    for line in snap["problems"]:
        assert line.startswith("namespace ") and "\n" not in line, line
        assert not line.startswith(f"namespace {session.namespace}:"), line
    answer = json.dumps(snap) + json.dumps(
        lab.api(f"{API}/sessions/{rec['namespace']}/{rec['name']}")
    )
    for secret in _secrets(KUBECONFIG):
        assert secret not in answer


def test_no_answer_without_jupyters_authentication(lab: JupyterLab) -> None:
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(f"{lab.url}{API}/sessions", timeout=30)
    assert anonymous.value.code == 403


def test_close_from_the_api_deletes_the_job(session: TrainJobSession, lab: JupyterLab) -> None:
    rec = lab.api_until(f"{API}/sessions", lambda s: _mine(s, session.name) is not None)
    uid = _mine(rec, session.name)["uid"]  # type: ignore[index]
    path = f"{API}/sessions/{session.namespace}/{session.name}/close"
    closed = lab.api(path, method="POST", body={})
    assert closed["message"].startswith(f"Closed TrainJob {session.name}"), closed
    after = lab.api_until(
        f"{API}/sessions/{session.namespace}/{session.name}?uid={uid}",
        lambda r: r["state"] == "Gone",
    )
    assert after["gone"]["reason"] == "closed by the sidebar", after
    deadline = time.monotonic() + WAIT
    while any(j.name == session.name for j in list_trainjobs(NAMESPACE, config_file=KUBECONFIG)):
        assert time.monotonic() < deadline, "the TrainJob is still there"
        time.sleep(0.5)
