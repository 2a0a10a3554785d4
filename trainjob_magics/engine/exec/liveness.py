"""Finding a WebSocket connection that went silent: no byte and no close (a dead node, a NAT or
load balancer that dropped the flow). TCP alone may not notice for many minutes, so while
nothing arrives we send pings (the API server and the kubelet answer them with pongs, as they
do for client-go's WebSocket executor: ``k8s.io/client-go/tools/remotecommand/websocket.go``,
``pingPeriod`` and ``pingReadDeadline``), and after ``silent_after`` seconds without a single
byte, a pong included, the connection is given up as :class:`ConnectionSilent`.

A command that prints nothing for an hour is not silent: its connection still answers pings.
"""

from __future__ import annotations

import time

from .frames import OP_PING, ConnectionDropped, client_frame

PING_EVERY = 10.0  # seconds without a byte before we ping (and between pings)
SILENT_AFTER = 30.0  # seconds without a byte, pongs included, before we give up


class ConnectionSilent(ConnectionDropped):
    """No byte arrived for ``seconds``, not even a pong to our pings."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no byte for {seconds:g} s, not even a pong to our pings")
        self.seconds = seconds


class Liveness:
    """When to ping and when to give up, from the time of the last byte received."""

    def __init__(
        self,
        silent_after: float = SILENT_AFTER,
        ping_every: float | None = None,
        now: float | None = None,
    ) -> None:
        self.silent_after = silent_after
        # at least two pings go unanswered before a connection counts as silent
        self.ping_every = min(PING_EVERY, silent_after / 3) if ping_every is None else ping_every
        self.heard_at = time.monotonic() if now is None else now
        self.pinged_at = self.heard_at

    def heard(self, now: float | None = None) -> None:
        """Bytes arrived."""
        self.heard_at = time.monotonic() if now is None else now

    def check(self, now: float) -> bytes | bytearray | None:
        """A ping frame to send now, or None; raises :class:`ConnectionSilent` past the bound."""
        if now - self.heard_at >= self.silent_after:
            raise ConnectionSilent(self.silent_after)
        if now - max(self.heard_at, self.pinged_at) >= self.ping_every:
            self.pinged_at = now
            return client_frame(b"", OP_PING)
        return None

    def next_due(self) -> float:
        """The monotonic time of the next ping or of giving up, whichever comes first."""
        return min(
            max(self.heard_at, self.pinged_at) + self.ping_every,
            self.heard_at + self.silent_after,
        )


__all__ = ["PING_EVERY", "SILENT_AFTER", "ConnectionSilent", "Liveness"]
