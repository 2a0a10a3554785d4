"""Kubeconfig loading: explicit file, KUBECONFIG, namespace from the context, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainjob_magics.engine.errors import ConfigError
from trainjob_magics.engine.kube import kubeconfig


def write_config(path: Path, namespace: str | None = "team-a") -> Path:
    ctx: dict = {"cluster": "c", "user": "u"}
    if namespace:
        ctx["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "secret-token-value"}}],
                "contexts": [
                    {"name": "main", "context": ctx},
                    {"name": "other", "context": {"cluster": "c", "user": "u"}},
                ],
                "current-context": "main",
            }
        )
    )
    return path


def test_explicit_file_and_context_namespace(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    cfg = write_config(tmp_path / "kc")
    api, ns = kubeconfig.load(config_file=cfg)
    assert ns == "team-a"
    assert api.configuration.host == "https://127.0.0.1:1"
    _api2, ns2 = kubeconfig.load(config_file=cfg, context="other")
    assert ns2 == "default"
    # The global default configuration is not touched.
    from kubernetes import client

    assert client.Configuration.get_default_copy().host != "https://127.0.0.1:1"


def test_kubeconfig_env_read_at_call_time(tmp_path: Path, monkeypatch) -> None:
    cfg = write_config(tmp_path / "kc", namespace="from-env")
    monkeypatch.setenv("KUBECONFIG", str(cfg))
    assert kubeconfig.load()[1] == "from-env"


def test_missing_file_and_bad_context(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        kubeconfig.load(config_file=tmp_path / "nope")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="KUBECONFIG"):
        kubeconfig.load()
    cfg = write_config(tmp_path / "kc")
    with pytest.raises(ConfigError) as info:
        kubeconfig.load(config_file=cfg, context="missing")
    assert "secret-token-value" not in str(info.value)


def test_no_configuration_at_all(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(kubeconfig, "DEFAULT_KUBECONFIG", str(tmp_path / ".kube" / "config"))
    with pytest.raises(ConfigError) as info:
        kubeconfig.load()
    assert str(info.value) == kubeconfig.NO_CONFIG_MESSAGE
