"""The background start of the real stack (scripts/test.sh): the tests that need it wait for it,
then fail (CI) or skip with the end of its output when it did not start."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.helpers import realstack_pending as P

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, "_outcome", {})
    monkeypatch.setattr(P, "POLL", 0.01)


def test_only_what_needs_the_stack_waits() -> None:
    assert P.needs_stack(TESTS / "differential" / "test_differential.py", TESTS)
    assert P.needs_stack(TESTS / "realstack" / "test_faults_real.py", TESTS)
    assert P.needs_stack(TESTS / "integration" / "test_realstack_suite.py", TESTS)
    assert not P.needs_stack(TESTS / "integration" / "test_realcluster_suite.py", TESTS)
    assert not P.needs_stack(TESTS / "unit" / "test_forward_spdy.py", TESTS)


def test_waits_until_the_start_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc = tmp_path / "realstack-up.rc"
    monkeypatch.setenv(P.ENV, str(rc))
    started = threading.Event()
    writer = threading.Timer(0.3, lambda: (rc.write_text("0\n"), started.set()))
    writer.start()
    P.wait_for_background_up()
    assert started.is_set()  # it returned only once the exit code was there


def test_a_failed_start_fails_under_require_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc = tmp_path / "realstack-up.rc"
    rc.write_text("1\n")
    rc.with_suffix(".log").write_text("building kubernetes\ngo build failed: no space left\n")
    monkeypatch.setenv(P.ENV, str(rc))
    monkeypatch.setenv("TRAINJOB_MAGICS_REQUIRE_REALSTACK", "1")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)exited 1:.*no space left"):
        P.wait_for_background_up()
    monkeypatch.delenv("TRAINJOB_MAGICS_REQUIRE_REALSTACK")
    with pytest.raises(pytest.skip.Exception, match="no space left"):
        P.wait_for_background_up()


def test_nothing_waits_without_a_background_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(P.ENV, raising=False)
    P.wait_for_background_up()
