"""A connection that goes silent (no byte and no close: a dead node, a NAT that dropped the flow)
is found by WebSocket pings within the session's ``silent_after`` bound, for one command and for
a command on every pod; the call ends with one line saying so and what it printed before is
kept, never a hang. A command that prints nothing for longer than the bound is not silent: its
connection answers the pings. The stand-in for the dead network is a TCP proxy in front of the
API server that stops passing bytes both ways without closing (tests/helpers/faultproxy.py)."""

from __future__ import annotations

import shlex
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.faultproxy import FaultProxy
from tests.helpers.polling import wait_until
from tests.helpers.ports import free_port
from trainjob_magics import connect
from trainjob_magics.engine.errors import ConnectionLostError, TrainJobError
from trainjob_magics.localcluster import LocalCluster

BOUND = 10.0  # the test's silent_after: several pings long, and long enough for a loaded machine


@pytest.fixture
def proxied(own_cluster: LocalCluster, tmp_path: Path) -> Iterator[tuple[Any, FaultProxy]]:
    kubeconfig = own_cluster.write_kubeconfig(tmp_path / "kubeconfig")
    proxy = FaultProxy.for_kubeconfig(kubeconfig, tmp_path / "proxied")
    session = connect(
        "torch-distributed", num_nodes=2, config_file=str(tmp_path / "proxied"), timeout=120
    )
    session.silent_after = BOUND
    yield session, proxy
    proxy.close()
    session.close()


def test_a_quiet_command_longer_than_the_bound_is_not_silent(proxied: Any) -> None:
    session, _proxy = proxied
    started = time.monotonic()
    result = session.execute(f"sleep {BOUND * 1.5:g}; echo woke")
    assert result.returncode == 0 and result.stdout == "woke\n"
    assert time.monotonic() - started >= BOUND * 1.5


def test_a_silent_connection_ends_the_call_in_one_line(proxied: Any) -> None:
    session, proxy = proxied
    printed = threading.Event()

    def on_output(_pod: str, _stream: str, text: str) -> None:
        if "before the silence" in text:
            printed.set()

    proxy.freeze_when(printed)
    started = time.monotonic()
    with pytest.raises(ConnectionLostError) as lost:
        session.execute("echo before the silence; sleep 600", on_output=on_output)
    took = time.monotonic() - started
    # found within the bound (plus the time to print and the stop it tries), not after 600 s
    assert printed.is_set() and took < 120, took
    line = str(lost.value).splitlines()[0]
    assert "went silent" in line and f"no byte for {BOUND:g} s" in line, line
    assert "before the silence" in lost.value.partial.stdout


def test_a_silent_connection_ends_each_pod_of_a_fan_out(proxied: Any) -> None:
    """Every pod's exec through the reactor (one thread for all): each is found silent."""
    session, proxy = proxied
    seen: set[str] = set()
    printed = threading.Event()

    def on_output(pod: str, _stream: str, text: str) -> None:
        if "before the silence" in text:
            seen.add(pod)
            if len(seen) == 2:
                printed.set()

    proxy.freeze_when(printed)
    started = time.monotonic()
    result = session.execute("echo before the silence; sleep 600", on_output=on_output, pods="all")
    took = time.monotonic() - started
    assert printed.is_set() and took < 120, took
    assert sorted(result.errors) == sorted(result.pods) and len(result.errors) == 2, result
    for pod, error in result.errors.items():
        assert isinstance(error, ConnectionLostError), (pod, error)
        assert "went silent" in str(error).splitlines()[0], error
        assert "before the silence" in result.results[pod].stdout, result.results[pod]


def test_silent_after_is_validated(proxied: Any) -> None:
    session, _proxy = proxied
    for bad in (0, -1, "30", True):
        with pytest.raises(TrainJobError, match="silent_after"):
            session.silent_after = bad


ECHO = """
import socket, threading
server = socket.create_server(("127.0.0.1", {port}))
def echo(conn):
    while (data := conn.recv(65536)):
        conn.sendall(data)
while True:
    conn, _ = server.accept()
    threading.Thread(target=echo, args=(conn,), daemon=True).start()
"""


@pytest.mark.parametrize("via", ["websocket", "tunnel"])
def test_a_silent_forward_resets_its_connection_and_the_next_one_works(
    proxied: Any, via: str
) -> None:
    """A forwarded connection whose stream went silent is reset (its client is not left
    hanging); a connection made after it gets a fresh stream and works."""
    session, proxy = proxied
    port = free_port()
    started = session.execute(
        f"nohup python3 -c {shlex.quote(ECHO.format(port=port))} >/dev/null 2>&1 </dev/null &"
    )
    assert started.ok, started
    wait_until(
        lambda: (
            session.execute(
                ["python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}))"]
            ).ok
        ),
        timeout=30,
    )
    with session.forward(port, via="auto" if via == "tunnel" else via) as fwd:
        assert fwd.mode == via
        client = socket.create_connection(("127.0.0.1", fwd.local_port), timeout=30)
        client.sendall(b"hello\n")
        assert client.recv(100) == b"hello\n"
        proxy.freeze_established()
        began = time.monotonic()
        client.settimeout(120)
        try:
            ended = client.recv(100)
        except ConnectionResetError:
            ended = b""
        took = time.monotonic() - began
        # found by the session's bound (10 s), not by the tunnel's former fixed 30 s, or never
        assert ended == b"" and took < 2.5 * BOUND, (ended, took)
        client.close()
        again = socket.create_connection(("127.0.0.1", fwd.local_port), timeout=30)
        again.settimeout(60)
        again.sendall(b"again\n")
        assert again.recv(100) == b"again\n"
        again.close()
