"""A kubeconfig ``proxy-url``: REST, watches and exec (WebSocket) go through an HTTPS (CONNECT)
proxy, as in a corporate network. The proxy counts its tunnels, so the test proves the traffic
went through it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.helpers.connect_proxy import ConnectProxy
from trainjob_magics import connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    with ConnectProxy() as p:
        yield p


@pytest.mark.parametrize("auth", ["token", "client-cert", "exec"])
def test_session_through_the_proxy(
    cluster: LocalCluster, proxy: ConnectProxy, tmp_path: Path, auth: str
) -> None:
    path = cluster.write_kubeconfig(tmp_path / "kc.yaml", auth=auth, proxy_url=proxy.url)
    target = cluster.url.removeprefix("https://")
    session = connect("torch-distributed", num_nodes=2, config_file=str(path), timeout=60)
    try:
        rest = proxy.count()
        assert rest >= 1 and set(proxy.tunnels) == {target}  # connect's REST and watches
        assert session.execute("echo via-proxy").stdout == "via-proxy\n"
        fan = session.execute("echo $HOSTNAME", pods="all")
        assert len(fan) == 2 and all(r.returncode == 0 for r in fan.values())
        assert proxy.count() >= rest + 3  # one CONNECT per exec WebSocket
        src = tmp_path / "f.txt"
        src.write_text("through\n")
        session.upload(str(src), "f.txt")
        session.download("f.txt", str(tmp_path / "back.txt"))
        assert (tmp_path / "back.txt").read_text() == "through\n"
        assert "idle watchdog" in session.logs()
    finally:
        session.close(timeout=30)
    assert session.closed and set(proxy.tunnels) == {target}


def test_kubectl_and_official_client_through_the_proxy(
    cluster: LocalCluster, proxy: ConnectProxy, tmp_path: Path
) -> None:
    path = cluster.write_kubeconfig(tmp_path / "kc.yaml", proxy_url=proxy.url)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(path)}
    argv = ["kubectl", "--cache-dir", str(home / "cache"), "get", "namespace", "default"]
    got = subprocess.run(
        [*argv, "-o", "name"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0 and got.stdout.strip() == "namespace/default", got.stderr
    after_kubectl = proxy.count()
    assert after_kubectl >= 1
    api = k8s_config.new_client_from_config(str(path))
    assert k8s.CoreV1Api(api).read_namespace("default").metadata.name == "default"
    assert proxy.count() > after_kubectl


def test_proxy_down_is_one_line(cluster: LocalCluster, tmp_path: Path) -> None:
    with ConnectProxy() as gone:
        url = gone.url
    path = cluster.write_kubeconfig(tmp_path / "kc.yaml", proxy_url=url)
    with pytest.raises(E.ApiServerError) as info:
        connect("torch-distributed", config_file=str(path), timeout=10)
    message = str(info.value)
    assert "cannot reach the Kubernetes API server" in message and "\n" not in message
    assert "through the kubeconfig's proxy-url (connection refused)" in message
