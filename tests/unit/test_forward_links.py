"""The link %trainjob_forward shows: local, JupyterHub's proxied path, or a template."""

from __future__ import annotations

import pytest

from trainjob_magics.magics import links


def test_direct_and_template_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(links, "has_server_proxy", lambda: True)
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice/")
    local = "http://127.0.0.1:4321/"
    assert links.browser_url(local, 4321, "direct") == local
    template = "https://hub.example.com/user/me/proxy/{port}/"
    assert links.browser_url(local, 4321, template) == "https://hub.example.com/user/me/proxy/4321/"


def test_auto_uses_the_hub_prefix_only_with_server_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    local = "http://127.0.0.1:4321/"
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice")
    monkeypatch.setattr(links, "has_server_proxy", lambda: True)
    assert links.browser_url(local, 4321) == "/user/alice/proxy/4321/"
    monkeypatch.setattr(links, "has_server_proxy", lambda: False)
    assert links.browser_url(local, 4321) == local


def test_auto_without_a_known_server_is_the_local_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX", raising=False)
    monkeypatch.setattr(links, "has_server_proxy", lambda: True)
    # this test process was not started by a Jupyter server
    assert links.server_base_url() is None
    assert links.browser_url("http://127.0.0.1:9/", 9) == "http://127.0.0.1:9/"
