"""Exec, port-forward and transfers through a server's fallbacks, for real (issue 37).

With its WebSocket streaming gates off (``devtools/realstack/gates.py``: kube-apiserver's
PortForwardWebsockets and TranslateStreamCloseWebsocketRequests, and from 1.36 the kubelet's
ExtendWebSocketsToKubelet, which serves both itself otherwise) the API server and the kubelet
pass the upgrade on to containerd's stream server. That one speaks exec up to
``v4.channel.k8s.io`` (no stdin close) and port-forward only as ``v4.channel.k8s.io``, one
WebSocket per connection; an upgrade offering only what it does not speak gets a bare 403. Here
a session's exec works on v4 and says so in its record (``session.protocols``, the status),
``session.forward()`` and ``%trainjob_forward`` serve the pod's port a WebSocket per
connection and say so, uploads and downloads verify, and a forward opened on the tunnel before
the server lost it goes on over the fallback.

The module restarts the running stack's kube-apiserver and kubelet with those gates (the
suite's stack in CI: tests/realstack runs serially) and puts them back at the end, waiting until
the API server is ready, its API services available and the kubelet serves its pods again.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.realstack import fixtures, gates, stack
from devtools.realstack.context import StackContext
from tests.helpers.polling import wait_until
from tests.helpers.ports import fetch, free_port, serve_http, serving
from tests.helpers.shell import magics_shell
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.engine.result import Protocols
from trainjob_magics.magics.views.status_text import format_status

pytestmark = pytest.mark.timeout(900)
REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"
RUNTIME = "torch-distributed"
V4, V5 = "v4.channel.k8s.io", "v5.channel.k8s.io"
TUNNEL = "SPDY/3.1+portforward.k8s.io"
SIZE = 16 * 1024 * 1024
LINK = re.compile(r"Forwarding (http://127\.0\.0\.1:(\d+)/) -> port (\d+) of pod (\S+)")
DEFAULTS: dict[str, dict[str, bool]] = {c: {} for c in gates.COMPONENTS}


def _running(ctx: StackContext) -> dict[str, dict[str, bool]]:
    return {c: gates.running_gates(ctx, c) for c in gates.COMPONENTS}


@pytest.fixture(scope="module")
def rs(real_stack: StackContext) -> Iterator[StackContext]:
    """The running stack, put back as it was at the end (its gates, serving again)."""
    if not stack.status(real_stack.run).get("ready"):
        why = f"the real stack at {real_stack.run} is not ready"
        if REQUIRE:
            pytest.fail(f"{why}; TRAINJOB_MAGICS_REQUIRE_REALSTACK=1 is set", pytrace=False)
        pytest.skip(why)
    before = _running(real_stack)
    yield real_stack
    started = time.monotonic()
    gates.apply(real_stack, before)
    assert _running(real_stack) == before
    assert gates.apiserver_ready(real_stack) and stack.status(real_stack.run)["ready"]
    print(f"stack back to its gates in {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="module")
def fallbacks(rs: StackContext) -> StackContext:
    """The stack without WebSocket streaming, from the first test that asks on."""
    started = time.monotonic()
    gates.apply(rs, gates.websocket_fallback_gates(rs))
    print(f"gates off in {time.monotonic() - started:.1f} s: {_running(rs)}")
    return rs


def _connect(ctx: StackContext, nodes: int = 1) -> TrainJobSession:
    return connect(
        RUNTIME,
        config_file=str(ctx.restricted_kubeconfig),
        namespace=fixtures.NAMESPACE,
        timeout=300,
        num_nodes=nodes,
    )


@pytest.fixture(scope="module")
def session(fallbacks: StackContext) -> Iterator[TrainJobSession]:
    s = _connect(fallbacks, nodes=2)
    yield s
    s.close(timeout=300)


def test_an_open_forward_follows_the_server_to_its_fallback(rs: StackContext) -> None:
    """First, on the version's defaults: a forward on the tunnel, then the server loses it
    under the forward (both restarted with the gates off). Its next connections go a
    WebSocket each, said in one line: no "permission denied" for the node's bare 403."""
    gates.apply(rs, DEFAULTS)
    s = _connect(rs)
    reported: list[str] = []
    try:
        port = free_port()
        assert s.execute("printf 'before and after' > page.html").ok
        serve_http(s, port, wait=60)
        fwd = s.forward(port, on_error=reported.append)
        wait_until(lambda: serving(fwd.url + "page.html"), timeout=60)
        assert s.protocols == Protocols(V5, ((port, "tunnel", TUNNEL),))
        gates.apply(rs, gates.websocket_fallback_gates(rs))
        for _ in range(3):
            assert fetch(fwd.url + "page.html", timeout=60) == b"before and after"
        assert (fwd.mode, fwd.protocol) == ("websocket", V4)
        said = [r for r in reported if "no longer serves" in r]
        assert said == [
            f"the API server no longer serves {TUNNEL} for pod {s.pod} (it answered {V4}): "
            "the forward goes via websocket from now on"
        ], reported
        assert not [r for r in reported if "permission" in r], reported
        assert s.execute("echo on v4").stdout == "on v4\n"
        assert s.protocols == Protocols(V4, ((port, "websocket", V4),))
    finally:
        s.close(timeout=300)


