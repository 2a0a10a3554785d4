"""Credentials that change while a session runs: exec plugins and token files.

As client-go does: an exec plugin's token is kept until its ``expirationTimestamp`` and fetched
again after a 401 (k8s.io/client-go/plugin/pkg/client/auth/exec/exec.go); a token file
(in-cluster service account, kubeconfig ``tokenFile``) is re-read every minute and after a 401
(k8s.io/client-go/transport/token_source.go). :func:`with_fresh_credentials` wraps one request
(REST, watch, logs, an exec handshake): on a 401 it gets a new credential and sends it once
more; a second 401 (or nothing new to get) is the one line of :meth:`Credential.rejected`.
Tokens are never logged or put into a message.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kubernetes.config.dateutil import parse_rfc3339

from ..errors import ApiServerError, ConfigError, TrainJobError

T = TypeVar("T")

ATTRIBUTE = "trainjob_credential"  # where a Configuration keeps its Credential
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
REFRESH_MARGIN = 10.0  # seconds before expirationTimestamp a token is fetched again (at most)
TOKEN_FILE_PERIOD = 60.0  # client-go re-reads token files every minute
PLUGIN_TIMEOUT = 120.0  # an exec plugin that hangs longer fails (a login that needs a human)
LOGIN_HINT = "refresh your login (e.g. aws sso login / gcloud auth login) and run the cell again"


class Credential:
    """A kubeconfig user's (or service account's) credential; thread-safe.

    ``generation`` counts the tokens fetched, so that several requests refused at once make
    one refresh, not one each.
    """

    refreshable = False

    def __init__(self, who: str) -> None:
        self.who = who  # "kubeconfig user NAME" or "the service account token in PATH"
        self.generation = 0
        self._lock = threading.Lock()

    def apply(self, configuration: Any) -> None:
        """Put the current token into ``configuration`` (its ``refresh_api_key_hook``)."""

    def refresh(self, generation: int) -> bool:
        """After a 401 to a request sent at ``generation``: fetch a new credential. False
        when there is nothing new to fetch."""
        if not self.refreshable:
            return False
        with self._lock:
            if self.generation != generation:
                return True  # another request refreshed it already
            self._fetch()
            return True

    def _fetch(self) -> None:
        """Get a new token (called with the lock held); raises ConfigError when it cannot."""

    def rejected(self) -> ApiServerError:
        return ApiServerError(
            f"the API server rejected the credentials of {self.who} (401 Unauthorized: expired "
            f"or revoked): {LOGIN_HINT}",
            status=401,
            reason="Unauthorized",
        )


class _BearerSource(Credential):
    """A credential that is a bearer token with a freshness rule."""

    refreshable = True

    def __init__(self, who: str) -> None:
        super().__init__(who)
        self._token: str | None = None

    def apply(self, configuration: Any) -> None:
        with self._lock:
            if self._token is None or self._stale():
                self._fetch()
            token = self._token
        configuration.api_key["BearerToken"] = f"Bearer {token}"
        configuration.api_key_prefix.pop("BearerToken", None)

    def _stale(self) -> bool:
        return False

    def _set(self, token: str) -> None:
        self._token = token
        self.generation += 1


class ExecPlugin(_BearerSource):
    """The token of an exec credential plugin (``users[].user.exec``), kept until it expires."""

    def __init__(
        self,
        user: str,
        exec_config: dict[str, Any],
        *,
        base_path: str,
        cluster: dict[str, Any] | None = None,
        token: str | None = None,
        expires: float | None = None,
    ) -> None:
        super().__init__(f"kubeconfig user {user}")
        self.user = user
        self.exec_config = exec_config
        self.base_path = base_path
        self.cluster = cluster or {}
        self._expires = expires  # unix time, None: until a 401
        self._margin = REFRESH_MARGIN
        if token:
            self._set(token)
            if expires is not None:
                self._margin = min(REFRESH_MARGIN, max(0.0, expires - time.time()) / 4)

    def _stale(self) -> bool:
        return self._expires is not None and time.time() >= self._expires - self._margin

    def _fetch(self) -> None:
        status = run_exec_plugin(self.exec_config, self.base_path, self.cluster, self.who)
        token = status.get("token")
        if not isinstance(token, str) or not token:
            raise ConfigError(
                f"the exec credential plugin of {self.who} returned no token; {LOGIN_HINT}"
            )
        expires = status.get("expirationTimestamp")
        self._expires = parse_rfc3339(expires).timestamp() if expires else None
        if self._expires is not None:
            self._margin = min(REFRESH_MARGIN, max(0.0, self._expires - time.time()) / 4)
        self._set(token)


class TokenFile(_BearerSource):
    """A token read from a file that may be rewritten (service account, ``tokenFile``)."""

    def __init__(self, path: str | os.PathLike[str], who: str, *, in_cluster: bool = False) -> None:
        super().__init__(who)
        self.path = Path(path)
        self.in_cluster = in_cluster
        self._read_at = 0.0

    def _stale(self) -> bool:
        return time.monotonic() - self._read_at >= TOKEN_FILE_PERIOD

    def _fetch(self) -> None:
        try:
            token = self.path.read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the token file {self.path} of {self.who} ({exc.strerror}); "
                "check that it is mounted"
            ) from None
        if not token:
            raise ConfigError(f"the token file {self.path} of {self.who} is empty")
        self._read_at = time.monotonic()
        if token != self._token:
            self._set(token)

    def rejected(self) -> ApiServerError:
        if not self.in_cluster:
            return super().rejected()
        return ApiServerError(
            f"the API server rejected the token in {self.path} of {self.who} (401 Unauthorized: "
            "expired or revoked): check the service account, then run the cell again",
            status=401,
            reason="Unauthorized",
        )


def run_exec_plugin(
    exec_config: dict[str, Any], base_path: str, cluster: dict[str, Any], who: str
) -> dict[str, Any]:
    """Run the plugin as client-go does (``KUBERNETES_EXEC_INFO``, ``env``, a command path
    relative to the kubeconfig); return its ``status``. Failures raise one-line ConfigErrors
    (the plugin's last stderr line, never its stdout: that holds the token)."""
    api_version = str(exec_config.get("apiVersion") or "")
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(
            f"the exec plugin of {who} asks for apiVersion {api_version!r}; use one of "
            f"{', '.join(EXEC_API_VERSIONS)}"
        )
    command = str(exec_config.get("command") or "")
    if os.sep in command and not os.path.isabs(command):
        command = os.path.join(base_path, command)
    env = dict(os.environ)
    env.update({e["name"]: str(e["value"]) for e in exec_config.get("env") or [] if "name" in e})
    spec: dict[str, Any] = {"interactive": False}
    if exec_config.get("provideClusterInfo"):
        spec["cluster"] = _cluster_info(cluster)
    info = {"apiVersion": api_version, "kind": "ExecCredential", "spec": spec}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    argv = [command, *[str(a) for a in exec_config.get("args") or []]]
    try:
        proc = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PLUGIN_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise ConfigError(
            f"the exec credential plugin {command!r} of {who} is not installed; install it or "
            "fix the kubeconfig"
        ) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(
            f"the exec credential plugin of {who} did not run ({type(exc).__name__}); {LOGIN_HINT}"
        ) from None
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.decode("utf-8", "replace").splitlines()]
        last = next((line for line in reversed(lines) if line), "")[:200]
        detail = f": {last}" if last else ""
        raise ConfigError(
            f"the exec credential plugin of {who} failed (exit code {proc.returncode}{detail}); "
            f"{LOGIN_HINT}"
        )
    try:
        data = json.loads(proc.stdout)
        status = data["status"]
        if data.get("kind") != "ExecCredential" or not isinstance(status, dict):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f"the exec credential plugin of {who} printed no ExecCredential; check the plugin"
        ) from None
    return status


