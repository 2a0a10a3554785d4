"""Pings on the real API server: kube-apiserver (its v5 stream translator) and the kubelet (v4,
proxied) answer our WebSocket pings, so a command quiet for 1.5 times ``silent_after`` is not
taken for a dead connection; and a connection that stops passing bytes without closing (a TCP
proxy standing in for a dead network) ends the command in one line within the bound, for one
pod and for every pod of a fan-out."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.realstack.context import StackContext
from tests.helpers.faultproxy import FaultProxy
from trainjob_magics import connect
from trainjob_magics.engine.errors import ConnectionLostError
from trainjob_magics.engine.exec import client as exec_client

pytestmark = pytest.mark.timeout(600)
BOUND = 10.0  # several pings long, and long enough for a loaded machine to answer one


@pytest.fixture(scope="module")
def proxied(real_stack: StackContext, tmp_path_factory: Any) -> Iterator[tuple[Any, FaultProxy]]:
    folder: Path = tmp_path_factory.mktemp("silent")
    proxy = FaultProxy.for_kubeconfig(real_stack.admin_kubeconfig, folder / "kubeconfig")
    session = connect(
        "torch-distributed", num_nodes=2, config_file=str(folder / "kubeconfig"), timeout=300
    )
    session.silent_after = BOUND
    yield session, proxy
    proxy.close()
    session.close()


@pytest.fixture(params=["v5.channel.k8s.io", "v4.channel.k8s.io"])
def protocol(request: Any) -> Iterator[str]:
    """Exec offers only this subprotocol (v4: what servers before 1.30 speak)."""
    saved = list(exec_client.PROTOCOLS)
    exec_client.PROTOCOLS[:] = [request.param]
    yield request.param
    exec_client.PROTOCOLS[:] = saved


def test_a_quiet_command_is_not_silent(proxied: Any, protocol: str) -> None:
    session, _proxy = proxied
    result = session.execute(f"sleep {BOUND * 1.5:g}; echo woke", pods="all")
    assert result.errors == {} and all(r.stdout == "woke\n" for r in result.results.values())


def test_a_connection_gone_silent_ends_every_pod_in_one_line(proxied: Any, protocol: str) -> None:
    session, proxy = proxied
    seen: set[str] = set()
    printed = threading.Event()

    def on_output(pod: str, _stream: str, text: str) -> None:
        if "before" in text:
            seen.add(pod)
            if len(seen) == 2:
                printed.set()

    proxy.freeze_when(printed)
    started = time.monotonic()
    result = session.execute("echo before; sleep 600", on_output=on_output, pods="all")
    assert printed.is_set() and time.monotonic() - started < 180
    assert len(result.errors) == 2, result
    for error in result.errors.values():
        assert isinstance(error, ConnectionLostError) and "went silent" in str(error), error


def test_a_connection_gone_silent_ends_one_command_in_one_line(proxied: Any) -> None:
    session, proxy = proxied
    printed = threading.Event()
    proxy.freeze_when(printed)
    with pytest.raises(ConnectionLostError, match="went silent") as lost:
        session.execute("echo before; sleep 600", on_output=lambda *_: printed.set())
    assert "before" in lost.value.partial.stdout