def test_exec_speaks_v4_and_the_record_says_so(session: TrainJobSession) -> None:
    result = session.execute("echo out; echo err >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert session.protocols.exec == V4
    # stdin goes, but v4 cannot close it: a command reading a bounded amount ends
    assert session.execute("head -c 5", stdin=b"hello world", timeout=60).stdout == "hello"
    session._exec.protocol = ""  # the fan-out's own upgrades record it too (exec/reactor.py)
    every = session.execute("hostname", pods="all")
    assert every.ok and len(every) == 2, every
    assert session.protocols.exec == V4
    status = session.status()
    assert status.protocols.exec == V4 and status.protocols.fallback
    assert f"  Protocols (server fallback): exec {V4}" in format_status(status).splitlines()


def test_the_api_forward_goes_a_websocket_per_connection(session: TrainJobSession) -> None:
    port = free_port()
    made = session.execute(
        f"printf 'v4 page' > index.html && head -c {SIZE} /dev/urandom > big.bin"
    )
    assert made.ok, made.stderr
    digest = session.execute("sha256sum big.bin").stdout.split()[0]
    serve_http(session, port, wait=60)
    with session.forward(port) as fwd:
        assert (fwd.mode, fwd.protocol) == ("websocket", V4)
        wait_until(lambda: serving(fwd.url), timeout=60)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            pages = list(pool.map(lambda _: fetch(fwd.url + "index.html", 60), range(16)))
        assert pages == [b"v4 page"] * 16
        body = fetch(fwd.url + "big.bin", timeout=300)
        assert len(body) == SIZE and hashlib.sha256(body).hexdigest() == digest
        assert session.protocols.forwards == ((port, "websocket", V4),)
        line = format_status(session.status())
        assert f"forward {port} websocket ({V4})" in line, line
        wait_until(lambda: fwd.active == 0, timeout=60)
        assert fwd.upgrades == 1 + fwd.connections  # the start's, then one per connection
    assert session.protocols.forwards == ()


def test_transfers_verify_over_v4(session: TrainJobSession, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "big.bin").write_bytes(os.urandom(6 * 1024 * 1024))
    (src / "sub" / "note.txt").write_text("over v4\n")
    up = session.upload(str(src), "fallback-up", pods="all")
    assert up.verified == "sha256" and up.files == 2 and len(up.pods) == 2, up
    down = session.download("fallback-up", str(tmp_path / "back"))
    assert down.verified == "sha256" and down.files == 2, down
    for name in ("big.bin", "sub/note.txt"):
        assert (tmp_path / "back" / name).read_bytes() == (src / name).read_bytes()
    assert session.protocols.exec == V4


def test_the_forward_magic_and_status_name_the_fallback(
    fallbacks: StackContext, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = fallbacks.restricted_kubeconfig
    with magics_shell(
        kubeconfig, widgets="off", close_timeout=300.0, namespace=fixtures.NAMESPACE
    ) as sh:
        sh.run_line_magic("trainjob_connect", RUNTIME)
        port = free_port()
        sh.run_cell_magic(
            "trainjob",
            "",
            "printf 'magic page' > magic.html\n"
            f"nohup python3 -m http.server {port} --bind 127.0.0.1 > http.log 2>&1 < /dev/null &",
        )
        capsys.readouterr()
        sh.run_line_magic("trainjob_forward", str(port))
        shown = capsys.readouterr().out
        found = LINK.search(shown)
        assert found and int(found[3]) == port, shown
        url = found[1]
        wait_until(lambda: serving(url + "magic.html"), timeout=60)
        assert fetch(url + "magic.html") == b"magic page"
        sh.run_line_magic("trainjob_forward", "--list")
        listed = capsys.readouterr().out
        assert re.search(rf"\b{port}\s+\S+\s+websocket\s+{re.escape(url)}", listed), listed
        sh.run_line_magic("trainjob_status", "")
        status = capsys.readouterr().out
        assert (
            f"Protocols (server fallback): exec {V4} · forward {port} websocket ({V4})" in status
        ), status
        sh.run_line_magic("trainjob_close", "")
