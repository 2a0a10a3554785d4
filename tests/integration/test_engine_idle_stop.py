"""``connect(idle_stop=...)`` in the Python API on the local cluster (issue 29): a session in
which no command ran for that long is closed though the process lives, a command that runs
longer is never cut (the clock starts again when it ends), a session with a live detached run
is left running for it, and the next ``execute()`` raises one clear ``IdleStoppedError``."""

from __future__ import annotations

import re
import time

import pytest

from tests.helpers.kube import get_trainjob, trainjob_names
from tests.helpers.polling import wait_until
from trainjob_magics import IdleStoppedError, SessionClosedError, attach, connect
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


def test_idle_session_is_closed_but_a_long_command_is_never_cut(cluster: LocalCluster) -> None:
    kubeconfig = str(cluster.kubeconfig_path)
    session = connect(
        "torch-distributed", num_nodes=1, config_file=kubeconfig, timeout=60, idle_stop="2s"
    )
    try:
        assert session.idle_stop == 2.0
        notes = get_trainjob(kubeconfig, session.name)["metadata"]["annotations"]
        assert notes["trainjob-magics/idle-stop"] == "2"  # the sidebar warns from these
        assert "trainjob-magics/last-command" in notes
        # a command longer than the limit runs to its end
        result = session.execute("sleep 3; echo survived")
        ended = time.monotonic()
        assert result.stdout == "survived\n" and result.returncode == 0
        wait_until(
            lambda: session.name not in trainjob_names(kubeconfig, include_deleting=False),
            timeout=30,
        )
        assert time.monotonic() - ended >= 2.0  # the clock started again at the command's end
        assert session.closed
        with pytest.raises(IdleStoppedError) as stopped:
            session.execute("hostname")
        error = stopped.value
        assert isinstance(error, SessionClosedError)
        message = str(error)
        assert "\n" not in message
        assert re.search(
            r"^TrainJob session \S+ was stopped for being idle \(no command for 2 s\) at "
            r"\d\d:\d\d:\d\d, and TrainJob \S+ deleted; reconnect with connect\(\.\.\.\)",
            message,
        ), message
        assert error.stopped_at is not None and error.idle_stop == 2.0 and error.run is None
        assert session.idle_stopped is not None
        with pytest.raises(IdleStoppedError):
            session.write_file("x.txt", "x")
    finally:
        session.close(timeout=30)


def test_background_run_and_file_copies_hold_the_clock(cluster: LocalCluster, tmp_path) -> None:
    kubeconfig = str(cluster.kubeconfig_path)
    session = connect(
        "torch-distributed", num_nodes=1, config_file=kubeconfig, timeout=60, idle_stop=2
    )
    try:
        run = session.start("sleep 3; echo done")  # start() counts as use too
        assert run.result().stdout == "done\n"
        (tmp_path / "f.txt").write_text("payload")
        session.upload(str(tmp_path / "f.txt"), "f.txt")
        assert session.execute("cat f.txt").stdout == "payload"
        stopped = []
        session.set_idle_stop(1, on_stop=lambda s, error: stopped.append((s, error)))
        wait_until(lambda: stopped, timeout=30)
        assert stopped[0][0] is session and isinstance(stopped[0][1], IdleStoppedError)
        assert "(no command for 1 s)" in str(stopped[0][1])
    finally:
        session.close(timeout=30)


def test_off_turns_it_off_and_bad_values_are_refused(cluster: LocalCluster) -> None:
    kubeconfig = str(cluster.kubeconfig_path)
    with pytest.raises(Exception, match="idle_stop 'soon' is not a duration"):
        connect("torch-distributed", config_file=kubeconfig, idle_stop="soon")
    session = connect(
        "torch-distributed", num_nodes=1, config_file=kubeconfig, timeout=60, idle_stop=1
    )
    try:
        session.set_idle_stop(None)  # off again: the session stays
        notes = get_trainjob(kubeconfig, session.name)["metadata"]["annotations"]
        assert "trainjob-magics/idle-stop" not in notes
        assert session.idle_stop is None
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # three times the old limit, watched
            assert session.idle_stopped is None and not session.closed
            time.sleep(0.1)
        assert session.execute("echo alive").stdout == "alive\n"
    finally:
        session.close(timeout=30)


def test_a_live_detached_run_is_left_running(cluster: LocalCluster) -> None:
    kubeconfig = str(cluster.kubeconfig_path)
    session = connect("mpi-interactive", config_file=kubeconfig, timeout=60, idle_stop=2)
    name = session.name
    try:
        session.detach("sleep 60")
        wait_until(lambda: session.idle_stopped is not None, timeout=30)
        assert not session.closed
        with pytest.raises(IdleStoppedError) as stopped:
            session.execute("hostname")
        message = str(stopped.value)
        assert "left running for its detached run: Detached run 1" in message
        assert f"attach({name!r})" in message and "close(force=True)" in message
        assert stopped.value.run is not None
        job = get_trainjob(kubeconfig, name)
        assert job is not None and "deletionTimestamp" not in job["metadata"]
        assert job["metadata"]["annotations"].get("trainjob-magics/closed-by", "") == ""
        again = attach(name, config_file=kubeconfig, timeout=60)
        assert again.detached(lines=0).live
        again.close(force=True, timeout=30)
    finally:
        session.close(force=True, timeout=30)
