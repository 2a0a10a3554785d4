"""Retries with exponential backoff, only for operations that are safe to repeat.

Safe to repeat: reads (GET, LIST, WATCH), DELETE, an exec handshake that failed before the 101
(the command never started), and a create whose retry answers 409 for an object we own. Never a
command that may have started, never a 4xx (401, 403, 404, 409, 422).

An API server that answered before and now cannot be reached (a restart, a control-plane
upgrade) is waited for: calls keep retrying for up to the outage window of its
:class:`RetryWindow` (``api_retry_seconds``, default 30 s, counted from the outage's first
failure), and the window's listeners hear one "API server unreachable, retrying" line. A server
never reached fails after the usual few attempts (a wrong address should say so quickly).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..errors import ApiServerError, InvalidInputError, TrainJobError
from ..notify import notify

log = logging.getLogger(__name__)


T = TypeVar("T")


RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


CONNECTION_REASON = "ConnectionError"


ATTEMPTS = 4  # one try plus three retries


BASE_DELAY = 0.2


MAX_DELAY = 2.0


def is_transient(exc: BaseException) -> bool:
    """A 5xx/429 answer or a connection failure that did not end a running command."""
    if not isinstance(exc, ApiServerError) or getattr(exc, "partial", None) is not None:
        return False
    if exc.status in RETRY_STATUSES:
        return True
    return exc.status is None and exc.reason in ("", CONNECTION_REASON)


def backoff(attempt: int) -> float:
    """Delay before retry number ``attempt`` (0-based): 0.2 s doubling, jittered, capped."""
    return min(MAX_DELAY, BASE_DELAY * 2 ** min(attempt, 10)) * (0.5 + random.random() / 2)


DEFAULT_RETRY_SECONDS = 30.0  # how long an outage of a server reached before is waited for


OnNotice = Callable[[str], Any]  # hears "API server unreachable, retrying ..." lines


def validate_retry_seconds(value: Any) -> float:
    """``api_retry_seconds``: a number of seconds, 0 or more (0: do not wait for outages)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidInputError(
            f"api_retry_seconds must be a number of seconds (0 or more), got {value!r}"
        )
    return float(value)


OUTAGE_MAX_DELAY = 1.0  # longest pause between two tries while waiting for a server to return


def is_unreachable(exc: BaseException) -> bool:
    """A connection failure (refused, reset, timed out), not an answer of the server."""
    return (
        isinstance(exc, ApiServerError)
        and exc.status is None
        and exc.reason == CONNECTION_REASON
        and getattr(exc, "partial", None) is None
    )


