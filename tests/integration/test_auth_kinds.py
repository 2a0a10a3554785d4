"""The seed flow under every kind of credential a real cluster hands out: a bearer token, a
client certificate (kind, kubeadm), an exec credential plugin whose tokens expire (EKS, GKE),
and an in-cluster service-account token file that is rotated. Also kubectl and the official
client against each kind, and what a revoked credential looks like."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.helpers.kernels import Kernel, load_magics_code
from tests.helpers.kube import trainjob_names
from tests.helpers.polling import wait_until
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.engine.trainjob.targets import job_pods_watcher
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

RUNTIME = "torch-distributed"
TTL = 2.0
IDLE_TIMEOUT = 8.0  # heartbeats every 2 s: they too cross expiring tokens


def bearer(session: TrainJobSession) -> str:
    """The token the session sends now (read in-process, never printed)."""
    return str(session.api_client.configuration.api_key.get("BearerToken") or "")


def seed_flow(
    session: TrainJobSession,
    tmp_path: Path,
    between: Callable[[], None],
) -> None:
    """execute, fan-out on both nodes, upload, download, logs, a watch, status; ``between()``
    runs before each step and before the close (where credentials expire or rotate)."""
    between()
    assert session.execute("echo one").stdout == "one\n"
    between()
    fan = session.execute("echo $HOSTNAME", pods="all")
    assert len(fan) == 2 and all(r.returncode == 0 for r in fan.values())
    assert sorted(r.stdout.strip()[-1] for r in fan.values()) == ["0", "1"]
    between()
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(50_000))
    session.upload(str(src), "data/up.bin", pods="all")
    between()
    back = tmp_path / "back"
    session.download("data/up.bin", str(back), pod="node-1")
    assert back.read_bytes() == src.read_bytes()
    between()
    assert "idle watchdog" in session.logs()
    between()
    watcher = job_pods_watcher(session.api_client, session.namespace, session.name)
    checks: list[int] = []

    def after_an_event() -> bool | None:
        checks.append(len(watcher.objects))
        return True if len(checks) > 1 else None  # the first check follows the list

    assert watcher.run(time.monotonic() + 30, after_an_event) and checks[-1] == 2
    between()
    # heartbeats (every IDLE_TIMEOUT / 4) kept the idle watchdog from ending the job
    assert session.status().state == "Running"
    between()


def close_and_check(session: TrainJobSession, cluster: LocalCluster) -> None:
    session.close(timeout=30)
    assert session.closed
    assert session.name not in trainjob_names(cluster.kubeconfig_path, include_deleting=False)


def run_seed(
    config_file: str | None, cluster: LocalCluster, tmp_path: Path, between: Callable[[], None]
) -> TrainJobSession:
    session = connect(
        RUNTIME, num_nodes=2, config_file=config_file, timeout=90, idle_timeout=IDLE_TIMEOUT
    )
    try:
        seed_flow(session, tmp_path, between)
    finally:
        close_and_check(session, cluster)
    return session


@pytest.fixture
def exec_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster started with ``auth="exec"``: its kubeconfig runs the plugin, 2 s tokens."""
    with LocalCluster(root_dir=tmp_path / "exec-cluster", auth="exec", token_ttl=TTL) as c:
        yield c


def kubeconfig_user(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())["users"][0]["user"]


# ------------------------------------------------------------------ the seed flow per kind


def test_token(cluster: LocalCluster, tmp_path: Path) -> None:
    assert set(kubeconfig_user(cluster.kubeconfig_path)) == {"token"}
    run_seed(str(cluster.kubeconfig_path), cluster, tmp_path, lambda: None)


def test_client_certificate(cluster: LocalCluster, tmp_path: Path) -> None:
    path = cluster.write_kubeconfig(tmp_path / "cert.yaml", auth="client-cert")
    user = kubeconfig_user(path)
    assert set(user) == {"client-certificate-data", "client-key-data"}  # no token
    before = cluster.auth_stats.certificates
    run_seed(str(path), cluster, tmp_path, lambda: None)
    assert cluster.auth_stats.certificates > before + 10  # REST, watches and execs all used it


