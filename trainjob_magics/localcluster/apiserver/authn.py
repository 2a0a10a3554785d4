"""Who a request comes from: a client certificate, a bearer token, or an exec plugin's token.

The order is kube-apiserver's union authenticator (pkg/kubeapiserver/authenticator/config.go):
the x509 authenticator first (CN = user, O = groups; k8s.io/apiserver
pkg/authentication/request/x509/x509.go CommonNameUserConversion), then bearer tokens. A
credential that fails gets the API server's plain 401 Status (``Unauthorized``), whatever the
cause: unknown, expired or revoked.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..core.apierror import ApiError
from ..core.exec_credential import verify

CERT_PREFIX = "x509:"  # the key a certificate user has in place of a token (faults, logs)


@dataclass
class User:
    name: str
    deny: set[tuple[str, str]] = field(default_factory=set)
    # namespaces where this user may do nothing (a Role that covers only the others)
    deny_namespaces: set[str] = field(default_factory=set)


@dataclass
class AuthStats:
    """What the authenticator saw (for tests): distinct exec tokens accepted, 401s."""

    exec_tokens: int = 0
    expired: int = 0  # requests refused because their exec token had expired
    rejected: int = 0  # every 401
    certificates: int = 0  # requests authenticated by a client certificate
    _seen: set[str] = field(default_factory=set, repr=False)


class Authenticator:
    """Maps a request's credentials to a :class:`User`; thread-safe (tests revoke from their
    thread)."""

    def __init__(self, users: dict[str, User], exec_key: bytes) -> None:
        self.users = users  # bearer token -> user
        self.exec_key = exec_key
        self.revoked: set[str] = set()  # user names whose every credential is refused
        self.stats = AuthStats()
        self._lock = threading.Lock()

    def _named(self, name: str) -> User:
        """The registered user of that name (its denials), else a plain one."""
        return next((u for u in list(self.users.values()) if u.name == name), None) or User(name)

    def authenticate(self, authorization: str, peercert: dict[str, Any] | None) -> tuple[str, User]:
        """``(credential key, user)``, or raise the 401."""
        found = self._from_certificate(peercert) or self._from_token(authorization)
        if found is not None and found[1].name not in self.revoked:
            return found
        with self._lock:
            self.stats.rejected += 1
        raise ApiError(401, "Unauthorized")

    def _from_certificate(self, peercert: dict[str, Any] | None) -> tuple[str, User] | None:
        """The user a verified client certificate names (the TLS layer checked it against
        the CA already)."""
        if not peercert:
            return None
        attrs = [pair for rdn in peercert.get("subject", ()) for pair in rdn]
        cn = next((v for k, v in attrs if k == "commonName"), "")
        if not cn:
            return None
        with self._lock:
            self.stats.certificates += 1
        return CERT_PREFIX + cn, self._named(cn)

    def _from_token(self, authorization: str) -> tuple[str, User] | None:
        token = authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""
        if not token:
            return None
        user = self.users.get(token)
        if user is not None:
            return token, user
        identity = verify(self.exec_key, token)
        if identity is None:
            return None
        if identity.expires <= time.time():
            with self._lock:
                self.stats.expired += 1
            return None
        with self._lock:
            digest = hashlib.sha256(token.encode()).hexdigest()
            if digest not in self.stats._seen:
                self.stats._seen.add(digest)
                self.stats.exec_tokens += 1
        return token, self._named(identity.user)