class RetryWindow:
    """The outage policy of one API server connection (one kubeconfig ``Configuration``).

    ``seconds`` is how long calls wait for a server that answered before; listeners
    (``listening``) get one line when an outage starts and one when it ends."""

    def __init__(self, host: str, seconds: float = DEFAULT_RETRY_SECONDS) -> None:
        self.host = host
        self.seconds = seconds
        self.reached = False
        self._lock = threading.Lock()
        self._listeners: dict[int, Callable[[str], Any]] = {}
        self._next_key = 0
        self._down_since: float | None = None
        self._notice = ""

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def succeeded(self) -> None:
        """A call got an answer: the server is reachable (again)."""
        with self._lock:
            since, self._down_since = self._down_since, None
            self.reached = True
        if since is not None:
            self._announce(f"API server reachable again after {time.monotonic() - since:.0f}s")

    def outage_deadline(self, exc: BaseException) -> float | None:
        """Record a failed call; the moment to give up waiting, or None when it does not count
        as an outage (another failure, a server never reached, a window of 0)."""
        if not (self.reached and self.seconds > 0 and is_unreachable(exc)):
            return None
        with self._lock:
            since = self._down_since
            started = since is None
            if since is None:
                since = self._down_since = time.monotonic()
                self._notice = (
                    f"API server unreachable ({_why(exc)}), retrying for up to {self.seconds:g}s"
                )
            deadline = since + self.seconds
        if started:
            log.warning("the Kubernetes API server at %s is unreachable: %s", self.host, exc)
            self._announce(self._notice)
        return deadline

    def gave_up(self, exc: BaseException) -> ApiServerError:
        """The one line after an outage outlasted the window."""
        return ApiServerError(
            f"the Kubernetes API server at {self.host} has been unreachable for more than "
            f"{self.seconds:g}s ({_why(exc)}); check the cluster (e.g. `kubectl get --raw "
            "/readyz`) and run it again once the server is back (api_retry_seconds sets how "
            "long to wait)",
            reason=CONNECTION_REASON,
        )

    @contextlib.contextmanager
    def listening(self, callback: Callable[[str], Any] | None) -> Iterator[None]:
        """While inside, ``callback(line)`` hears outage notices (at once if one is going on)."""
        if callback is None:
            yield
            return
        with self._lock:
            key = self._next_key
            self._next_key += 1
            self._listeners[key] = callback
            notice = self._notice if self._down_since is not None else ""
        if notice:
            notify(callback, notice)
        try:
            yield
        finally:
            with self._lock:
                self._listeners.pop(key, None)

    def heard_by(
        self, fn: Callable[..., T], callback: Callable[[str], Any] | None
    ) -> Callable[..., T]:
        """``fn`` running inside :meth:`listening` (for work done in another thread)."""
        if callback is None:
            return fn

        def listened(*args: Any, **kwargs: Any) -> T:
            with self.listening(callback):
                return fn(*args, **kwargs)

        return listened

    def _announce(self, line: str) -> None:
        with self._lock:
            listeners = list(self._listeners.values())
        for callback in listeners:
            notify(callback, line)


def _why(exc: BaseException) -> str:
    text = str(exc)
    for why in ("connection refused", "timed out", "unknown host"):
        if f"({why})" in text:
            return why
    return "connection failed"


_WINDOWS: weakref.WeakKeyDictionary[Any, RetryWindow] = weakref.WeakKeyDictionary()


_WINDOWS_LOCK = threading.Lock()


def window_of(client: Any) -> RetryWindow:
    """The RetryWindow of an ApiClient (or its ``Configuration``, shared with exec)."""
    configuration = getattr(client, "configuration", client)
    with _WINDOWS_LOCK:
        window = _WINDOWS.get(configuration)
        if window is None:
            window = RetryWindow(str(getattr(configuration, "host", "")))
            _WINDOWS[configuration] = window
        return window


def with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    attempts: int = ATTEMPTS,
    deadline: float | None = None,
    retry_if: Callable[[BaseException], bool] = is_transient,
    window: RetryWindow | None = None,
) -> T:
    """Call ``fn``; on a transient failure wait and call again (at most ``attempts`` calls,
    never past ``deadline``). The last failure is raised unchanged, except when the
    ``window``'s outage outlasted it (one line that says so).

    With a ``window``, a connection failure of a server reached before is retried until the
    outage is older than ``window.seconds`` (``attempts`` 1 still means one call)."""
    attempt = 0
    while True:
        try:
            result = fn()
        except TrainJobError as exc:
            if not retry_if(exc):
                raise
            outage = window.outage_deadline(exc) if window is not None else None
            now = time.monotonic()
            if window is not None and outage is not None and attempts > 1:
                if now >= outage:
                    raise window.gave_up(exc) from None
                delay = min(OUTAGE_MAX_DELAY, backoff(attempt), outage - now)  # last try at the end
                if deadline is not None and now + delay >= deadline:
                    raise
            else:
                delay = backoff(attempt)
                if attempt >= attempts - 1:
                    raise
                if deadline is not None and now + delay >= deadline:
                    raise
            log.info("%s failed (%s); retrying in %.1fs", what, exc, delay)
            time.sleep(delay)
            attempt += 1
            continue
        if window is not None:
            window.succeeded()
        return result
