"""Retries with exponential backoff, only for operations that are safe to repeat.

Safe to repeat: reads (GET, LIST, WATCH), DELETE, an exec handshake that failed before the 101
(the command never started), and a create whose retry answers 409 for an object we own. Never a
command that may have started, never a 4xx (401, 403, 404, 409, 422).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from ..errors import ApiServerError, TrainJobError

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
    return min(MAX_DELAY, BASE_DELAY * 2**attempt) * (0.5 + random.random() / 2)


def with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    attempts: int = ATTEMPTS,
    deadline: float | None = None,
    retry_if: Callable[[BaseException], bool] = is_transient,
) -> T:
    """Call ``fn``; on a transient failure wait and call again (at most ``attempts`` calls,
    never past ``deadline``). The last failure is raised unchanged."""
    for attempt in range(attempts):
        try:
            return fn()
        except TrainJobError as exc:
            last = attempt == attempts - 1
            delay = backoff(attempt)
            if last or not retry_if(exc):
                raise
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise
            log.info("%s failed (%s); retrying in %.1fs", what, exc, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")
