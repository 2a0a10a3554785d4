"""A ``%trainjob_connect --queue Q --timeout S`` that times out in its queue: the TrainJob keeps
its place, and the kernel keeps owning it (listed, closed with the others, deleted at exit, and
ended by its idle watchdog when the kernel is gone)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.helpers.kernels import Kernel, load_magics_code
from tests.helpers.kube import delete_all_trainjobs, get_trainjob, jobset_pods, list_trainjobs
from tests.helpers.polling import wait_until
from tests.helpers.shell import magics_shell
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.kueue import KueueConfig
from trainjob_magics.magics.failures import TrainJobMagicError, TrainJobUsageError

pytestmark = pytest.mark.timeout(120)
CONNECT = "torch-distributed --cpu 1 --queue user-queue --timeout 3"


@pytest.fixture(scope="module")
def kcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster whose ClusterQueue admits nothing until a test gives it quota."""
    cfg = KueueConfig(quota={"cpu": "0", "memory": "4Gi"})
    with LocalCluster(
        root_dir=tmp_path_factory.mktemp("queue-timeout"), kueue=cfg, bookmark_interval=0.5
    ) as c:
        yield c
        delete_all_trainjobs(c.kubeconfig_path)


@pytest.fixture
def kc(kcluster: LocalCluster) -> Iterator[str]:
    kcluster.kueue.set_quota({"cpu": "0"})
    yield str(kcluster.kubeconfig_path)
    kcluster.kueue.set_quota({"cpu": "0"})
    delete_all_trainjobs(kcluster.kubeconfig_path)


def _names(kc: str) -> set[str]:
    return {j["metadata"]["name"] for j in list_trainjobs(kc)}


def test_queued_timeout_stays_in_the_registry(kc: str, kcluster: LocalCluster, capsys) -> None:
    with magics_shell(kc, widgets="off") as sh:
        with pytest.raises(TrainJobMagicError) as info:
            sh.run_line_magic("trainjob_connect", f"{CONNECT} --name qa --as a")
        msg = str(info.value)
        assert "TrainJob qa is still queued in LocalQueue user-queue after 3s" in msg
        assert "%trainjob_connect --attach qa" in msg and "%trainjob_close qa" in msg
        assert "attach(" not in msg and "session.close()" not in msg
        assert "qa" in _names(kc)

        with pytest.raises(TrainJobMagicError, match="still queued"):
            sh.run_line_magic("trainjob_connect", f"{CONNECT} --name qb --as b")
        capsys.readouterr()
        sh.run_line_magic("trainjob_sessions", "")
        out = capsys.readouterr().out
        assert "qa" in out and "qb" in out and out.count("Queued") >= 2, out
        sh.run_line_magic("trainjob_sessions", "--all")
        out = capsys.readouterr().out
        assert "qa" in out and "qb" in out, out

        with pytest.raises(TrainJobUsageError, match="qa is still waiting in its queue"):
            sh.run_cell_magic("trainjob", "a", "echo too early")
        sh.run_line_magic("trainjob_status", "a")
        assert "Queued" in capsys.readouterr().out

        sh.run_line_magic("trainjob_close", "qa")  # by TrainJob name: closes only that one
        out = capsys.readouterr().out
        assert "Closed session 'a' (TrainJob qa deleted)." in out
        assert "qa" not in _names(kc) and "qb" in _names(kc)

        # --attach NAME waits again; once admitted it is the session 'b'
        kcluster.kueue.set_quota({"cpu": "1"})
        sh.run_line_magic("trainjob_connect", "--attach qb --timeout 30")
        sh.run_cell_magic("trainjob", "b", "echo attached")
        assert "attached" in capsys.readouterr().out

        kcluster.kueue.set_quota({"cpu": "0"})
        with pytest.raises(TrainJobMagicError, match="still queued"):
            sh.run_line_magic("trainjob_connect", f"{CONNECT} --name qc --as c")
        sh.run_line_magic("trainjob_close", "--all")
        out = capsys.readouterr().out
        assert "TrainJob qb deleted" in out and "TrainJob qc deleted" in out, out
    assert not _names(kc) & {"qa", "qb", "qc"}


def test_kernel_exit_deletes_the_queued_trainjob(kc: str) -> None:
    with Kernel() as k:
        _reply, out = k.run_text(load_magics_code(kc))
        _reply, out = k.run_text(f"%trainjob_connect {CONNECT} --name qexit")
        assert "%trainjob_close qexit" in out, out
        assert "qexit" in _names(kc)
    wait_until(lambda: "qexit" not in _names(kc), timeout=10)


def test_admitted_after_the_kernel_died_ends_through_the_idle_watchdog(
    kc: str, kcluster: LocalCluster
) -> None:
    idle = 4
    with Kernel() as k:
        k.run_text(load_magics_code(kc, idle_timeout=idle))
        _reply, out = k.run_text(f"%trainjob_connect {CONNECT} --name qdead")
        assert "still queued" in out, out
        os.kill(k.pid(), signal.SIGKILL)
        wait_until(lambda: not k.km.is_alive(), timeout=10)
    assert "qdead" in _names(kc)  # no kernel left to delete it
    kcluster.kueue.set_quota({"cpu": "1"})  # admitted long after its kernel is gone
    wait_until(lambda: _phases(kc, "qdead") == ["Running"], timeout=30)
    started = time.monotonic()
    wait_until(lambda: complete(get_trainjob(kc, "qdead")), timeout=idle + 20)
    took = time.monotonic() - started
    assert not [p for p in _phases(kc, "qdead") if p in ("Running", "Pending")]
    # idle_timeout + the watchdog's check interval (1 s) + pod termination and status updates
    assert took <= idle + 1 + 3, took


def _phases(kc: str, name: str) -> list[str]:
    return [p.status.phase for p in jobset_pods(kc, name)]


def complete(job: dict | None) -> bool:
    conds = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conds)
