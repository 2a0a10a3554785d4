"""%trainjob_forward in a real ipykernel against the local cluster: the link serves the pod's
page and a 50 MB file byte for byte, nothing listening is one line, --list and --stop, and the
forward ends with %trainjob_close and with a kernel restart (its local port free again)."""

from __future__ import annotations

import hashlib
import re

import pytest

from tests.helpers.kernels import Kernel, load_magics_code, shown_text
from tests.helpers.polling import wait_until
from tests.helpers.ports import FETCH_FAILED, fetch, free_port, port_is_free, serving
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(240)

SIZE_50MB = 50 * 1024 * 1024
LINK = re.compile(r"Forwarding (http://127\.0\.0\.1:(\d+)/) -> port (\d+) of pod (\S+)")
FAILED = FETCH_FAILED


def ok(k: Kernel, code: str, timeout: float = 120) -> str:
    reply, msgs = k.run(code, timeout=timeout)
    assert reply["status"] == "ok", (reply, shown_text(msgs))
    return shown_text(msgs)


def connect_and_serve(k: Kernel, cluster: LocalCluster, port: int) -> None:
    ok(k, load_magics_code(cluster.kubeconfig_path))
    ok(k, "%trainjob_connect torch-distributed")
    ok(
        k,
        "%%trainjob\n"
        "printf '<h1>pod page</h1>' > index.html\n"
        f"head -c {SIZE_50MB} /dev/urandom > big.bin\n"
        "sha256sum big.bin\n"
        f"nohup python3 -m http.server {port} --bind 127.0.0.1 > http.log 2>&1 < /dev/null &",
    )


def test_the_link_serves_the_pod_and_ends_with_close(kernel: Kernel, cluster: LocalCluster) -> None:
    port = free_port()
    connect_and_serve(kernel, cluster, port)
    shown = ok(kernel, f"%trainjob_forward {port}")
    found = LINK.search(shown)
    assert found, shown
    url, local_port = found[1], int(found[2])
    assert int(found[3]) == port
    wait_until(lambda: serving(url), timeout=30)
    assert fetch(url + "index.html") == b"<h1>pod page</h1>"
    body = fetch(url + "big.bin", timeout=120)
    digest = ok(kernel, "%%trainjob\nsha256sum big.bin").split()[0]
    assert len(body) == SIZE_50MB and hashlib.sha256(body).hexdigest() == digest
    listed = ok(kernel, "%trainjob_forward --list")
    assert str(port) in listed and url in listed
    assert " tunnel " in listed  # the local cluster serves the one-WebSocket tunnel
    ok(kernel, "%trainjob_close")
    assert port_is_free(local_port), "the forward outlived %trainjob_close"
    assert "No port forwards" in ok(kernel, "%trainjob_forward --list")


def test_nothing_listening_stop_and_restart(kernel: Kernel, cluster: LocalCluster) -> None:
    port = free_port()
    connect_and_serve(kernel, cluster, port)
    idle = free_port()
    reply, msgs = kernel.run(f"%trainjob_forward {idle}", timeout=60)
    assert reply["status"] == "ok", reply
    found = LINK.search(shown_text(msgs))
    assert found, shown_text(msgs)
    url = found[1]
    for _ in range(3):
        with pytest.raises(FAILED):
            fetch(url, timeout=30)
    # said once, however many connections failed
    text = wait_until(lambda: _panel_text(kernel, idle), timeout=30)
    assert text.count(f"nothing accepts connections on port {idle}") == 1, text
    stopped = ok(kernel, f"%trainjob_forward --stop {idle}")
    assert f"Stopped forwarding {url}" in stopped
    assert port_is_free(int(found[2]))
    reply, _ = kernel.run("%trainjob_forward --stop 1")
    assert reply["status"] == "error" and "no port forward of port 1" in reply["evalue"]
    reply, _ = kernel.run("%trainjob_forward")
    assert reply["status"] == "error" and "give the PORT" in reply["evalue"]
    reply, _ = kernel.run("%trainjob_forward 99999")
    assert reply["status"] == "error" and "port must be a port number" in reply["evalue"]
    # a forward ends with a kernel restart
    shown = ok(kernel, f"%trainjob_forward {port}")
    local_port = int(LINK.search(shown)[2])  # type: ignore[index]
    wait_until(lambda: serving(f"http://127.0.0.1:{local_port}/"), timeout=30)
    kernel.restart()
    wait_until(lambda: port_is_free(local_port), timeout=30)


def _panel_text(kernel: Kernel, port: int) -> str:
    """The problems the forward of ``port`` reported, read in the kernel."""
    _reply, out = kernel.run_text(
        "from trainjob_magics.magics.extension import loaded_magics\n"
        "s = loaded_magics(get_ipython()).registry.find().session\n"
        f"print('\\n'.join(e for f in s.forwards if f.port == {port} for e in f.errors))"
    )
    return out if "nothing accepts" in out else ""
