"""JSON requests to the API server, and mapping of its failures to engine errors.

Every request names the verb and resource it needs so that a 403 can say exactly which RBAC
permission is missing. Handshake failures of the exec WebSocket go through the same mapping.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
import ssl
from collections.abc import Iterable
from typing import Any

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from ..errors import (
    ApiServerError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    TrainJobError,
)
from .credentials import with_fresh_credentials
from .retry import ATTEMPTS, window_of, with_retries

RBAC_DOC = "docs/rbac.md"


_HANDSHAKE = re.compile(r"Handshake status (\d{3})")


_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    urllib3.exceptions.HTTPError,  # MaxRetryError, ProtocolError, NewConnectionError, timeouts
    ConnectionError,
    TimeoutError,
    OSError,
)


def parse_status_body(body: bytes | str | None) -> tuple[str, str, dict[str, Any]]:
    """Return ``(message, reason, details)`` from a metav1.Status body (or raw text)."""
    if body is None:
        return "", "", {}
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    text = body.strip()
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        first = text.splitlines()[0] if text else ""
        return first[:300], "", {}
    if not isinstance(data, dict):
        return text[:300], "", {}
    return str(data.get("message") or ""), str(data.get("reason") or ""), data.get("details") or {}


def _handshake_parts(reason: str) -> tuple[int | None, str]:
    """Split the client's ``Handshake status 403 Forbidden -+-+- headers -+-+- body`` text."""
    match = _HANDSHAKE.search(reason or "")
    if not match:
        return None, ""
    body = reason.split("-+-+-")[-1].strip() if "-+-+-" in reason else ""
    if body[:2] in ("b'", 'b"'):
        with contextlib.suppress(ValueError, SyntaxError, AttributeError):
            body = ast.literal_eval(body).decode("utf-8", "replace")
    return int(match.group(1)), body


def _where(namespace: str | None) -> str:
    return f" in namespace {namespace}" if namespace else ""


def map_http_failure(
    status: int,
    body: bytes | str | None,
    *,
    verb: str,
    resource: str,
    namespace: str | None = None,
    name: str | None = None,
    host: str = "",
    http_reason: str = "",
) -> TrainJobError:
    """Turn an HTTP error answer into the matching engine exception (returned, not raised)."""
    message, reason, _details = parse_status_body(body)
    reason = reason or http_reason
    detail = f": {message}" if message else ""
    target = f"{resource} {name}" if name else resource
    if status == 401:
        return ApiServerError(
            f"the Kubernetes API server{' at ' + host if host else ''} rejected the credentials "
            "(401 Unauthorized); your token may have expired: log in again / refresh the "
            "kubeconfig and retry",
            status=status,
            reason=reason or "Unauthorized",
        )
    denied = _DENIED.search(message or "")
    if status == 403 and denied:  # a validating webhook refused the content: not RBAC
        return InvalidInputError(
            f"the API server rejected the request to {verb} {target}: admission webhook "
            f'"{denied["hook"]}" denied the request: {shorten_invalid(denied["why"])}; '
            "fix the input",
            status=status,
            reason=reason or "Forbidden",
        )
    if status == 403:
        return PermissionDeniedError(
            f"permission denied: cannot {verb} {resource}{_where(namespace)}{detail}; ask your "
            f"cluster admin for '{verb}' on {resource} (see {RBAC_DOC})",
            status=status,
            reason=reason or "Forbidden",
        )
    if status == 404:
        return NotFoundError(
            f"{target} not found{_where(namespace)}{detail}",
            status=status,
            reason=reason or "NotFound",
        )
    if status == 409:
        return InvalidInputError(
            f"{target} already exists{_where(namespace)}{detail}; pick another name or delete it",
            status=status,
            reason=reason or "AlreadyExists",
        )
    if status in (400, 422):
        return InvalidInputError(
            f"the API server rejected the request to {verb} {target}{detail}; fix the input",
            status=status,
            reason=reason or ("Invalid" if status == 422 else "BadRequest"),
        )
    if status == 429:
        return ApiServerError(
            f"the API server is throttling requests (429){detail}; wait a moment and retry",
            status=status,
            reason=reason or "TooManyRequests",
        )
    webhook = _WEBHOOK.search(message or "")
    if status == 500 and webhook:
        return ApiServerError(webhook_message(webhook, verb, target), status=status, reason=reason)
    return ApiServerError(
        f"the Kubernetes API server failed to {verb} {target} ({status} "
        f"{reason or 'error'}{detail}); retry, or check the cluster's health",
        status=status,
        reason=reason,
    )


