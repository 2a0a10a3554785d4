"""Fault injection for tests: failing requests, held/delayed/failed pods, dropped execs, 403s,
API server restarts.

Thread-safe: tests call these from their own thread while the server runs in its loop.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

JOURNAL_SIZE = 2000  # requests remembered by Faults.requests_seen()


@dataclass
class RequestFault:
    method: str  # "*" for any
    path: re.Pattern[str]
    code: int
    remaining: int
    message: str
    reason: str | None = None


@dataclass
class PodHold:
    pattern: re.Pattern[str]
    reason: str
    message: str


class Faults:
    """The active faults of one LocalCluster."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RequestFault] = []
        self._holds: list[PodHold] = []
        self._delays: list[tuple[re.Pattern[str], float]] = []
        self._drops: list[tuple[re.Pattern[str], int]] = []
        self._cuts: list[tuple[re.Pattern[str], int]] = []
        self._denies: list[tuple[str, str, str]] = []  # (token, verb, resource)
        self._pod_failer: Callable[..., None] | None = None
        self._restarter: Callable[[float], threading.Event] | None = None
        self.request_count = 0
        self._journal: deque[tuple[str, str]] = deque(maxlen=JOURNAL_SIZE)
        self.portforward_tunnel = True  # False: as a server older than 1.30, or the gate off

    # -- requests --------------------------------------------------------------------------

    def fail_requests(
        self,
        method: str,
        path_regex: str,
        code: int = 500,
        times: int = 1,
        message: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Fail the next `times` requests whose method and path (regex search) match."""
        msg = message or f"injected failure ({code})"
        with self._lock:
            self._requests.append(
                RequestFault(method.upper(), re.compile(path_regex), code, times, msg, reason)
            )

    def take_request_fault(self, method: str, path: str) -> RequestFault | None:
        """Consume and return the first matching request fault, if any."""
        with self._lock:
            self.request_count += 1
            self._journal.append((method.upper(), path))
            for f in self._requests:
                if f.remaining > 0 and f.method in ("*", method.upper()) and f.path.search(path):
                    f.remaining -= 1
                    if f.remaining == 0:
                        self._requests.remove(f)
                    return f
        return None

    def requests_seen(self) -> list[tuple[str, str]]:
        """The last JOURNAL_SIZE requests as (method, path with query), oldest first."""
        with self._lock:
            return list(self._journal)

    # -- pods ------------------------------------------------------------------------------

    def hold_pods(
        self,
        pod_regex: str,
        reason: str = "ImagePullBackOff",
        message: str = 'Back-off pulling image "local"',
    ) -> None:
        """Keep matching pods Pending (container waiting with `reason`) until released."""
        with self._lock:
            self._holds.append(PodHold(re.compile(pod_regex), reason, message))

    def release_pods(self, pod_regex: str | None = None) -> None:
        with self._lock:
            self._holds = [
                h for h in self._holds if pod_regex is not None and h.pattern.pattern != pod_regex
            ]

    def pod_hold(self, pod_name: str) -> PodHold | None:
        with self._lock:
            return next((h for h in self._holds if h.pattern.search(pod_name)), None)

    def delay_pods(self, pod_regex: str, seconds: float) -> None:
        """Add `seconds` to the Pending -> Running delay of matching pods."""
        with self._lock:
            self._delays.append((re.compile(pod_regex), seconds))

    def pod_delay(self, pod_name: str) -> float:
        with self._lock:
            return sum(s for p, s in self._delays if p.search(pod_name))

    def fail_pod(
        self, namespace: str, name: str, exit_code: int = 1, reason: str = "Error"
    ) -> None:
        """Make a pod fail now: its processes are killed and it turns Failed."""
        if self._pod_failer is None:
            raise RuntimeError("the local cluster is not running")
        self._pod_failer(namespace, name, exit_code, reason)

    def evict_pod(
        self,
        namespace: str,
        name: str,
        message: str = "The node was low on resource: memory. Threshold quantity: 100Mi, "
        "available: 64Mi. ",
    ) -> None:
        """Evict a pod as the kubelet's eviction manager does under node pressure: its
        processes are killed, it turns Failed with reason ``Evicted`` and ``message``."""
        if self._pod_failer is None:
            raise RuntimeError("the local cluster is not running")
        self._pod_failer(namespace, name, 137, "Evicted", message)

    def set_pod_failer(self, fn: Callable[..., None] | None) -> None:
        self._pod_failer = fn

    # -- API server ------------------------------------------------------------------------

    def restart_apiserver(self, downtime: float = 5.0) -> threading.Event:
        """Restart the API server as a control-plane upgrade does: drop every connection (REST,
        watches, exec WebSockets, logs) and refuse new ones for ``downtime`` seconds. The
        cluster's state (objects, resourceVersions) and the pods' processes stay.

        Returns once the server is down; the returned event is set when it listens again."""
        if downtime < 0:
            raise ValueError(f"downtime must not be negative, got {downtime}")
        if self._restarter is None:
            raise RuntimeError("the local cluster is not running")
        return self._restarter(downtime)

    def set_apiserver_restarter(self, fn: Callable[[float], threading.Event] | None) -> None:
        self._restarter = fn

    # -- exec ------------------------------------------------------------------------------

    def drop_exec(self, pod_regex: str, after_bytes: int) -> None:
        """Drop exec WebSockets into matching pods after `after_bytes` of output."""
        with self._lock:
            self._drops.append((re.compile(pod_regex), after_bytes))

    def exec_drop_after(self, pod_name: str) -> int | None:
        with self._lock:
            return next((k for p, k in self._drops if p.search(pod_name)), None)

    def cut_exec(self, pod_regex: str, after_bytes: int) -> None:
        """Cut the node's side of exec streams into matching pods after `after_bytes` of
        output, as a kubelet restart does, and answer as a real API server does then: over v5,
        which its stream translator serves (1.30+; the kubelet's own on 1.36), a Success status
        on channel 3 and a close 1000, for the SPDY stream behind it ended with an empty error
        stream, which client-go's remotecommand reads as success (errorstream.go); over v4,
        proxied untranslated, the connection drops (as :meth:`drop_exec`). The process runs on."""
        with self._lock:
            self._cuts.append((re.compile(pod_regex), after_bytes))

    def exec_cut_after(self, pod_name: str) -> int | None:
        with self._lock:
            return next((k for p, k in self._cuts if p.search(pod_name)), None)

    # -- RBAC ------------------------------------------------------------------------------

    def deny(self, token: str, verb: str, resource: str) -> None:
        """Answer 403 to `verb` on `resource` (e.g. "create", "pods/exec") for this token.

        verb or resource "*" matches everything."""
        with self._lock:
            self._denies.append((token, verb, resource))

    def denied(self, token: str, verb: str, resource: str) -> bool:
        with self._lock:
            return any(
                t == token and v in ("*", verb) and r in ("*", resource) for t, v, r in self._denies
            )

    def clear(self) -> None:
        """Remove every fault (the pod failer hook stays)."""
        with self._lock:
            self._requests.clear()
            self._holds.clear()
            self._delays.clear()
            self._drops.clear()
            self._cuts.clear()
            self._denies.clear()
            self.portforward_tunnel = True
