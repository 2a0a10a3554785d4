"""The fault matrix (docs/faults.md): every fault injected for real into the local cluster.

Each test asserts the exception type and message, that no output was lost, and a time bound.
Connection errors come from a real TCP proxy that resets connections (tests/integration/
faultproxy.py): the API server itself cannot produce a TCP reset.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client as k8s

from tests.helpers.faultproxy import FaultProxy
from tests.helpers.kube import list_trainjobs
from tests.helpers.polling import wait_until
from trainjob_magics import TrainJobSession, attach, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.core.resources import NAMESPACES

pytestmark = pytest.mark.timeout(60)
RUNTIME = "mpi-interactive"
TJ = "trainjobs.trainer.kubeflow.org"


class Clock:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


def kc(cluster: LocalCluster) -> str:
    return str(cluster.kubeconfig_path)


def live_trainjobs(cluster: LocalCluster, name: str) -> list[dict]:
    return [i for i in list_trainjobs(kc(cluster)) if i["metadata"]["name"] == name]


@pytest.fixture
def sessions() -> Iterator[list[TrainJobSession]]:
    opened: list[TrainJobSession] = []
    yield opened
    for s in opened:
        with contextlib.suppress(E.TrainJobError):
            s.close(timeout=20)


@pytest.fixture
def session(cluster: LocalCluster, sessions: list[TrainJobSession]) -> TrainJobSession:
    s = connect(RUNTIME, config_file=kc(cluster), timeout=30)
    sessions.append(s)
    return s


@pytest.fixture
def proxy(cluster: LocalCluster) -> Iterator[FaultProxy]:
    p = FaultProxy(cluster.port)
    yield p
    p.close()


# ------------------------------------------------------------------ 5xx: retried where idempotent


def test_create_5xx_is_retried_without_duplicates(cluster, unique_name, sessions) -> None:
    name = unique_name("c")
    cluster.faults.fail_requests("POST", r"/trainjobs$", 503, times=2)
    clock = Clock()
    s = connect(RUNTIME, name=name, config_file=kc(cluster), timeout=30)
    sessions.append(s)
    assert clock.elapsed() < 10
    assert len(live_trainjobs(cluster, name)) == 1
    assert s.execute("echo ok").stdout == "ok\n"


def test_create_5xx_persistent_fails_bounded(cluster, unique_name) -> None:
    name = unique_name("c")
    cluster.faults.fail_requests("POST", r"/trainjobs$", 503, times=50)
    clock = Clock()
    with pytest.raises(E.ApiServerError) as info:
        connect(RUNTIME, name=name, config_file=kc(cluster), timeout=30)
    assert clock.elapsed() < 10
    msg = str(info.value)
    assert "503" in msg and "create" in msg and "retry" in msg
    assert live_trainjobs(cluster, name) == []


def test_wait_5xx_is_retried(cluster, sessions) -> None:
    cluster.faults.fail_requests("GET", r"/pods\?", 500, times=2)
    clock = Clock()
    s = connect(RUNTIME, config_file=kc(cluster), timeout=30)
    sessions.append(s)
    assert clock.elapsed() < 10
    assert s.execute("echo waited").stdout == "waited\n"


def test_exec_5xx_handshake_is_retried(cluster, session) -> None:
    cluster.faults.fail_requests("GET", r"/exec\?", 503, times=2)
    clock = Clock()
    r = session.execute("printf 'a%.0s' $(seq 1 1000)")
    assert r.ok and r.stdout == "a" * 1000
    assert clock.elapsed() < 10


def test_exec_5xx_persistent_fails_bounded(cluster, session) -> None:
    cluster.faults.fail_requests("GET", r"/exec\?", 502, times=50)
    clock = Clock()
    with pytest.raises(E.ApiServerError) as info:
        session.execute("echo never")
    assert clock.elapsed() < 10
    assert "502" in str(info.value) and "pods/exec" in str(info.value)
    cluster.faults.clear()
    assert session.execute("echo after").stdout == "after\n"


def test_close_5xx_is_retried(cluster, session) -> None:
    cluster.faults.fail_requests("DELETE", r"/trainjobs/", 503, times=2)
    clock = Clock()
    session.close(timeout=20)
    assert clock.elapsed() < 15
    assert session.closed
    assert live_trainjobs(cluster, session.name) == []


def test_close_5xx_persistent_raises_and_can_be_retried(cluster, session) -> None:
    cluster.faults.fail_requests("DELETE", r"/trainjobs/", 500, times=50)
    with pytest.raises(E.ApiServerError) as info:
        session.close(timeout=20)
    assert "500" in str(info.value) and "delete" in str(info.value)
    assert not session.closed
    cluster.faults.clear()
    session.close(timeout=20)
    assert session.closed


# ------------------------------------------------------------------ connection errors (TCP RST)


def test_connection_resets_during_create_wait_exec_close(cluster, proxy, tmp_path) -> None:
    cfg = str(proxy.kubeconfig(cluster.kubeconfig_path, tmp_path / "kubeconfig"))
    clock = Clock()
    proxy.reset_next(2)
    s = connect(RUNTIME, config_file=cfg, timeout=30)
    try:
        proxy.drop_established()
        proxy.reset_next(2)
        r = s.execute("echo through-resets")
        assert r.stdout == "through-resets\n"
    finally:
        proxy.drop_established()
        proxy.reset_next(2)
        s.close(timeout=20)
    assert proxy.reset_count >= 4
    assert live_trainjobs(cluster, s.name) == []
    assert clock.elapsed() < 30


def test_unreachable_api_server(cluster, tmp_path) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proxy_cfg = FaultProxy.__new__(FaultProxy)
    proxy_cfg.port = port
    cfg = str(FaultProxy.kubeconfig(proxy_cfg, cluster.kubeconfig_path, tmp_path / "kubeconfig"))
    clock = Clock()
    with pytest.raises(E.ApiServerError) as info:
        connect(RUNTIME, config_file=cfg, timeout=30)
    assert clock.elapsed() < 15
    assert f"cannot reach the Kubernetes API server at https://127.0.0.1:{port}" in str(info.value)


# ------------------------------------------------------------------ watch 410


def test_watch_410_relists(cluster, unique_name, sessions) -> None:
    """A real 410: the connect's pod watch is cut (API server restart), the history is
    compacted past its resourceVersion while the server is down, so the resumed watch gets an
    ERROR event with Status 410 Expired; the watcher relists and watches on."""
    name = unique_name("w")
    cluster.faults.hold_pods(name, reason="ContainerCreating", message="held by the test")
    since = len(cluster.faults.requests_seen())
    box: dict = {}

    def run() -> None:
        try:
            box["s"] = connect(RUNTIME, name=name, config_file=kc(cluster), timeout=60)
        except BaseException as exc:  # reported below
            box["e"] = exc

    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: any(k == "watch" for k, _ in pod_requests(cluster, since, name)))
    up = cluster.faults.restart_apiserver(downtime=3.0)
    cut = len(cluster.faults.requests_seen())
    # history moves (a namespace as the API server stores one: PrepareForCreate sets its phase)
    ns = {"metadata": {"name": unique_name("rv")}, "status": {"phase": "Active"}}
    cluster.store.create(NAMESPACES, ns)
    compacted = cluster.compact()  # a watch from an older resourceVersion now gets 410
    assert not up.is_set(), "compacted after the server came back: the watch may not resume"
    assert up.wait(30)
    # the resumed watch (from the old resourceVersion: a real 410), then a relist, then a
    # watch from the relist's resourceVersion
    seen = wait_until(
        lambda: "e" in box or _after_410(pod_requests(cluster, cut, name), compacted), 30
    )
    assert "e" not in box, box.get("e")
    cluster.faults.release_pods()
    t.join(60)
    assert "e" not in box, box.get("e")
    sessions.append(box["s"])
    assert seen[0] == "watch" and seen[1] == "list" and seen[2] == "watch"
    assert box["s"].execute("echo relisted").stdout == "relisted\n"


def pod_requests(cluster: LocalCluster, since: int, name: str) -> list[tuple[str, dict]]:
    """Pod list/watch requests of TrainJob ``name``'s watcher after journal index ``since``."""
    out = []
    for method, path in cluster.faults.requests_seen()[since:]:
        parts = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if method == "GET" and parts.path.endswith("/pods") and name in str(query):
            out.append(("watch" if query.get("watch") == "true" else "list", query))
    return out


