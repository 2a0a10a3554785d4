"""Idle stop in a real InteractiveShell on the local cluster (issue 29): a session without a
command for --idle-stop is closed though the kernel lives, and says so on the next cell; a
cell that runs longer than the limit is never cut; the sidebar's annotations are written."""

from __future__ import annotations

import time

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.helpers.kube import get_trainjob, trainjob_names
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.magics.extension import loaded_magics
from trainjob_magics.magics.failures import TrainJobMagicError


def test_idle_session_is_stopped_and_the_next_cell_says_why(
    shell: InteractiveShell, cluster: LocalCluster
) -> None:
    shell.run_line_magic("trainjob_connect", "torch-distributed --nodes 1 --idle-stop 3s")
    name = loaded_magics(shell).registry.find().session.name
    notes = get_trainjob(cluster.kubeconfig_path, name)["metadata"]["annotations"]
    assert notes["trainjob-magics/idle-stop"] == "3"
    assert "trainjob-magics/last-command" in notes
    # a cell longer than the limit is never cut
    shell.run_cell_magic("trainjob", "--out o", "sleep 4; echo survived")
    assert shell.user_ns["o"] == "survived\n"
    deadline = time.monotonic() + 15
    while name in trainjob_names(cluster.kubeconfig_path, include_deleting=False):
        assert time.monotonic() < deadline, "the idle session was not stopped"
        time.sleep(0.2)
    with pytest.raises(TrainJobMagicError) as stopped:
        shell.run_cell_magic("trainjob", "", "hostname")
    message = str(stopped.value)
    assert "\n" not in message
    assert "was stopped for being idle (no command for 3 s) at " in message
    assert "reconnect with %trainjob_connect" in message


def test_bad_idle_stop_is_one_line(shell: InteractiveShell, cluster: LocalCluster) -> None:
    with pytest.raises(TrainJobMagicError, match="--idle-stop 'soon' is not a duration"):
        shell.run_line_magic("trainjob_connect", "torch-distributed --nodes 1 --idle-stop soon")