def test_client_certificate_maps_cn_to_the_user(cluster: LocalCluster, tmp_path: Path) -> None:
    """CN is the user the server authorizes (its denials apply), as kube-apiserver's x509."""
    cluster.add_user("cert-carol", deny=[("list", "pods")])
    path = cluster.write_kubeconfig(
        tmp_path / "carol.yaml", auth="client-cert", user="cert-carol", groups=["devs"]
    )
    api = k8s_config.new_client_from_config(str(path))
    with pytest.raises(k8s.ApiException) as info:
        k8s.CoreV1Api(api).list_namespaced_pod("default")
    assert info.value.status == 403
    assert 'User "cert-carol"' in json.loads(info.value.body)["message"]
    assert k8s.CoreV1Api(api).read_namespace("default").metadata.name == "default"


def test_certificate_from_another_ca_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    with LocalCluster(root_dir=tmp_path / "other", load_builtin_runtimes=False) as other:
        foreign = yaml.safe_load(
            other.write_kubeconfig(tmp_path / "o.yaml", auth="client-cert").read_text()
        )["users"][0]["user"]
    data = yaml.safe_load(cluster.write_kubeconfig(tmp_path / "c.yaml").read_text())
    data["users"][0]["user"] = foreign
    path = tmp_path / "foreign.yaml"
    path.write_text(yaml.safe_dump(data))
    before = cluster.auth_stats.certificates
    with pytest.raises(E.ApiServerError) as info:
        connect(RUNTIME, config_file=str(path), timeout=10)
    assert "TLS" in str(info.value) or "reach" in str(info.value)
    assert cluster.auth_stats.certificates == before  # the handshake refused it


@pytest.mark.parametrize("report_expiry", [True, False], ids=["expirationTimestamp", "401"])
def test_exec_plugin_tokens_expire_during_the_flow(
    exec_cluster: LocalCluster, tmp_path: Path, report_expiry: bool
) -> None:
    """Each step starts after the session's token expired: with ``expirationTimestamp`` the
    engine runs the plugin again before sending; without it, the server's 401 makes it."""
    path = exec_cluster.kubeconfig_path
    if not report_expiry:
        path = exec_cluster.write_kubeconfig(
            tmp_path / "noexp.yaml", auth="exec", token_ttl=TTL, report_expiry=False
        )
    exec_config = kubeconfig_user(path)["exec"]
    assert exec_config["apiVersion"] == "client.authentication.k8s.io/v1"
    holder: list[TrainJobSession] = []
    expiries: list[float] = []

    def until_expired() -> None:
        if not holder:
            return
        expiry = exec_cluster.exec_token_expiry(bearer(holder[0]))
        assert expiry is not None
        expiries.append(expiry)
        wait_until(lambda: time.time() > expiry + 0.05, timeout=TTL + 10)

    session = connect(
        RUNTIME, num_nodes=2, config_file=str(path), timeout=90, idle_timeout=IDLE_TIMEOUT
    )
    holder.append(session)
    try:
        seed_flow(session, tmp_path, until_expired)
    finally:
        close_and_check(session, exec_cluster)
    stats = exec_cluster.auth_stats
    assert len(set(expiries)) >= 4  # the flow outlived at least 3 tokens
    assert stats.exec_tokens >= 5
    if report_expiry:  # refreshed before the expiry: (a loaded machine aside) never refused,
        # where a client that waits for the 401 is refused once per token
        assert stats.expired < stats.exec_tokens / 2
    else:
        assert stats.expired >= 4  # each refresh came from a real 401, then a retry


