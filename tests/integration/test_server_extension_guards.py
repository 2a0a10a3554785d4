"""The server extension's guards, in a real JupyterLab server against the local cluster: every
route refuses a request that looks like a browser's (an XSRF cookie and the matching
X-XSRFToken header) but carries no token, and a bad query is a 400 that says what is wrong,
never a 500."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import JupyterLab, start_jupyterlab
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.localcluster import LocalCluster

API = "/trainjob-magics/api"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("guards-cluster")
    with LocalCluster(root_dir=root) as cluster:
        yield cluster.write_kubeconfig(root / "kubeconfig")


@pytest.fixture(scope="module")
def session(kubeconfig: Path) -> Iterator[TrainJobSession]:
    s = connect("torch-distributed", num_nodes=1, config_file=str(kubeconfig), timeout=120)
    yield s
    s.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, kubeconfig: Path) -> Iterator[JupyterLab]:
    root = tmp_path_factory.mktemp("guards-lab")
    started = start_jupyterlab(root, root / "state", {"KUBECONFIG": str(kubeconfig)})
    yield started
    started.stop()


def _status(lab: JupyterLab, path: str, method: str = "GET", headers: dict | None = None) -> int:
    req = urllib.request.Request(
        f"{lab.url}{path}",
        method=method,
        headers=headers or {},
        data=b"" if method == "POST" else None,
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_every_route_refuses_xsrf_cookie_and_header_without_a_token(
    lab: JupyterLab, session: TrainJobSession
) -> None:
    job = f"{session.namespace}/{session.name}"
    lab.api_until(f"{API}/sessions/{job}", lambda r: r["state"] == "Running")
    xsrf = secrets.token_hex(16)
    browser_like = {"Cookie": f"_xsrf={xsrf}", "X-XSRFToken": xsrf}
    routes = [
        ("GET", f"{API}/sessions"),
        ("GET", f"{API}/sessions?since=0&wait=0"),
        ("GET", f"{API}/sessions/{job}"),
        ("GET", f"{API}/sessions/{job}/gpus"),
        ("POST", f"{API}/sessions/{job}/close"),
    ]
    answers = {(m, p): _status(lab, p, m, browser_like) for m, p in routes}
    assert answers == {route: 403 for route in routes}
    # the refused close closed nothing
    assert lab.api(f"{API}/sessions/{job}")["state"] == "Running"
    assert session.status().state == "Running"


def _error(lab: JupyterLab, path: str) -> tuple[int, str]:
    req = urllib.request.Request(
        f"{lab.url}{path}", headers={"Authorization": f"token {lab.token}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}").get("message", "")


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("wait=abc", "wait must be a number of seconds (0 to 25), not 'abc'"),
        ("since=0&wait=-1", "wait must be a number of seconds (0 to 25), not '-1'"),
        ("since=0&wait=nan", "wait must be a number of seconds (0 to 25), not 'nan'"),
        ("since=0&wait=inf", "wait must be a number of seconds (0 to 25), not 'inf'"),
        ("since=x1&wait=1", "since must be a snapshot version (0, 1, 2, ...), not 'x1'"),
    ],
)
def test_a_bad_query_is_a_400_that_says_what_is_wrong(
    lab: JupyterLab, query: str, says: str
) -> None:
    assert _error(lab, f"{API}/sessions?{query}") == (400, says)


def test_good_queries_still_answer(lab: JupyterLab) -> None:
    version = lab.api(f"{API}/sessions")["version"]
    assert _error(lab, f"{API}/sessions?since={version + 1}&wait=20") == (200, "")
    assert _error(lab, f"{API}/sessions?since={version}&wait=0") == (200, "")
    assert _error(lab, f"{API}/sessions?since={version}&wait=") == (200, "")


def test_a_bad_wait_at_the_current_version_is_a_400_not_a_500(lab: JupyterLab) -> None:
    # the long-poll's own case: since is the version the server has, so it would wait
    version = lab.api(f"{API}/sessions")["version"]
    status, says = _error(lab, f"{API}/sessions?since={version}&wait=soon")
    assert (status, says) == (400, "wait must be a number of seconds (0 to 25), not 'soon'")
