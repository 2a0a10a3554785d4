"""A small Kubernetes REST client (stdlib only) for the stack's own processes: the provisioner,
the fault tests. Reads the admin kubeconfig's client certificate."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import ssl
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import Any

FIELD_MANAGER = "trainjob-magics-realstack"


class ApiError(Exception):
    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status = status
        self.body = body
        msg = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{what}: HTTP {status}: {msg}")


class Gone(Exception):
    """A watch's resourceVersion is too old (410): relist."""


class KubeApi:
    """Requests to the apiserver named by a kubeconfig (client cert, token or none)."""

    def __init__(self, kubeconfig: Path) -> None:
        import yaml  # not at module level: the supervisors run with python -S

        cfg = yaml.safe_load(Path(kubeconfig).read_text())
        ctx_name = cfg.get("current-context") or cfg["contexts"][0]["name"]
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next((u["user"] for u in cfg.get("users", []) if u["name"] == ctx.get("user")), {})
        base = Path(kubeconfig).parent
        url = urllib.parse.urlparse(cluster["server"])
        self.host = url.hostname
        self.port = url.port or 443
        self.server = cluster["server"]
        self._tmp: list[Path] = []
        sslctx = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            sslctx.check_hostname = False
            sslctx.verify_mode = ssl.CERT_NONE
        elif "certificate-authority-data" in cluster:
            sslctx.load_verify_locations(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
        elif "certificate-authority" in cluster:
            sslctx.load_verify_locations(cafile=str(base / cluster["certificate-authority"]))
        cert = self._file(user, "client-certificate", base)
        key = self._file(user, "client-key", base)
        if cert:
            sslctx.load_cert_chain(cert, key)
        self.ssl = sslctx
        self.headers = {"Accept": "application/json"}
        if user.get("token"):
            self.headers["Authorization"] = f"Bearer {user['token']}"
        self._local = threading.local()

    def _file(self, user: dict, name: str, base: Path) -> str | None:
        if f"{name}-data" in user:
            fd, path = tempfile.mkstemp(prefix="realstack-kc-")
            os.write(fd, base64.b64decode(user[f"{name}-data"]))
            os.close(fd)
            self._tmp.append(Path(path))
            return path
        if name in user:
            return str(base / user[name])
        return None

    def _conn(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.ssl, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
        ok404: bool = False,
    ) -> Any:
        if query:
            path = f"{path}?{urllib.parse.urlencode(query, doseq=True)}"
        data = None
        headers = dict(self.headers)
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        for attempt in range(2):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self._conn(timeout)
            try:
                conn.timeout = timeout
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (OSError, http.client.HTTPException):
                self._local.conn = None
                with contextlib.suppress(Exception):
                    conn.close()
                if attempt:
                    raise
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = raw.decode(errors="replace")
        if resp.status == 404 and ok404:
            return None
        if resp.status >= 400:
            raise ApiError(resp.status, payload, f"{method} {path}")
        return payload

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def apply(self, path: str, obj: dict, *, force: bool = True) -> Any:
        """Server-side apply of ``obj`` at ``path`` (the object's own URL)."""
        return self.request(
            "PATCH",
            path,
            json.dumps(obj).encode(),
            query={"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"},
            content_type="application/apply-patch+yaml",
        )

    def watch(
        self, path: str, resource_version: str, *, query: dict | None = None, timeout: int = 240
    ):
        """Yield watch events from ``resource_version``; raise Gone on 410."""
        q = dict(query or {})
        q.update(
            watch="1",
            resourceVersion=resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(timeout),
        )
        conn = self._conn(timeout + 30)
        try:
            conn.request("GET", f"{path}?{urllib.parse.urlencode(q)}", headers=self.headers)
            resp = conn.getresponse()
            if resp.status == 410:
                raise Gone()
            if resp.status >= 400:
                raise ApiError(resp.status, resp.read()[:500], f"watch {path}")
            while True:
                line = resp.readline()
                if not line:
                    return
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object", {})
                    if status.get("code") == 410:
                        raise Gone()
                    raise ApiError(status.get("code", 500), status, f"watch {path}")
                yield event
        finally:
            conn.close()
