"""devtools/realstack/gates.py: which gates turn a version's WebSocket streaming off, and a
component restarted with other ``--feature-gates`` (and back) through procs.restart; the real
restarts run in tests/realstack/test_fallbacks_real.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.realstack import gates, procs
from devtools.realstack.context import StackContext
from devtools.realstack.versions import Versions


def test_parse_render_and_flags() -> None:
    parsed = gates.parse(" PortForwardWebsockets=false, A=True ,")
    assert parsed == {"PortForwardWebsockets": False, "A": True}
    assert gates.render(parsed) == "A=true,PortForwardWebsockets=false"
    assert gates.flags({}) == [] and gates.parse("") == {}
    with pytest.raises(procs.StackError, match="NAME=true or NAME=false"):
        gates.parse("A=off")


def test_with_gates_replaces_the_flag() -> None:
    argv = ["kube-apiserver", "--feature-gates=A=true", "--v=1"]
    assert gates.with_gates(argv, {"B": False}) == [
        "kube-apiserver",
        "--v=1",
        "--feature-gates=B=false",
    ]
    assert gates.with_gates(argv, {}) == ["kube-apiserver", "--v=1"]


@pytest.mark.parametrize(
    ("version", "kubelet"),
    [("v1.31.0", False), ("v1.35.3", False), ("v1.36.3", True), ("v1.37.2", True)],
)
def test_the_fallback_gates_of_each_version(version: str, kubelet: bool, tmp_path: Path) -> None:
    """A 1.36+ kubelet serves v5 and the tunnel itself unless its gate is off too; an older
    kubelet does not know the gate (it would not start with it)."""
    ctx = StackContext(run=tmp_path, versions=Versions(kubernetes=version))
    wanted = gates.websocket_fallback_gates(ctx)
    assert wanted[gates.APISERVER] == {
        "PortForwardWebsockets": False,
        "TranslateStreamCloseWebsocketRequests": False,
    }
    assert (gates.KUBELET in wanted) is kubelet
    if kubelet:
        assert wanted[gates.KUBELET] == {"ExtendWebSocketsToKubelet": False}


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[StackContext]:
    """A stand-in kube-apiserver: a process that ignores its flags."""
    ctx = StackContext(run=tmp_path, versions=Versions())
    argv = [sys.executable, "-c", "import time; time.sleep(300)", "--v=1"]
    procs.start(ctx.run, gates.APISERVER, argv)
    yield ctx
    procs.stop(ctx.run, gates.APISERVER)


def test_apply_restarts_with_the_gates_and_back(
    sleeper: StackContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    waited: list[str] = []
    monkeypatch.setattr(gates, "available_apiservices", lambda ctx: set())
    monkeypatch.setattr(gates, "_wait_serving", lambda ctx, c, **kw: waited.append(c))
    ctx = sleeper
    ctx.save()
    StackContext.load(ctx.run).port("added-since")  # another step's port, not in ctx
    first = procs.pid_of(ctx.run, gates.APISERVER)
    before = gates.apply(ctx, {gates.APISERVER: {"PortForwardWebsockets": False}})
    assert before == {gates.APISERVER: {}}
    second = procs.pid_of(ctx.run, gates.APISERVER)
    assert second is not None and second != first and not procs.alive(first or 0)
    assert gates.running_gates(ctx, gates.APISERVER) == {"PortForwardWebsockets": False}
    assert StackContext.load(ctx.run).feature_gates == {
        gates.APISERVER: {"PortForwardWebsockets": False}
    }
    assert "added-since" in StackContext.load(ctx.run).ports  # kept
    assert ctx.feature_gates == {gates.APISERVER: {"PortForwardWebsockets": False}}
    assert waited == [gates.APISERVER]
    gates.apply(ctx, {gates.APISERVER: {"PortForwardWebsockets": False}})  # as it runs
    assert procs.pid_of(ctx.run, gates.APISERVER) == second and len(waited) == 1
    gates.apply(ctx, before)
    assert gates.running_gates(ctx, gates.APISERVER) == {}
    assert procs.spec(ctx.run, gates.APISERVER)["argv"][-1] == "--v=1"
    assert StackContext.load(ctx.run).feature_gates == {}
    procs.restart(ctx.run, gates.APISERVER)  # a plain restart keeps the gates it last had
    assert gates.running_gates(ctx, gates.APISERVER) == {}