def test_in_cluster_token_file_rotated(
    cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod: no kubeconfig, the service-account mount, and a token the kubelet rotates."""
    mount = tmp_path / "serviceaccount"
    for key, value in cluster.write_service_account(mount).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    tokens: list[str] = []

    def rotate() -> None:
        old = (mount / "token").read_text()
        tokens.append(old)
        cluster.rotate_service_account_token(mount)
        refused = cluster.auth_stats.rejected
        config = k8s.Configuration(host=cluster.url)
        config.ssl_ca_cert = str(mount / "ca.crt")
        config.api_key = {"BearerToken": f"Bearer {old}"}
        probe = k8s.ApiClient(config)
        with pytest.raises(k8s.ApiException) as info:
            k8s.CoreV1Api(probe).read_namespace("default")
        assert info.value.status == 401 and cluster.auth_stats.rejected > refused

    session = run_seed(None, cluster, tmp_path, rotate)
    assert session.namespace == "default" and len(set(tokens)) >= 6


# ------------------------------------------------------------------ revoked or failing credentials


def test_revoked_credential_is_one_line(exec_cluster: LocalCluster, tmp_path: Path) -> None:
    path = exec_cluster.write_kubeconfig(tmp_path / "dave.yaml", auth="exec", user="dave")
    session = connect(RUNTIME, config_file=str(path), timeout=90)
    try:
        assert session.execute("echo ok").stdout == "ok\n"
        exec_cluster.revoke("dave")
        started = time.monotonic()
        with pytest.raises(E.ApiServerError) as info:
            session.execute("echo never")
        assert time.monotonic() - started < 30  # no hang
        message = str(info.value)
        assert message.startswith("the API server rejected the credentials of kubeconfig user dave")
        assert "401 Unauthorized" in message and "aws sso login" in message
        assert "\n" not in message and "tjm-exec." not in message
    finally:
        with contextlib.suppress(E.TrainJobError):  # the delete is refused too
            session.close(timeout=10)


def test_failing_exec_plugin_says_why(cluster: LocalCluster, tmp_path: Path) -> None:
    data = yaml.safe_load(cluster.write_kubeconfig(tmp_path / "k.yaml").read_text())
    script = "echo 'Error: the SSO session has expired' >&2; exit 3"
    data["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "sh",
            "args": ["-c", script],
            "interactiveMode": "Never",
        }
    }
    path = tmp_path / "failing.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(E.ConfigError) as info:
        connect(RUNTIME, config_file=str(path), timeout=10)
    message = str(info.value)
    assert "exec credential plugin of kubeconfig user local-admin failed (exit code 3" in message
    assert "SSO session has expired" in message and "gcloud auth login" in message


def test_plugin_honours_exec_info(cluster: LocalCluster, tmp_path: Path) -> None:
    """KUBERNETES_EXEC_INFO asking for another apiVersion is refused, as the spec says."""
    path = cluster.write_kubeconfig(tmp_path / "e.yaml", auth="exec")
    exec_config = kubeconfig_user(path)["exec"]
    info = '{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"}'
    argv = [exec_config["command"], *exec_config["args"]]
    bad = subprocess.run(argv, env={"KUBERNETES_EXEC_INFO": info}, capture_output=True, text=True)
    assert bad.returncode == 1 and "only client.authentication.k8s.io/v1" in bad.stderr
    good = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert '"kind": "ExecCredential"' in good.stdout and "expirationTimestamp" in good.stdout


# ------------------------------------------------------------------ kubectl and the official client


@pytest.mark.parametrize("auth", ["token", "client-cert", "exec"])
def test_kubectl_and_official_client(
    cluster: LocalCluster, tmp_path: Path, auth: str, unique_name: Callable[[str], str]
) -> None:
    path = cluster.write_kubeconfig(tmp_path / f"{auth}.yaml", auth=auth, token_ttl=TTL)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(path)}
    name = unique_name("cm")

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--cache-dir", str(home / "cache"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    tokens = cluster.auth_stats.exec_tokens
    got = kubectl("get", "namespace", "default", "-o", "jsonpath={.status.phase}")
    assert got.returncode == 0 and got.stdout == "Active", got.stderr
    runtimes = kubectl("get", "clustertrainingruntimes", "-o", "name")
    assert runtimes.returncode == 0 and f"/{RUNTIME}" in runtimes.stdout, runtimes.stderr
    api = k8s_config.new_client_from_config(str(path))
    core = k8s.CoreV1Api(api)
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name), data={"k": "v"})
    core.create_namespaced_config_map("default", body)
    assert core.read_namespaced_config_map(name, "default").data == {"k": "v"}
    core.delete_namespaced_config_map(name, "default")
    if auth == "exec":
        assert cluster.auth_stats.exec_tokens >= tokens + 2  # kubectl and the client ran it
    if auth == "client-cert":
        pem = base64.b64decode(kubeconfig_user(path)["client-certificate-data"])
        assert b"BEGIN CERTIFICATE" in pem


# ------------------------------------------------------------------ the magics in a real kernel


def test_magics_in_a_kernel_across_expiring_tokens(
    exec_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The magics' flow in a real kernel with 2 s exec tokens the plugin does not date: each
    step starts after the last token expired, so each refresh comes from a 401; then the
    user is revoked."""
    user_path = exec_cluster.write_kubeconfig(
        tmp_path / "erin.yaml", auth="exec", user="erin", token_ttl=TTL, report_expiry=False
    )
    data = tmp_path / "in.txt"
    data.write_text("payload\n")
    steps = [
        ("%%trainjob\necho cell-one", "cell-one"),
        ("%%trainjob --pod all\necho fan-$HOSTNAME", "fan-"),
        (f"%trainjob_upload {data} in.txt --pod all", "copied"),
        (f"%trainjob_download in.txt {tmp_path}/back/ --pod node-1", "verified"),
        ("%trainjob_logs --pod node-0 --tail 5", "idle watchdog"),
    ]
    with Kernel() as k:
        reply, _ = k.run(load_magics_code(user_path, widgets="off"))
        assert reply["status"] == "ok", reply
        reply, out = k.run_text("%trainjob_connect torch-distributed --nodes 2", timeout=120)
        assert reply["status"] == "ok", out
        for code, expected in steps:
            # every token the kernel holds was minted before now: past TTL, all have expired
            minted_by = time.time()
            wait_until(lambda t=minted_by: time.time() > t + TTL + 0.1, timeout=TTL + 5)
            refused = exec_cluster.auth_stats.expired
            reply, out = k.run_text(code, timeout=60)
            assert reply["status"] == "ok" and expected in out, out
            assert exec_cluster.auth_stats.expired > refused  # a real 401, then a retry
        assert (tmp_path / "back" / "in.txt").read_text() == "payload\n"
        exec_cluster.revoke("erin")
        reply, out = k.run_text("%%trainjob\necho never", timeout=60)
        assert reply["status"] == "error"
        text = out + reply.get("evalue", "")
        assert "rejected the credentials of kubeconfig user erin (401 Unauthorized" in text
        assert "Traceback" not in text and "tjm-exec." not in text
        k.run_text("%trainjob_close --all", timeout=60)


# ------------------------------------------------------------------ the console script


UNAUTHORIZED = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"Unauthorized","reason":"Unauthorized","code":401}'
)


