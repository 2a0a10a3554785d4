"""A detached run on two torch pods whose trainer pod's part ended while the other pod's still
runs is live, against the local cluster: what the session reads says so, and closing without
``force`` refuses (it would kill the part still running)."""

from __future__ import annotations

import pytest

from tests.helpers.polling import wait_until
from trainjob_magics import DetachedRunError, connect
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

# the trainer pod (node 0-0) ends its part at once; the other pod's part runs on
RUN = 'case "$HOSTNAME" in *-node-0-0*) exit 0;; esac; echo working; sleep 600'


def test_a_run_still_running_in_one_of_two_pods_is_live(cluster: LocalCluster) -> None:
    session = connect(
        "torch-distributed", num_nodes=2, config_file=str(cluster.kubeconfig_path), timeout=120
    )
    try:
        run = session.detach(RUN)
        assert len(run.pods) == 2
        trainer, other = run.pods
        assert "-node-0-0" in trainer
        state = wait_until(
            lambda: (
                (s := session.detached(lines=0)) is not None
                and s.exit_codes.get(trainer) == 0
                and s
            ),
            timeout=60,
        )
        assert state.exit_codes == {trainer: 0, other: None}
        assert state.live
        assert ": running · " in state.summary()
        with pytest.raises(DetachedRunError):
            session.close()
    finally:
        session.close(force=True)
