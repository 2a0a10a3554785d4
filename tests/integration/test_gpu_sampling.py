"""GPU utilisation end to end on the local cluster, with the STAND-IN ``nvidia-smi``
(tests/helpers/standin_nvidia_smi: not NVIDIA's tool, made-up values; no GPU here) on the
pods' PATH: ``session.gpus()`` reads each pod's GPUs, runs at most one exec per pod per 10 s
however often it is asked, never samples a pod where one of our commands runs (this session's,
or another kernel's found by the pod's own check), and says "no nvidia-smi" cleanly."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

import pytest

from tests.helpers.gpu_standin import LOG_ENV, STANDIN_GPU_NAME, calls, put_standin_on_path
from tests.helpers.polling import wait_until
from trainjob_magics import TrainJobSession, attach, connect
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


def _pid_files(session: TrainJobSession, pod: str) -> str:
    """The command wrapper's pid files in ``pod`` (read by an unwrapped exec)."""
    result = session.execute(
        ["env", "sh", "-c", 'ls "${TMPDIR:-/tmp}/trainjob-magics" | grep "\\.pid$" || true'],
        pods=pod,
    )
    return "".join(r.stdout for r in result.values())


@pytest.fixture
def gpu_job(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Two node pods with one (made-up) GPU each and the stand-in on their PATH."""
    put_standin_on_path(monkeypatch)
    log = tmp_path / "standin-calls"
    session = connect(
        "torch-distributed",
        num_nodes=2,
        gpu=1,
        env={LOG_ENV: str(log)},
        config_file=str(cluster.kubeconfig_path),
        timeout=60,
    )
    try:
        yield session, log
    finally:
        session.close(timeout=30)


def test_values_come_back_at_most_one_exec_per_pod_per_10s(gpu_job) -> None:
    session, log = gpu_job
    pods = [r.name for r in session.pods("all")]
    answers = session.gpus()
    assert [a.pod for a in answers] == pods
    for answer in answers:
        assert answer.state == "ok", answer
        assert [g.text() for g in answer.gpus] == [
            "GPU 0: 37 % · 1234/81920 MiB",
            "GPU 1: n/a · 512/81920 MiB",
        ]
        assert answer.gpus[0].name == STANDIN_GPU_NAME and answer.sampled_at > 0
    assert sorted(calls(log)) == sorted(pods)
    # asked again and again, from many threads at once, within 10 s: the same answers
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(session.gpus())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(seen) == 8 and all(s == answers for s in seen)
    assert sorted(calls(log)) == sorted(pods)


def test_a_running_command_is_never_sampled(gpu_job, cluster: LocalCluster) -> None:
    session, log = gpu_job
    trainer, other = [r.name for r in session.pods("all")]
    # this session's own command in the trainer pod: no pod of the job is sampled
    run = session.start("sleep 60")
    wait_until(lambda: ".pid" in _pid_files(session, trainer))
    assert [(a.pod, a.state) for a in session.gpus()] == [(trainer, "busy"), (other, "busy")]
    assert calls(log) == []
    # another kernel's session knows nothing of that command: the pod's own check finds it
    elsewhere = attach(session.name, config_file=str(cluster.kubeconfig_path), timeout=60)
    try:
        assert [(a.pod, a.state) for a in elsewhere.gpus()] == [(trainer, "busy"), (other, "busy")]
        assert calls(log) == []
    finally:
        elsewhere.leave()
    run.interrupt()
    wait_until(lambda: ".pid" not in _pid_files(session, trainer))
    # a command in the other pod only: the trainer pod is sampled, that pod is not
    run = session.start("sleep 60", pods=other)
    wait_until(lambda: ".pid" in _pid_files(session, other))
    third = attach(session.name, config_file=str(cluster.kubeconfig_path), timeout=60)
    try:
        assert [(a.pod, a.state) for a in third.gpus()] == [(trainer, "ok"), (other, "busy")]
        assert calls(log) == [trainer]
    finally:
        third.leave()
        run.interrupt()


def test_no_nvidia_smi_is_said_once_and_cleanly(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    session = connect(
        "torch-distributed",
        num_nodes=1,
        gpu=1,
        config_file=str(cluster.kubeconfig_path),
        timeout=60,
    )
    try:
        if session.execute("command -v nvidia-smi || true").stdout.strip():
            pytest.skip("this machine has an nvidia-smi: the pods find it")
        with caplog.at_level(logging.INFO, logger="trainjob_magics"):
            answers = session.gpus()
        assert [(a.state, a.message) for a in answers] == [("absent", "no nvidia-smi in the pod")]
        assert [r for r in caplog.records if "nvidia" in r.getMessage().lower()] == []
        # a job that requests no GPU is not sampled at all
        plain = connect(
            "torch-distributed", num_nodes=1, config_file=str(cluster.kubeconfig_path), timeout=60
        )
        try:
            assert plain.gpus() == []
        finally:
            plain.close(timeout=30)
    finally:
        session.close(timeout=30)


def test_trainjob_status_shows_each_gpu(
    shell, cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    put_standin_on_path(monkeypatch)
    shell.run_line_magic("trainjob_connect", "torch-distributed --nodes 2 --gpu 1 --as g")
    capsys.readouterr()
    shell.run_line_magic("trainjob_status", "g")
    out = capsys.readouterr().out
    assert "GPUs (nvidia-smi; sampled at most every 10 s, never while a command runs):" in out
    lines = [x for x in out.splitlines() if "Stand-in GPU" in x]
    assert len(lines) == 4, out  # two pods, two GPUs each
    assert lines[0].endswith(f"GPU 0 {STANDIN_GPU_NAME}: 37 % · 1234/81920 MiB"), out
    assert lines[1].endswith(f"GPU 1 {STANDIN_GPU_NAME}: n/a · 512/81920 MiB"), out
    shell.run_line_magic("trainjob_close", "g")


def test_trainjob_status_says_nothing_of_gpus_without_nvidia_smi(
    shell, cluster: LocalCluster, capsys
) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an nvidia-smi: the pods find it")
    shell.run_line_magic("trainjob_connect", "torch-distributed --nodes 1 --gpu 1 --as n")
    capsys.readouterr()
    shell.run_line_magic("trainjob_status", "n")
    out = capsys.readouterr().out
    assert "holds 1 GPU" in out and "nvidia-smi" not in out, out
    shell.run_line_magic("trainjob_close", "n")
