"""A real kubelet whose container just exited answers an exec, through kube-apiserver, with
``500 container not found ("node")`` before the pod's status says so (seen on the real stack's
node when the idle watchdog ended a job): the command never started, as for the 400s."""

from __future__ import annotations

import json

import websocket
from kubernetes.client import ApiClient, Configuration

from trainjob_magics.engine import errors as E
from trainjob_magics.engine.exec.client import ExecClient

STATUS_500 = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'container not found ("node")',
    "code": 500,
}


def _error(status: int, body: dict) -> E.TrainJobError:
    client = ExecClient(ApiClient(Configuration(host="https://127.0.0.1:1")))
    exc = websocket.WebSocketBadStatusException(
        "Handshake status %d %s", status, "Internal Server Error", {}, json.dumps(body).encode()
    )
    return client._handshake_error(exc, "ns", "p-0")


def test_a_500_container_not_found_is_a_pod_not_running() -> None:
    err = _error(500, STATUS_500)
    assert isinstance(err, E.PodNotRunningError), repr(err)
    assert "p-0" in str(err) and "\n" not in str(err)


def test_another_500_stays_a_server_error() -> None:
    err = _error(500, {**STATUS_500, "message": "etcdserver: request timed out"})
    assert not isinstance(err, E.PodNotRunningError), repr(err)


def _outcome(message: str, received: bool = False):
    from trainjob_magics.engine.exec.client import exec_outcome

    class Collector:
        def __init__(self) -> None:
            self.received = received

        def flush(self) -> None:
            pass

        def result(self, returncode, started, pod):
            return None

    return lambda: exec_outcome((None, message, True), Collector(), 0.0, "p-0")


def test_an_exec_into_a_container_being_stopped_never_started() -> None:
    """containerd's answers while the kubelet stops a deleted pod's container."""
    import pytest

    for message in (
        "Internal error occurred: error executing command in container: failed to exec in "
        'container: failed to start exec "abc": ttrpc: closed',
        'Internal error occurred: error executing command in container: container "abc" in '
        "pod sandbox not created: not found",
        "Internal error occurred: error executing command in container: failed to exec in "
        "container: failed to load task: rpc error: code = NotFound desc = task "
        "1f0c2a45ae9d39736ac not found",
    ):
        with pytest.raises(E.PodNotRunningError):
            _outcome(message)()


def test_a_missing_executable_stays_a_server_error() -> None:
    import pytest

    message = (
        "Internal error occurred: error executing command in container: failed to exec in "
        'container: OCI runtime exec failed: exec: "nope": executable file not found in $PATH'
    )
    with pytest.raises(E.TrainJobError) as err:
        _outcome(message)()
    assert not isinstance(err.value, E.PodNotRunningError)
