"""The local cluster's exec credential plugin and the tokens it mints (standard library only).

Run as ``python -I path/to/exec_credential.py --key-file K --user U --ttl S`` (what the
``--auth exec`` kubeconfig does: no package import, so it starts fast) or as
``python -m trainjob_magics.localcluster.core.exec_credential``. It prints an
``ExecCredential`` (``client.authentication.k8s.io/v1``) with ``status.token`` and
``status.expirationTimestamp``, as ``aws eks get-token`` or ``gke-gcloud-auth-plugin`` do
(https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins).

A token is ``tjm-exec.<payload>.<HMAC-SHA256>``: the payload (user, groups, expiry) signed with
the cluster's key, so the API server checks it without state, as EKS checks a presigned STS
request. ``--no-expiry`` leaves ``expirationTimestamp`` out (the client then learns of the
expiry from a 401, as with plugins that do not report it).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import hmac
import json
import os
import sys
import time
from dataclasses import dataclass

API_VERSION = "client.authentication.k8s.io/v1"
PREFIX = "tjm-exec."


@dataclass(frozen=True)
class ExecIdentity:
    user: str
    groups: tuple[str, ...]
    expires: float  # unix time


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def mint(key: bytes, user: str, groups: list[str], ttl: float, now: float | None = None) -> str:
    """A token for ``user`` valid for ``ttl`` seconds."""
    expires = (time.time() if now is None else now) + ttl
    payload = _b64(json.dumps({"u": user, "g": groups, "exp": expires}).encode())
    return f"{PREFIX}{payload}.{_sign(key, payload)}"


def verify(key: bytes, token: str) -> ExecIdentity | None:
    """The identity a well-signed token names (expired or not), else None."""
    if not token.startswith(PREFIX):
        return None
    payload, _, signature = token[len(PREFIX) :].partition(".")
    if not payload or not hmac.compare_digest(signature, _sign(key, payload)):
        return None
    try:
        data = json.loads(_unb64(payload))
        return ExecIdentity(str(data["u"]), tuple(data.get("g") or ()), float(data["exp"]))
    except (ValueError, KeyError, TypeError):
        return None


def _rfc3339(unix: float) -> str:
    """Whole seconds, rounded down (the client then refreshes a little early, never late)."""
    moment = datetime.datetime.fromtimestamp(int(unix), datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _requested_api_version() -> str:
    """The apiVersion in KUBERNETES_EXEC_INFO (set by kubectl and client libraries), if any."""
    info = os.environ.get("KUBERNETES_EXEC_INFO", "")
    if not info:
        return API_VERSION
    try:
        return str(json.loads(info).get("apiVersion") or API_VERSION)
    except ValueError:
        return API_VERSION


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="exec credential plugin of the local cluster")
    parser.add_argument("--key-file", required=True, help="the cluster's signing key")
    parser.add_argument("--user", required=True)
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--ttl", type=float, required=True, help="token lifetime in seconds")
    parser.add_argument("--no-expiry", action="store_true", help="omit expirationTimestamp")
    args = parser.parse_args(argv)
    wanted = _requested_api_version()
    if wanted != API_VERSION:
        print(f"error: only {API_VERSION} is supported, not {wanted}", file=sys.stderr)
        return 1
    try:
        with open(args.key_file, "rb") as fh:
            key = fh.read()
    except OSError as exc:
        print(f"error: cannot read the signing key ({exc.strerror}): log in again", file=sys.stderr)
        return 1
    now = time.time()
    status: dict[str, str] = {"token": mint(key, args.user, args.group, args.ttl, now)}
    if not args.no_expiry:
        status["expirationTimestamp"] = _rfc3339(now + args.ttl)
    json.dump({"apiVersion": API_VERSION, "kind": "ExecCredential", "status": status}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