@pytest.mark.parametrize("auth", ["client-cert", "exec"])
def test_cli_auth_and_token_ttl(tmp_path: Path, auth: str) -> None:
    """`trainjob-magics local-cluster --auth KIND --token-ttl S`: kubectl works with the
    kubeconfig it writes; an exec token is refused with the real 401 Status after S seconds."""
    kubeconfig = tmp_path / "kc"
    argv = [sys.executable, "-m", "trainjob_magics.cli", "local-cluster"]
    argv += ["--kubeconfig", str(kubeconfig), "--auth", auth, "--token-ttl", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("export KUBECONFIG="):
                break
        assert f"credentials: {auth}" in "".join(lines)
        user = kubeconfig_user(kubeconfig)
        assert ("exec" in user) == (auth == "exec") and "token" not in user
        home = tmp_path / "home"
        home.mkdir()
        env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(kubeconfig)}
        got = subprocess.run(
            ["kubectl", "--cache-dir", str(home / "c"), "get", "ns", "default", "-o", "name"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert got.returncode == 0 and got.stdout.strip() == "namespace/default", got.stderr
        if auth == "exec":
            plugin = subprocess.run(
                [user["exec"]["command"], *user["exec"]["args"]],
                capture_output=True,
                text=True,
                check=True,
            )
            token = json.loads(plugin.stdout)["status"]["token"]
            cluster_entry = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
            server = cluster_entry["server"]
            ca = tmp_path / "ca.crt"
            ca.write_bytes(base64.b64decode(cluster_entry["certificate-authority-data"]))
            config = k8s.Configuration(host=server)
            config.ssl_ca_cert = str(ca)
            api = k8s.ApiClient(config)

            def status_of_read() -> tuple[int, str]:
                resp = api.call_api(
                    "GET",
                    f"{server}/api/v1/namespaces/default",
                    header_params={"Authorization": f"Bearer {token}"},
                )
                return resp.status, resp.response.data.decode()

            assert status_of_read()[0] == 200
            _status, body = wait_until(lambda: (s := status_of_read())[0] == 401 and s, timeout=10)
            assert body == UNAUTHORIZED + "\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
