"""Exec failures as a 1.30+ apiserver reports them: after the WebSocket upgrade, on channel 3.

``LocalCluster(exec_errors="translated")`` answers an exec into a container that is not running
the way the apiserver's stream translator does (101, ready frame, InternalError Status
``unable to upgrade connection: container not found ("node")`` on channel 3, close 1000). The
engine must treat it like the pre-upgrade 404/400: the command never started.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
import websocket
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.helpers.polling import wait_until
from trainjob_magics import connect
from trainjob_magics.engine import errors as E
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

RUNTIME = "torch-distributed"
NOT_FOUND = 'unable to upgrade connection: container not found ("node")'


def kc(cluster: LocalCluster) -> str:
    return str(cluster.kubeconfig_path)


@pytest.fixture(scope="module")
def translated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster that reports exec failures after the upgrade, like a 1.30+ apiserver."""
    root = tmp_path_factory.mktemp("translated-cluster")
    with LocalCluster(root_dir=root, bookmark_interval=0.5, exec_errors="translated") as c:
        yield c


@pytest.fixture
def api(translated: LocalCluster) -> Iterator[k8s.ApiClient]:
    client = k8s_config.new_client_from_config(config_file=kc(translated))
    yield client
    client.close()


def job_pods(api: k8s.ApiClient, name: str) -> list[Any]:
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    return k8s.CoreV1Api(api).list_namespaced_pod("default", label_selector=selector).items


def raw_exec(
    cluster: LocalCluster, pod: str, protocols: list[str]
) -> tuple[websocket.WebSocket | None, int | None]:
    """Open pods/exec with websocket-client; ``(ws, None)`` after a 101, else ``(None, code)``."""
    query = urlencode(
        [("command", "true"), ("stdout", "true"), ("stderr", "true"), ("stdin", "false")]
    )
    url = f"wss://127.0.0.1:{cluster.port}/api/v1/namespaces/default/pods/{pod}/exec?{query}"
    ws = websocket.WebSocket(sslopt={"cert_reqs": ssl.CERT_NONE, "check_hostname": False})
    try:
        ws.connect(
            url,
            header=[f"Authorization: Bearer {cluster.token}"],
            subprotocols=protocols,
            timeout=10,
        )
    except websocket.WebSocketBadStatusException as exc:
        return None, int(exc.status_code)
    return ws, None


def test_cluster_sends_the_failure_on_channel_3_after_the_upgrade(translated) -> None:
    name = "tr-raw"
    with connect(RUNTIME, name=name, config_file=kc(translated), timeout=30) as s:
        translated.faults.fail_pod("default", s.pod, exit_code=1, reason="Error")
        ws, code = raw_exec(translated, s.pod, ["v5.channel.k8s.io", "v4.channel.k8s.io"])
        assert ws is not None and code is None
        assert ws.getsubprotocol() == "v5.channel.k8s.io"
        frames = []
        while True:
            opcode, frame = ws.recv_data_frame(True)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                close_code = int.from_bytes(frame.data[:2], "big")
                break
            frames.append(frame.data)
        ws.close()
        assert frames[0] == b"\x01"  # the translator's ready frame on stdout
        assert len(frames) == 2 and frames[1][:1] == b"\x03"
        status = json.loads(frames[1][1:])
        assert status["status"] == "Failure" and status["reason"] == "InternalError"
        assert status["code"] == 500
        assert status["message"] == f"Internal error occurred: {NOT_FOUND}"
        assert status["details"]["causes"] == [{"message": NOT_FOUND}]
        assert close_code == 1000
        # Without v5 there is no stream translator: the error comes before the upgrade.
        ws, code = raw_exec(translated, s.pod, ["v4.channel.k8s.io"])
        assert ws is None and code == 400


def test_execute_follows_a_recreated_trainer_pod(translated, api) -> None:
    name = "tr-re"
    with connect(RUNTIME, name=name, config_file=kc(translated), timeout=30) as s:
        old = s.pod
        k8s.CoreV1Api(api).delete_namespaced_pod(old, "default")
        wait_until(
            lambda: any(
                p.metadata.name != old and p.status.phase == "Running" for p in job_pods(api, name)
            )
        )
        res = s.execute("hostname")
        assert res.ok and res.pod != old and s.pod == res.pod
        assert res.stdout.strip() == f"{name}-node-0-0"


def test_channel_3_not_found_reresolves_the_trainer_pod(translated) -> None:
    """A stale pod that still exists but is not running (here: another job's failed pod) is
    refused on channel 3; the session re-resolves its trainer pod and runs the command there."""
    with (
        connect(RUNTIME, name="tr-live", config_file=kc(translated), timeout=30) as s,
        connect(RUNTIME, name="tr-dead", config_file=kc(translated), timeout=30) as dead,
    ):
        trainer = s.pod
        translated.faults.fail_pod("default", dead.pod, exit_code=1, reason="Error")
        wait_until(lambda: dead.status().pods[0].phase == "Failed")
        s._pod = dead.pod  # what a session would hold after its pod was replaced
        res = s.execute("echo on-trainer")
        assert res.ok and res.stdout == "on-trainer\n"
        assert res.pod == trainer and s.pod == trainer


def test_failed_trainer_pod_gives_the_pre_upgrade_message(translated, cluster) -> None:
    messages = []
    for c, name in ((translated, "tr-pf"), (cluster, "pre-pf")):
        with connect(RUNTIME, name=name, config_file=kc(c), timeout=30) as s:
            pod = s.pod
            c.faults.fail_pod("default", pod, exit_code=137, reason="OOMKilled")
            wait_until(lambda s=s: s.status().pods[0].phase == "Failed")
            with pytest.raises(E.PodNotRunningError) as info:
                s.execute("true")
            # The exec's own refusal: on channel 3 (500) here, before the upgrade (400) there.
            first = info.value.__context__
            assert isinstance(first, E.PodNotRunningError)
            assert first.status == (500 if c is translated else 400)
            messages.append(str(info.value).replace(pod, "POD").replace(name, "NAME"))
    assert messages[0] == messages[1]
    assert messages[0] == (
        "the trainer pod of TrainJob NAME (POD) is Failed; check session.status(), or "
        "close() the session and connect again"
    )


def test_missing_executable_still_raises_api_server_error(translated) -> None:
    with connect(RUNTIME, name="tr-exe", config_file=kc(translated), timeout=30) as s:
        with pytest.raises(E.ApiServerError) as info:
            s.execute(["/no/such/binary"])
        assert not isinstance(info.value, E.PodNotRunningError)
        assert "/no/such/binary" in str(info.value)
        assert info.value.partial is not None and info.value.partial.returncode is None
        assert s.execute("true").ok