def _after_410(requests: list[tuple[str, dict]], compacted: int) -> list[str] | None:
    """["watch", "list", "watch"] once a watch from before ``compacted`` (answered 410) was
    followed by a list and a watch from at least ``compacted``; None until then."""
    for i, (kind, query) in enumerate(requests):
        if kind == "watch" and int(query.get("resourceVersion") or 0) < compacted:
            rest = requests[i + 1 : i + 3]
            if len(rest) == 2 and int(rest[1][1].get("resourceVersion") or 0) >= compacted:
                return [kind, rest[0][0], rest[1][0]]
    return None


# ------------------------------------------------------------------ WebSocket drop


def test_websocket_drop_keeps_partial_output(cluster, session) -> None:
    cluster.faults.drop_exec(session.pod, 1000)
    script = 'for i in 1 2 3 4 5 6 7 8 9 10; do printf "%0499d\\n" $i; sleep 0.05; done'
    expected = "".join(f"{i:0499d}\n" for i in range(1, 11))
    seen: list[str] = []
    clock = Clock()
    with pytest.raises(E.ConnectionLostError) as info:
        session.execute(script, on_output=lambda pod, stream, text: seen.append(text))
    assert clock.elapsed() < 10
    # its output is lost from here on, so the engine stopped it (the pid-file stopper)
    assert (
        "was lost before the command finished (connection closed by the server); stopped the "
        f"remote command in pod {session.pod}"
    ) in str(info.value)
    assert info.value.stopped
    partial = info.value.partial
    assert partial is not None and partial.returncode is None
    assert len(partial.stdout) >= 1000 and expected.startswith(partial.stdout)
    assert "".join(seen) == partial.stdout  # everything received was also streamed
    cluster.faults.clear()


