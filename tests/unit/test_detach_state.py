"""``DetachedState.live``: a detached run lives while any of its pods still runs it (a torch
run's pods end one by one; the job is not free while one of them works), and ends only when
every pod has an exit code or something outside ended it."""

from __future__ import annotations

from trainjob_magics.engine.detach.state import DetachedState

TRAINER, OTHER = "tj-node-0-0-aaaaa", "tj-node-0-1-bbbbb"


def _state(codes: dict[str, int | None], ended_by: str = "") -> DetachedState:
    return DetachedState(
        trainjob="tj",
        run=1,
        command="python train.py",
        started=None,
        pod=TRAINER,
        exit_codes=codes,
        ended_by=ended_by,
    )


def test_live_while_one_of_two_pods_still_runs_it() -> None:
    # the trainer pod's run ended, the other pod's still runs
    state = _state({TRAINER: 0, OTHER: None})
    assert state.live
    assert ": running · " in state.summary()
    # and the other way round
    assert _state({TRAINER: None, OTHER: 3}).live


def test_ended_once_every_pod_has_an_exit_code() -> None:
    state = _state({TRAINER: 3, OTHER: 0})
    assert not state.live
    assert state.exit_code == 3
    assert "ended with exit code 3 (" in state.summary()


def test_ended_from_outside_is_not_live_even_with_pods_unread() -> None:
    state = _state({TRAINER: None, OTHER: None}, ended_by="its pods are gone")
    assert not state.live
    assert ": ended: its pods are gone · " in state.summary()


def test_live_while_every_pod_runs_it() -> None:
    assert _state({TRAINER: None, OTHER: None}).live
