"""RetryWindow: how long calls wait for an API server that answered before (kube/retry.py).

The failures are the engine's own ApiServerError values, as requests.connection_failure makes
them; the integration tests (test_apiserver_restart.py) produce them for real.
"""

from __future__ import annotations

import pytest

from trainjob_magics.engine.errors import ApiServerError, InvalidInputError
from trainjob_magics.engine.kube.retry import (
    ATTEMPTS,
    RetryWindow,
    validate_retry_seconds,
    with_retries,
)

HOST = "https://10.0.0.1:6443"


def refused() -> ApiServerError:
    return ApiServerError(
        f"cannot reach the Kubernetes API server at {HOST} (connection refused): start the "
        "cluster, or point KUBECONFIG at a running one",
        reason="ConnectionError",
    )


class Server:
    """Answers after ``down`` refused calls."""

    def __init__(self, down: int, failure=refused) -> None:
        self.down = down
        self.calls = 0
        self.failure = failure

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.down:
            raise self.failure()
        return "ok"


def reached_window(seconds: float) -> RetryWindow:
    window = RetryWindow(HOST, seconds)
    assert with_retries(Server(0), what="get", window=window) == "ok"
    assert window.reached
    return window


def test_a_server_never_reached_fails_after_the_usual_attempts() -> None:
    window = RetryWindow(HOST, seconds=60)
    server = Server(down=100)
    with pytest.raises(ApiServerError, match="connection refused"):
        with_retries(server, what="get", window=window)
    assert server.calls == ATTEMPTS and not window.reached and not window.down


def test_an_outage_is_waited_for_with_one_line_when_it_starts_and_one_when_it_ends() -> None:
    window = reached_window(seconds=60)
    notes: list[str] = []
    server = Server(down=ATTEMPTS + 2)  # more failures than the attempts without a window
    with window.listening(notes.append):
        assert with_retries(server, what="get", window=window) == "ok"
    assert server.calls == ATTEMPTS + 3
    assert notes[0] == "API server unreachable (connection refused), retrying for up to 60s"
    assert notes[1].startswith("API server reachable again after ")
    assert len(notes) == 2 and not window.down


def test_a_listener_that_joins_during_an_outage_hears_it_at_once() -> None:
    window = reached_window(seconds=60)
    assert window.outage_deadline(refused()) is not None
    notes: list[str] = []
    with window.listening(notes.append):
        pass
    assert notes == ["API server unreachable (connection refused), retrying for up to 60s"]
    window.succeeded()
    with window.listening(notes.append):
        pass
    assert len(notes) == 1  # back up: nothing to tell a new listener


def test_an_outage_longer_than_the_window_gives_one_line_and_later_calls_fail_at_once() -> None:
    window = reached_window(seconds=0.3)
    with pytest.raises(ApiServerError) as info:
        with_retries(Server(down=10_000), what="get", window=window)
    assert str(info.value) == (
        f"the Kubernetes API server at {HOST} has been unreachable for more than 0.3s "
        "(connection refused); check the cluster (e.g. `kubectl get --raw /readyz`) and run it "
        "again once the server is back (api_retry_seconds sets how long to wait)"
    )
    later = Server(down=10_000)
    with pytest.raises(ApiServerError, match=r"unreachable for more than 0\.3s"):
        with_retries(later, what="get", window=window)
    assert later.calls == 1  # the outage already outlasted the window: no new wait
    assert with_retries(Server(0), what="get", window=window) == "ok"
    assert not window.down  # a success ends the outage; the next one gets a new window


def test_one_attempt_is_never_repeated_even_in_an_outage() -> None:
    window = reached_window(seconds=60)
    server = Server(down=1)
    with pytest.raises(ApiServerError, match="connection refused"):
        with_retries(server, what="create", attempts=1, window=window)
    assert server.calls == 1


def test_a_5xx_answer_is_not_an_outage() -> None:
    window = reached_window(seconds=60)

    def unavailable() -> ApiServerError:
        return ApiServerError("the server failed (503)", status=503, reason="ServiceUnavailable")

    server = Server(down=100, failure=unavailable)
    with pytest.raises(ApiServerError, match="503"):
        with_retries(server, what="get", window=window)
    assert server.calls == ATTEMPTS and not window.down


@pytest.mark.parametrize("bad", [-1, "30", None, True, float("nan")])
def test_api_retry_seconds_must_be_seconds(bad) -> None:
    with pytest.raises(InvalidInputError, match="api_retry_seconds must be a number"):
        validate_retry_seconds(bad)
    assert validate_retry_seconds(0) == 0.0


def test_connect_status_shows_the_outage_as_its_problem_and_then_clears_it() -> None:
    """readiness.outage_reporter: the last status again, with the notice as its problem."""
    from trainjob_magics.engine.result import JobStatus
    from trainjob_magics.engine.trainjob.readiness import outage_reporter

    shown: list[JobStatus] = []
    on_status, on_notice = outage_reporter(shown.append)
    on_notice("API server unreachable (connection refused), retrying for up to 30s")
    assert shown == []  # nothing to show yet
    status = JobStatus("j", "default", "mpi-interactive", "Pending", "waiting for pods")
    on_status(status)
    on_notice("API server unreachable (connection refused), retrying for up to 30s")
    on_notice("API server reachable again after 2s")
    assert [s.problem for s in shown] == [
        "",
        "API server unreachable (connection refused), retrying for up to 30s",
        "",
    ]
    assert all(s.message == "waiting for pods" for s in shown)
