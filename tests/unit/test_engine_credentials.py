"""Credentials that change: exec plugins (real ``sh`` scripts as plugins), token files, and the
one retry after a 401."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainjob_magics.engine.errors import ApiServerError, ConfigError
from trainjob_magics.engine.kube import credentials, kubeconfig


def plugin_script(tmp_path: Path, body: str) -> dict[str, Any]:
    """An exec config running ``sh -c body`` (``$1`` is a counter file)."""
    counter = tmp_path / "runs"
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "sh",
        "args": ["-c", f"echo run >> {counter}; {body}"],
        "interactiveMode": "Never",
    }


def runs(tmp_path: Path) -> int:
    path = tmp_path / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def credential_json(token: str, expires: str | None = None) -> str:
    status: dict[str, str] = {"token": token}
    if expires:
        status["expirationTimestamp"] = expires
    body = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
    return json.dumps({**body, "status": status})


def unauthorized() -> ApiServerError:
    return ApiServerError("401", status=401, reason="Unauthorized")


class Config:
    """What the client's Configuration offers the hook."""

    def __init__(self) -> None:
        self.api_key: dict[str, str] = {}
        self.api_key_prefix: dict[str, str] = {}
        self.refresh_api_key_hook: Any = None

    def token(self) -> str:
        self.refresh_api_key_hook(self)
        return self.api_key["BearerToken"]


def test_exec_plugin_runs_lazily_and_caches_until_expiry(tmp_path: Path) -> None:
    far = "2999-01-01T00:00:00Z"
    exec_config = plugin_script(tmp_path, f"echo '{credential_json('tok-a', far)}'")
    cred = credentials.ExecPlugin("u", exec_config, base_path=str(tmp_path))
    cfg = Config()
    credentials.install(cfg, cred)
    assert runs(tmp_path) == 0 and "BearerToken" in cfg.api_key
    assert cfg.token() == "Bearer tok-a" and cfg.token() == "Bearer tok-a"
    assert runs(tmp_path) == 1


def test_expired_timestamp_runs_the_plugin_again(tmp_path: Path) -> None:
    past = "2000-01-01T00:00:00Z"
    exec_config = plugin_script(tmp_path, f"echo '{credential_json('tok', past)}'")
    cfg = Config()
    credentials.install(cfg, credentials.ExecPlugin("u", exec_config, base_path=str(tmp_path)))
    cfg.token()
    cfg.token()
    assert runs(tmp_path) == 2


def test_exec_info_and_cluster_info_reach_the_plugin(tmp_path: Path) -> None:
    seen = tmp_path / "info.json"
    exec_config = plugin_script(
        tmp_path, f"printf %s \"$KUBERNETES_EXEC_INFO\" > {seen}; echo '{credential_json('t')}'"
    )
    exec_config["provideClusterInfo"] = True
    cluster = {
        "server": "https://k:6443",
        "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"a": 1}}],
    }
    credentials.run_exec_plugin(exec_config, str(tmp_path), cluster, "kubeconfig user u")
    info = json.loads(seen.read_text())
    assert info["apiVersion"] == "client.authentication.k8s.io/v1"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"] == {"server": "https://k:6443", "config": {"a": 1}}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("echo 'token expired: run aws sso login' >&2; exit 2", "failed (exit code 2: token"),
        ("echo not-json", "printed no ExecCredential"),
        ('echo \'{"kind": "ExecCredential", "status": {}}\'', "returned no token"),
    ],
)
def test_plugin_failures_are_one_line(tmp_path: Path, body: str, expected: str) -> None:
    cred = credentials.ExecPlugin("u", plugin_script(tmp_path, body), base_path=str(tmp_path))
    cfg = Config()
    credentials.install(cfg, cred)
    with pytest.raises(ConfigError) as info:
        cfg.token()
    assert expected in str(info.value) and "\n" not in str(info.value)
    assert "kubeconfig user u" in str(info.value)


