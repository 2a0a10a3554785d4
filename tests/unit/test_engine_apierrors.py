"""Mapping API failures to engine errors (ApiException fixtures are pure data)."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from trainjob_magics.engine import errors as E
from trainjob_magics.engine.kube.requests import (
    connection_failure,
    map_api_exception,
    map_http_failure,
    parse_status_body,
)


def status(code: int, reason: str, message: str) -> str:
    return json.dumps(
        {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}
    )


def api_exc(code: int, reason: str, message: str) -> ApiException:
    exc = ApiException(status=code, reason=reason)
    exc.body = status(code, reason, message)
    return exc


def test_403_names_verb_resource_and_rbac_doc() -> None:
    msg = 'trainjobs.trainer.kubeflow.org is forbidden: User "u" cannot create resource'
    err = map_api_exception(
        api_exc(403, "Forbidden", msg),
        verb="create",
        resource="trainjobs.trainer.kubeflow.org",
        namespace="team-a",
    )
    assert isinstance(err, E.PermissionDeniedError) and isinstance(err, PermissionError)
    text = str(err)
    assert "cannot create trainjobs.trainer.kubeflow.org in namespace team-a" in text
    assert "docs/rbac.md" in text and "\n" not in text
    assert err.status == 403


def test_handshake_status_zero_form() -> None:
    body = status(403, "Forbidden", 'pods "p" is forbidden: cannot get resource "pods/exec"')
    exc = ApiException(
        status=0,
        reason=f"Handshake status 403 Forbidden -+-+- {{'content-type': 'application/json'}} "
        f"-+-+- {body.encode()!r}",
    )
    err = map_api_exception(exc, verb="get and create", resource="pods/exec", namespace="ns")
    assert isinstance(err, E.PermissionDeniedError)
    assert "get and create" in str(err) and "pods/exec" in str(err)
    assert "cannot get resource" in str(err)


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (400, E.InvalidInputError),
        (401, E.ApiServerError),
        (404, E.NotFoundError),
        (409, E.InvalidInputError),
        (422, E.InvalidInputError),
        (429, E.ApiServerError),
        (500, E.ApiServerError),
        (503, E.ApiServerError),
    ],
)
def test_status_codes(code: int, cls: type) -> None:
    err = map_http_failure(
        code, status(code, "X", "server says no"), verb="get", resource="pods", namespace="ns"
    )
    assert type(err) is cls
    assert err.status == code
    assert "\n" not in str(err)
    if code != 401:
        assert "server says no" in str(err)


def test_401_says_to_refresh_credentials() -> None:
    err = map_http_failure(401, None, verb="get", resource="pods", host="https://h")
    assert "credentials" in str(err) and "https://h" in str(err)


def test_non_json_body() -> None:
    assert parse_status_body(b"<html>bad gateway</html>\nmore") == (
        "<html>bad gateway</html>",
        "",
        {},
    )
    assert parse_status_body(None) == ("", "", {})


def test_unreachable_server_message() -> None:
    exc = urllib3.exceptions.MaxRetryError(None, "/api", reason=ConnectionRefusedError())
    err = connection_failure(exc, "https://127.0.0.1:1")
    assert isinstance(err, E.ApiServerError)
    assert str(err).startswith("cannot reach the Kubernetes API server at https://127.0.0.1:1")
    assert "KUBECONFIG" in str(err)


def test_error_hierarchy() -> None:
    assert issubclass(E.ConnectTimeoutError, TimeoutError)
    assert issubclass(E.ExecTimeoutError, TimeoutError)
    for cls in (
        E.InvalidInputError,
        E.SessionClosedError,
        E.PodNotRunningError,
        E.ConnectTimeoutError,
        E.ExecTimeoutError,
        E.PermissionDeniedError,
        E.ConnectionLostError,
        E.ApiServerError,
        E.ConfigError,
        E.TrainJobFailedError,
    ):
        assert issubclass(cls, E.TrainJobError) and issubclass(cls, RuntimeError)
    partial = object()
    assert E.ConnectionLostError("m", partial=partial).partial is partial  # type: ignore[arg-type]


def test_webhook_down_names_the_webhook_and_its_controller() -> None:
    """The real stack with Kueue's controller stopped: its mutating webhook (failurePolicy Fail)
    refuses every TrainJob create with a 500 (docs/faults.md, faults on the real stack)."""
    msg = (
        'Internal error occurred: failed calling webhook "mtrainjob.kb.io": failed to call '
        'webhook: Post "https://kueue-webhook-service.kueue-system.svc:42523/mutate-trainer-'
        'kubeflow-org-v1alpha1-trainjob?timeout=10s": dial tcp 127.0.0.1:42523: connect: '
        "connection refused"
    )
    err = map_api_exception(
        api_exc(500, "InternalError", msg),
        verb="create",
        resource="trainjobs.trainer.kubeflow.org",
        namespace="tjm",
        name="t1",
    )
    assert isinstance(err, E.ApiServerError) and err.status == 500
    assert str(err) == (
        "could not create trainjobs.trainer.kubeflow.org t1: the admission webhook "
        "mtrainjob.kb.io (service kueue-webhook-service in namespace kueue-system) did not "
        "answer (connect: connection refused), so the API server refused the request and "
        "nothing was changed; the controller serving it is down or restarting: check "
        "`kubectl get pods -n kueue-system`, and run it again once it is back"
    )
    bare = map_http_failure(
        500,
        status(500, "InternalError", 'failed calling webhook "x.example.com": EOF'),
        verb="update",
        resource="jobsets",
        name="j",
    )
    assert "the admission webhook x.example.com did not answer (EOF)" in str(bare)
    assert "check its controller" in str(bare)