# A validating admission webhook's refusal (k8s.io/apiserver pkg/admission/plugin/webhook/
# errors: 403 "admission webhook %q denied the request: %s"): the content, not the caller.
_DENIED = re.compile(r'admission webhook "(?P<hook>[^"]+)" denied the request: (?P<why>.*)', re.S)
_INVALID_VALUE = re.compile(r"Invalid value: [\[{].*[\]}]: ", re.S)


def shorten_invalid(text: str) -> str:
    """``field.Invalid`` quotes the whole value (a runtimePatches list in JSON): keep the
    field path and the reason, drop the value."""
    return _INVALID_VALUE.sub("Invalid value: ...: ", " ".join(text.split()))


# kube-apiserver's answer when an admission webhook's controller does not answer (it is
# down, restarting or unreachable); failurePolicy Fail turns that into a 500 on the request.
_WEBHOOK = re.compile(
    r'failed calling webhook "(?P<hook>[^"]+)"(?:.*?https://(?P<svc>[^./:"]+)\.(?P<ns>[^./:"]+)'
    r"\.svc)?(?:.*?(?P<why>connect: connection refused|context deadline exceeded|no endpoints"
    r"|i/o timeout|EOF|x509: [^;]+))?"
)


def webhook_message(match: re.Match[str], verb: str, target: str) -> str:
    """``the admission webhook W (service S in namespace N) did not answer ...``: one line."""
    service = f" (service {match['svc']} in namespace {match['ns']})" if match["svc"] else ""
    why = f" ({match['why']})" if match["why"] else ""
    check = f"`kubectl get pods -n {match['ns']}`" if match["ns"] else "its controller"
    return (
        f"could not {verb} {target}: the admission webhook {match['hook']}{service} did not "
        f"answer{why}, so the API server refused the request and nothing was changed; the "
        f"controller serving it is down or restarting: check {check}, and run it again once "
        "it is back"
    )


def connection_failure(exc: BaseException, host: str) -> ApiServerError:
    """Error for an unreachable API server or a TLS failure."""
    text = str(exc)
    if isinstance(exc, ssl.SSLError) or "SSL" in type(exc).__name__ or "CERTIFICATE" in text:
        return ApiServerError(
            f"TLS failure talking to the Kubernetes API server at {host} "
            f"({type(exc).__name__}); check the certificate authority in your kubeconfig",
            reason="TLSError",
        )
    if isinstance(exc, urllib3.exceptions.ProxyError) or isinstance(
        getattr(exc, "reason", None), urllib3.exceptions.ProxyError
    ):
        return ApiServerError(
            f"cannot reach the Kubernetes API server at {host} through the kubeconfig's "
            f"proxy-url ({_why_unreachable(exc)}): start the proxy, or fix proxy-url",
            reason="ConnectionError",
        )
    return ApiServerError(
        f"cannot reach the Kubernetes API server at {host} ({_why_unreachable(exc)}): start "
        "the cluster, or point KUBECONFIG at a running one",
        reason="ConnectionError",
    )


def _why_unreachable(exc: BaseException) -> str:
    """``connection refused``, ``timed out``, ``unknown host`` or the exception's type name."""
    seen = f"{exc} {getattr(exc, 'reason', '')!r}".lower()
    if "refused" in seen:
        return "connection refused"
    if "timed out" in seen or "timeout" in seen:
        return "timed out"
    if "name or service not known" in seen or "name resolution" in seen or "nodename" in seen:
        return "unknown host"
    return type(exc).__name__


