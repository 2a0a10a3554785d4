"""The server extension's GPU endpoint (``GET .../sessions/NS/NAME/gpus``) in a real JupyterLab
server on the local cluster, with the STAND-IN ``nvidia-smi`` (tests/helpers/standin_nvidia_smi:
not NVIDIA's tool, made-up values; no GPU here) on the pods' PATH: the values reach the API, a
pod where a cell runs is not sampled (the pod's own check: the server knows no kernel's
commands), at most one exec per pod per 10 s however many requests, and no answer without
Jupyter's authentication."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import JupyterLab, start_jupyterlab
from tests.helpers.gpu_standin import LOG_ENV, STANDIN_GPU_NAME, calls, put_standin_on_path
from tests.helpers.polling import wait_until
from trainjob_magics import TrainJobSession, connect
from trainjob_magics.localcluster import LocalCluster

API = "/trainjob-magics/api"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Callable[[Path], JupyterLab]]:
    started: list[JupyterLab] = []

    def start(kubeconfig: Path) -> JupyterLab:
        server = start_jupyterlab(tmp_path, tmp_path / "lab", {"KUBECONFIG": str(kubeconfig)})
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _pid_files(session: TrainJobSession, pod: str) -> str:
    result = session.execute(
        ["env", "sh", "-c", 'ls "${TMPDIR:-/tmp}/trainjob-magics" | grep "\\.pid$" || true'],
        pods=pod,
    )
    return "".join(r.stdout for r in result.values())


def test_gpus_api_with_the_standin(
    own_cluster: LocalCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lab: Callable[[Path], JupyterLab],
) -> None:
    put_standin_on_path(monkeypatch)
    log = tmp_path / "standin-calls"
    kubeconfig = own_cluster.write_kubeconfig(tmp_path / "kubeconfig")
    shape: dict[str, Any] = {"gpu": 1, "env": {LOG_ENV: str(log)}, "timeout": 120}
    idle = connect("torch-distributed", num_nodes=2, config_file=str(kubeconfig), **shape)
    busy = connect("torch-distributed", num_nodes=1, config_file=str(kubeconfig), **shape)
    try:
        cell = busy.start("sleep 120")  # a cell runs in busy's only pod
        wait_until(lambda: ".pid" in _pid_files(busy, busy.pod))
        server = lab(kubeconfig)
        path = f"{API}/sessions/{idle.namespace}/{idle.name}/gpus"
        answer = server.api_until(path, lambda r: len(r["pods"]) == 2)
        pods = [r.name for r in idle.pods("all")]
        assert [p["pod"] for p in answer["pods"]] == pods
        assert answer["sampleEvery"] == 10.0
        for row in answer["pods"]:
            assert row["state"] == "ok", row
            assert row["sampledAt"]
            assert row["gpus"] == [
                {
                    "index": 0,
                    "name": STANDIN_GPU_NAME,
                    "utilization": 37.0,
                    "memoryUsedMiB": 1234.0,
                    "memoryTotalMiB": 81920.0,
                },
                {
                    "index": 1,
                    "name": STANDIN_GPU_NAME,
                    "utilization": None,
                    "memoryUsedMiB": 512.0,
                    "memoryTotalMiB": 81920.0,
                },
            ]
        assert own_cluster.token not in json.dumps(answer)
        # every open page asking, many times within 10 s: one exec per pod in all
        for _ in range(10):
            assert server.api(path)["pods"] == answer["pods"]
        assert sorted(calls(log)) == sorted(pods)

        # the pod where the cell runs: not sampled, nvidia-smi never ran there
        busy_path = f"{API}/sessions/{busy.namespace}/{busy.name}/gpus"
        held = server.api_until(busy_path, lambda r: len(r["pods"]) == 1)
        assert held["pods"][0]["pod"] == busy.pod and held["pods"][0]["state"] == "busy"
        assert held["pods"][0]["gpus"] == []
        assert busy.pod not in calls(log)

        # a job of another uid, or none: nothing sampled, one problem line
        other = server.api(f"{path}?uid=not-its-uid")
        assert other["pods"] == [] and other["problem"]
        # no answer without Jupyter's authentication
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(f"{server.url}{path}", timeout=10)
        assert anonymous.value.code == 403
        cell.interrupt()
    finally:
        for s in (idle, busy):
            s.close(timeout=30)
