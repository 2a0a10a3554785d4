"""Security: tokens never leak into notebooks, widget state or logs; the local cluster listens
on loopback only and requires its token."""

from __future__ import annotations

import logging
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers.shell import magics_shell
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


def test_executed_notebook_and_logs_hold_no_token(
    cluster: LocalCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    log_file = tmp_path / "kernel.log"
    denied = cluster.add_user("leaky", deny=[("get", "pods/exec"), ("create", "pods/exec")])
    denied_cfg = cluster.write_kubeconfig(tmp_path / "denied-kubeconfig", token=denied)
    cells = [
        "import logging\n"
        f"logging.basicConfig(filename={str(log_file)!r}, level=logging.DEBUG, force=True)\n"
        "%load_ext trainjob_magics\n"
        f"%config TrainJobMagics.kubeconfig = {str(cluster.kubeconfig_path)!r}",
        "%trainjob_connect mpi-interactive --as leak",
        "%%trainjob leak\necho hello; env | grep -i -E 'token|auth' || true",
        "%trainjob_status leak",
        "%trainjob_sessions --all",
        "%%trainjob leak\nexit 3",
        f"%trainjob_connect --attach NAME --as denied --kubeconfig {denied_cfg}",
        "%%trainjob denied\necho never",
        "s = get_ipython().find_line_magic('trainjob_connect').__self__.registry.find('leak')"
        ".session\nprint(repr(s), s.api_client.configuration.host)\ns",
        "%trainjob_close --all",
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    client = NotebookClient(
        nb, timeout=60, kernel_name="python3", allow_errors=True, store_widget_state=True
    )
    # the attach cell needs the real job name: fill it in after the connect cell ran
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if "--attach NAME" in cell.source:
                name = _job_name(nb.cells[i - 5])
                cell.source = cell.source.replace("NAME", name)
            client.execute_cell(cell, i)
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    saved = path.read_text()
    assert "hello" in saved and "runtime mpi-interactive" in saved  # the cell and the panel
    assert "pods/exec" in saved  # the denied cell failed with the RBAC message
    assert "metadata" in saved
    for secret in (cluster.token, denied):
        assert secret not in saved
        assert secret not in log_file.read_text()
        assert secret not in caplog.text
        assert secret[:16] not in saved  # not even a prefix
    widget_state = nb.metadata.get("widgets", {})
    assert cluster.token not in str(widget_state)


def _job_name(cell) -> str:
    for out in cell.get("outputs", []):
        text = out.get("text", "") or "".join(out.get("data", {}).get("text/plain", ""))
        if "ready: TrainJob " in text:
            return text.split("ready: TrainJob ", 1)[1].split()[0]
    raise AssertionError("no TrainJob name in the connect cell's output")


def test_local_cluster_is_loopback_only(cluster: LocalCluster) -> None:
    assert cluster.url.startswith("https://127.0.0.1:")
    addrs = {
        ai[4][0]
        for ai in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
        if not ai[4][0].startswith("127.")
    }
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        try:
            udp.connect(("192.0.2.1", 9))  # no packet is sent; picks the outbound address
            addrs.add(udp.getsockname()[0])
        except OSError:
            pass
    addrs.discard("0.0.0.0")
    if not addrs:
        pytest.skip("this machine has no non-loopback IPv4 address to probe")
    for addr in addrs:  # the port is closed on every non-loopback address
        with pytest.raises(OSError), socket.create_connection((addr, cluster.port), timeout=2):
            pass


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_local_cluster_requires_its_token(cluster: LocalCluster, token: str | None) -> None:
    ctx = ssl.create_default_context(cadata=cluster.ca_pem.decode())
    req = urllib.request.Request(f"{cluster.url}/api/v1/namespaces/default/pods")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, context=ctx, timeout=5)
    assert info.value.code == 401
    ok = urllib.request.Request(
        f"{cluster.url}/api/v1/namespaces/default/pods",
        headers={"Authorization": f"Bearer {cluster.token}"},
    )
    with urllib.request.urlopen(ok, context=ctx, timeout=5) as resp:
        assert resp.status == 200


# Recognisable, never a real credential: any piece of it in an output, a log or a widget is a leak.
FAKE_TOKEN = "tjmFAKEbearer-9f1c2e7d4b3a-do-not-leak-6e5d4c3b2a19"
EXEC = r"/pods/[^/]+/exec\?"
HANDSHAKE_ERRORS = {
    # id: (HTTP status, the Status message the API server answers the upgrade with)
    "400-container": (400, 'container nope is not valid for pod "p"'),
    "400-not-running": (400, 'container "node" in pod "p" is waiting to start: ContainerCreating'),
    "401": (401, "Unauthorized"),
    "403": (403, 'pods "p" is forbidden: User "leaky" cannot create resource "pods/exec"'),
    "404-pod": (404, 'pods "{pod}" not found'),
    "404-node": (404, 'pods "local-node-gone" not found'),
    "500": (500, "Internal error occurred: injected"),
    "tls": (0, ""),  # the exec's TLS handshake fails: the server's name is not the one asked for
}


@pytest.fixture(scope="module")
def leaky_shell(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The magics in the real InteractiveShell, widgets on, connected with FAKE_TOKEN."""
    local_cluster.add_user("leaky", token=FAKE_TOKEN)
    kc = local_cluster.write_kubeconfig(tmp_path_factory.mktemp("leaky") / "kc", token=FAKE_TOKEN)
    with magics_shell(kc, widgets="on", api_retry_seconds=0.0, close_timeout=20.0) as sh:
        sh.run_cell("%trainjob_connect torch-distributed --as leaky").raise_error()
        yield sh
        sh.run_cell("%trainjob_close leaky")


@pytest.mark.parametrize("case", sorted(HANDSHAKE_ERRORS))
def test_no_handshake_error_shows_or_logs_the_token(
    leaky_shell: Any,
    cluster: LocalCluster,
    case: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every way the exec's WebSocket handshake fails (client.py's _handshake_error and the
    connection failure) ends the cell with one line; the bearer token it sent reaches no
    message, log line, cell output or widget state."""
    from IPython.core.displaypub import CapturingDisplayPublisher
    from ipywidgets.widgets import widget

    caplog.set_level(logging.DEBUG)
    sh = leaky_shell
    session = sh.find_line_magic("trainjob_connect").__self__.registry.find("leaky").session
    cfg = session.api_client.configuration
    code, message = HANDSHAKE_ERRORS[case]
    if code:
        message = message.format(pod=session.pod)
        cluster.faults.fail_requests("GET", EXEC, code=code, times=50, message=message)
    else:
        cfg.tls_server_name = "not-the-cluster.invalid"
    saved, sh.display_pub = sh.display_pub, CapturingDisplayPublisher()
    sh.display_pub.shell = sh
    try:
        result = sh.run_cell("%%trainjob leaky\necho never")
        published = sh.display_pub.outputs
    finally:
        sh.display_pub = saved
        cfg.tls_server_name = None
        cluster.faults.clear()
    out = capsys.readouterr()
    error = result.error_in_exec
    assert error is not None, "the cell did not fail"
    assert "\n" not in str(error), str(error)
    expected = {"400-container": "check the container name", "404-pod": "is gone from namespace"}
    assert expected.get(case, "") in str(error)
    states = [w.get_state() for w in list(widget._instances.values())]  # every live widget
    assert states, "no widget was shown"
    shown = {
        "message": f"{error!s} {error!r} {error.args!r}",
        "log": caplog.text,
        "cell output": f"{out.out}{out.err}{published!r}",
        "widget state": repr(states),
    }
    for where, text in shown.items():
        assert FAKE_TOKEN[:12] not in text, f"the token reached the {where} ({case})"