def map_api_exception(
    exc: ApiException,
    *,
    verb: str,
    resource: str,
    namespace: str | None = None,
    name: str | None = None,
    host: str = "",
) -> TrainJobError:
    """Map an ``ApiException`` (including the ``status=0`` handshake form) to an engine error."""
    status = exc.status or 0
    body: bytes | str | None = exc.body
    http_reason = str(exc.reason or "")
    if status == 0:
        code, hs_body = _handshake_parts(http_reason)
        if code is None:
            if "SSL" in http_reason or "CERTIFICATE" in http_reason:
                return ApiServerError(
                    f"TLS failure talking to the Kubernetes API server at {host}; check the "
                    "certificate authority in your kubeconfig"
                )
            return ApiServerError(
                f"request to {verb} {resource} failed before reaching the API server at {host}: "
                f"{http_reason.splitlines()[0] if http_reason else 'unknown error'}"
            )
        status, body, http_reason = code, hs_body, ""
    return map_http_failure(
        status,
        body,
        verb=verb,
        resource=resource,
        namespace=namespace,
        name=name,
        host=host,
        http_reason=http_reason,
    )


def request(
    api_client: ApiClient,
    method: str,
    path: str,
    *,
    verb: str,
    resource: str,
    namespace: str | None = None,
    name: str | None = None,
    query: Iterable[tuple[str, str]] | None = None,
    body: Any = None,
    timeout: float | tuple[float, float] | None = 30.0,
    stream: bool = False,
    attempts: int | None = None,
    content_type: str = "application/json",
    in_outage_window: bool = True,
) -> Any:
    """Send one JSON request; return the decoded body (or the urllib3 response if ``stream``).
    ``content_type`` is the body's (a merge patch's, for instance). ``in_outage_window=False``
    keeps a best-effort request (a note for the sidebar) out of the client's outage bookkeeping:
    its failure is neither announced nor waited for.

    Failures raise engine errors: HTTP errors through :func:`map_http_failure`, transport
    errors as :class:`ApiServerError`. GET and DELETE (idempotent) are retried with backoff on
    5xx/429 and connection errors (``attempts`` calls in all, or for as long as the client's
    :class:`~.retry.RetryWindow` waits for a server that answered before); other methods are
    sent once unless ``attempts`` says otherwise. A 401 gets a fresh credential and one more
    try (``credentials.py``).
    """
    if attempts is None:
        attempts = ATTEMPTS if method.upper() in ("GET", "DELETE") else 1
    return with_fresh_credentials(
        api_client.configuration,
        lambda: with_retries(
            lambda: _request_once(
                api_client,
                method,
                path,
                verb=verb,
                resource=resource,
                namespace=namespace,
                name=name,
                query=query,
                body=body,
                timeout=timeout,
                stream=stream,
                content_type=content_type,
            ),
            what=f"{verb} {resource}",
            attempts=max(1, attempts),
            window=window_of(api_client) if in_outage_window else None,
        ),
    )


def _request_once(
    api_client: ApiClient,
    method: str,
    path: str,
    *,
    verb: str,
    resource: str,
    namespace: str | None,
    name: str | None,
    query: Iterable[tuple[str, str]] | None,
    body: Any,
    timeout: float | tuple[float, float] | None,
    stream: bool,
    content_type: str = "application/json",
) -> Any:
    """One attempt of :func:`request`."""
    host = api_client.configuration.host
    headers = {"Accept": "application/json", "Content-Type": content_type}
    try:
        method, url, headers, body, _post = api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query or []),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = api_client.call_api(
            method, url, header_params=headers, body=body, _request_timeout=timeout
        )
    except ApiException as exc:
        raise map_api_exception(
            exc, verb=verb, resource=resource, namespace=namespace, name=name, host=host
        ) from None
    except _CONNECTION_ERRORS as exc:
        raise connection_failure(exc, host) from None
    raw = response.response
    if not 200 <= response.status <= 299:
        try:
            data = raw.read()
        except _CONNECTION_ERRORS:
            data = b""
        finally:
            raw.release_conn()
        raise map_http_failure(
            response.status,
            data,
            verb=verb,
            resource=resource,
            namespace=namespace,
            name=name,
            host=host,
            http_reason=str(response.reason or ""),
        )
    if stream:
        return raw
    try:
        data = raw.read()
    except _CONNECTION_ERRORS as exc:
        raise connection_failure(exc, host) from None
    finally:
        raw.release_conn()
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        raise ApiServerError(
            f"the API server answered {verb} {resource} with something that is not JSON; "
            "check that KUBECONFIG points at a Kubernetes API server"
        ) from None