# ------------------------------------------------------------------ pods and jobs going away


def test_trainer_pod_deleted_is_replaced(cluster, session) -> None:
    old = session.pod
    k8s.CoreV1Api(session.api_client).delete_namespaced_pod(old, "default")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            r = session.execute("echo on-new-pod")
            if r.pod != old:
                break
        except (E.PodNotRunningError, E.PodGoneError):  # gone, or killed with the old pod
            pass
        time.sleep(0.2)
    assert r.stdout == "on-new-pod\n" and r.pod != old and session.pod == r.pod


def test_trainer_pod_evicted(cluster, session) -> None:
    cluster.faults.fail_pod("default", session.pod, 137, "Evicted")
    time.sleep(0.3)
    clock = Clock()
    with pytest.raises(E.PodNotRunningError) as info:
        session.execute("echo x")
    assert clock.elapsed() < 10
    msg = str(info.value)
    assert session.name in msg and "Failed" in msg and "connect again" in msg


def test_trainjob_deleted_by_someone_else(cluster, session) -> None:
    k8s.CustomObjectsApi(session.api_client).delete_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", session.name
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        live_trainjobs(cluster, session.name) or session.status().pods
    ):
        time.sleep(0.1)
    with pytest.raises(E.PodNotRunningError) as info:
        session.execute("echo x")
    assert session.name in str(info.value) and "connect(" in str(info.value)
    assert session.status().state == "Deleted"
    session.close(timeout=10)  # idempotent: nothing left to delete, no error
    assert session.closed


# ------------------------------------------------------------------ credentials and RBAC