def test_missing_plugin_says_install_it(tmp_path: Path) -> None:
    exec_config = {"apiVersion": "client.authentication.k8s.io/v1", "command": "no-such-plugin"}
    with pytest.raises(ConfigError, match="is not installed"):
        credentials.run_exec_plugin(exec_config, str(tmp_path), {}, "kubeconfig user u")


def test_one_refresh_for_concurrent_401s(tmp_path: Path) -> None:
    exec_config = plugin_script(tmp_path, f"echo '{credential_json('t')}'")
    cred = credentials.ExecPlugin("u", exec_config, base_path=str(tmp_path), token="old")
    cfg = Config()
    credentials.install(cfg, cred)
    barrier = threading.Barrier(4)

    def send() -> str:
        token = cfg.token()
        if token == "Bearer old":
            barrier.wait(timeout=10)  # all four are refused with the old token
            raise unauthorized()
        return token

    results: list[str] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(credentials.with_fresh_credentials(cfg, send))
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert results == ["Bearer t"] * 4 and runs(tmp_path) == 1


def test_second_401_and_static_credentials_are_the_clear_line(tmp_path: Path) -> None:
    exec_config = plugin_script(tmp_path, f"echo '{credential_json('t')}'")
    cfg = Config()
    credentials.install(cfg, credentials.ExecPlugin("alice", exec_config, base_path="."))
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        cfg.token()
        raise unauthorized()

    with pytest.raises(ApiServerError) as info:
        credentials.with_fresh_credentials(cfg, refused)
    assert len(calls) == 2 and str(info.value).startswith(
        "the API server rejected the credentials of kubeconfig user alice (401 Unauthorized"
    )
    static = Config()
    credentials.install(static, credentials.Credential("kubeconfig user bob"))
    calls.clear()
    with pytest.raises(ApiServerError, match="kubeconfig user bob"):
        credentials.with_fresh_credentials(static, lambda: calls.append(1) or refused())
    assert static.refresh_api_key_hook is None


def test_errors_with_partial_output_or_other_status_pass_through() -> None:
    cfg = Config()
    credentials.install(cfg, credentials.Credential("kubeconfig user u"))
    err = ApiServerError("boom", status=500)
    with pytest.raises(ApiServerError) as info:
        credentials.with_fresh_credentials(cfg, lambda: (_ for _ in ()).throw(err))
    assert info.value is err


def test_token_file_reread_after_a_401(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("one\n")
    cfg = Config()
    credentials.install(
        cfg, credentials.TokenFile(path, "the pod's service account", in_cluster=True)
    )
    assert cfg.token() == "Bearer one"
    path.write_text("two")
    assert cfg.token() == "Bearer one"  # cached for a minute
    sent: list[str] = []

    def send() -> str:
        sent.append(cfg.token())
        if sent[-1] != "Bearer two":
            raise unauthorized()
        return sent[-1]

    assert credentials.with_fresh_credentials(cfg, send) == "Bearer two"
    with pytest.raises(ApiServerError, match=r"rejected the token in .*service account"):
        credentials.with_fresh_credentials(cfg, lambda: (_ for _ in ()).throw(unauthorized()))
    path.write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        credentials.with_fresh_credentials(cfg, lambda: (_ for _ in ()).throw(unauthorized()))


def test_kubeconfig_exec_user_is_not_run_at_load(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    exec_config = plugin_script(tmp_path, f"echo '{credential_json('from-plugin')}'")
    path = tmp_path / "kc"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "eks-user", "user": {"exec": exec_config}}],
                "contexts": [{"name": "m", "context": {"cluster": "c", "user": "eks-user"}}],
                "current-context": "m",
            }
        )
    )
    api, _ns = kubeconfig.load(config_file=path)
    assert runs(tmp_path) == 0
    cred = credentials.credential_of(api.configuration)
    assert isinstance(cred, credentials.ExecPlugin) and cred.who == "kubeconfig user eks-user"
    assert api.configuration.get_api_key_with_prefix("BearerToken") == "Bearer from-plugin"
    assert runs(tmp_path) == 1