def _cluster_info(cluster: dict[str, Any]) -> dict[str, Any]:
    """``spec.cluster`` of KUBERNETES_EXEC_INFO (client.authentication.k8s.io Cluster)."""
    info: dict[str, Any] = {"server": cluster.get("server", "")}
    for key, field in (
        ("certificate-authority-data", "certificate-authority-data"),
        ("tls-server-name", "tls-server-name"),
        ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
        ("proxy-url", "proxy-url"),
    ):
        if key in cluster:
            info[field] = cluster[key]
    for ext in cluster.get("extensions") or []:
        if ext.get("name") == "client.authentication.k8s.io/exec":
            info["config"] = ext.get("extension")
    return info


def install(configuration: Any, credential: Credential) -> None:
    """Make ``configuration`` take its token from ``credential`` on every request."""
    setattr(configuration, ATTRIBUTE, credential)
    if credential.refreshable:
        configuration.refresh_api_key_hook = credential.apply
        # the client asks the hook only for a key it already has
        configuration.api_key.setdefault("BearerToken", "")


def credential_of(configuration: Any) -> Credential | None:
    return getattr(configuration, ATTRIBUTE, None)


def with_fresh_credentials(configuration: Any, send: Callable[[], T]) -> T:
    """``send()``; after a 401, fetch a new credential and ``send()`` once more."""
    credential = credential_of(configuration)
    if credential is None:
        return send()
    generation = credential.generation
    try:
        return send()
    except TrainJobError as exc:
        if exc.status != 401 or exc.partial is not None:
            raise
        if not credential.refresh(generation):
            raise credential.rejected() from None
    try:
        return send()
    except TrainJobError as exc:
        if exc.status == 401 and exc.partial is None:
            raise credential.rejected() from None
        raise