def test_expired_token_401(cluster, session, tmp_path) -> None:
    bad = cluster.write_kubeconfig(tmp_path / "expired", token="expired-token-value")
    with pytest.raises(E.ApiServerError) as info:
        connect(RUNTIME, config_file=str(bad), timeout=10)
    msg = str(info.value)
    assert "401" in msg and "expired" in msg and "expired-token-value" not in msg
    # a live session whose token expires
    cfg = session.api_client.configuration
    saved, hook = dict(cfg.api_key), cfg.refresh_api_key_hook
    cfg.refresh_api_key_hook = None  # the kubeconfig loader would put the good token back
    cfg.api_key = {k: "Bearer expired-token-value" for k in saved}
    try:
        with pytest.raises(E.ApiServerError) as info:
            session.execute("echo x")
        assert "401" in str(info.value) and "expired-token-value" not in str(info.value)
        with pytest.raises(E.ApiServerError):
            session.status()
    finally:
        cfg.api_key, cfg.refresh_api_key_hook = saved, hook
    assert session.execute("echo back").stdout == "back\n"


def _user(cluster: LocalCluster, tmp_path: Path, deny: list[tuple[str, str]]) -> str:
    token = cluster.add_user(f"u{len(deny)}{int(time.monotonic() * 1000) % 100000}", deny=deny)
    return str(cluster.write_kubeconfig(tmp_path / "user-kubeconfig", token=token))


@pytest.mark.parametrize(
    ("verb", "resource", "op", "needle"),
    [
        ("create", "trainjobs", "connect", f"cannot create {TJ}"),
        ("get", "trainjobs", "attach", f"cannot get {TJ}"),
        ("watch", "pods", "connect", "cannot watch pods"),
        ("list", "pods", "connect", "cannot list pods"),
        ("get", "pods/exec", "execute", "cannot get and create pods/exec"),
        ("create", "pods/exec", "execute", "cannot get and create pods/exec"),
        ("get", "pods/portforward", "forward", "cannot get and create pods/portforward"),
        ("create", "pods/portforward", "forward", "cannot get and create pods/portforward"),
        ("delete", "trainjobs", "close", f"cannot delete {TJ}"),
    ],
)
def test_rbac_403_names_verb_and_resource(
    cluster, session, tmp_path, verb, resource, op, needle
) -> None:
    cfg = _user(cluster, tmp_path, [(verb, resource)])
    _BEFORE.clear()
    _BEFORE.update(j["metadata"]["name"] for j in _managed(cluster))
    clock = Clock()
    with pytest.raises(E.PermissionDeniedError) as info:
        if op == "connect":
            s = connect(RUNTIME, config_file=cfg, timeout=15)
            s.close()
        elif op == "attach":
            attach(session.name, config_file=cfg, timeout=15)
        else:
            mine = attach(session.name, config_file=cfg, timeout=15)
            if op == "execute":
                mine.execute("echo x")
            elif op == "forward":
                mine.forward(8080).close()
            else:
                mine.close(timeout=10)
    assert clock.elapsed() < 15
    msg = str(info.value)
    assert needle in msg and "docs/rbac.md" in msg, msg
    print(f"RBAC-MESSAGE {verb} {resource}: {msg}")
    if op == "connect":  # a connect that cannot watch its job deletes it instead of leaking it
        leaked = [
            j["metadata"]["name"]
            for j in _managed(cluster)
            if j["metadata"]["name"] != session.name and not j["metadata"].get("deletionTimestamp")
        ]
        assert leaked == [] or all(n in _BEFORE for n in leaked)


_BEFORE: set[str] = set()


def _managed(cluster: LocalCluster) -> list[dict]:
    from kubernetes import config

    api = config.new_client_from_config(config_file=kc(cluster))
    try:
        return k8s.CustomObjectsApi(api).list_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs"
        )["items"]
    finally:
        api.close()


def test_no_kubeconfig_not_in_cluster(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    clock = Clock()
    with pytest.raises(E.ConfigError) as info:
        connect(RUNTIME, timeout=5)
    assert clock.elapsed() < 2
    assert "No Kubernetes configuration found" in str(info.value)
    assert "KUBECONFIG" in str(info.value)


def test_every_fault_leaves_the_cluster_usable(cluster, session) -> None:
    """Sanity after the matrix: a fresh command runs and returns everything."""
    r = session.execute("seq 1 20000")
    assert r.ok and r.stdout == "".join(f"{i}\n" for i in range(1, 20001))
