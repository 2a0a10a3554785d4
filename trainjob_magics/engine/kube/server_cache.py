"""Answers read once per API server: kept per ``ApiClient`` and shared for ``ttl`` seconds by
the clients of one server (same URL and CA: each ``connect()`` makes a new client)."""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Generic, TypeVar

from kubernetes.client import ApiClient

T = TypeVar("T")


def server_key(api: ApiClient) -> tuple[str, str]:
    """The server an ``ApiClient`` talks to: its URL and CA."""
    cfg = api.configuration
    return str(cfg.host), str(cfg.ssl_ca_cert or getattr(cfg, "ca_cert_data", "") or "")


class ServerCache(Generic[T]):
    """One value per client, shared by every client of the same server for ``ttl`` seconds."""

    def __init__(self, ttl: float = 300.0) -> None:
        self.ttl = ttl
        self._by_client: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._by_server: dict[tuple[str, str], tuple[float, T]] = {}
        self._lock = threading.Lock()

    def get(self, api: ApiClient) -> T | None:
        with self._lock:
            found = self._by_client.get(api)
            if found is not None:
                return found
            shared = self._by_server.get(server_key(api))
            if shared is not None and time.monotonic() - shared[0] < self.ttl:
                self._by_client[api] = shared[1]
                return shared[1]
            return None

    def put(self, api: ApiClient, value: T) -> None:
        with self._lock:
            self._by_client[api] = value
            self._by_server[server_key(api)] = (time.monotonic(), value)

    def clear(self) -> None:
        with self._lock:
            self._by_client.clear()
            self._by_server.clear()


__all__ = ["ServerCache", "server_key"]
