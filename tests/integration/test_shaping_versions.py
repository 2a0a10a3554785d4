"""Pod shaping on the local cluster as each Trainer release (2.0 podSpecOverrides, 2.1
podTemplateOverrides, 2.2/2.3 runtimePatches): the TrainJob carries the release's field, the
trainer pod gets the mounts, /dev/shm of the size asked, the labels and tolerations, and the
status says so. A field the server does not know (strict field validation) is retried with the
older releases' fields, so a wrongly published or unreadable schema still works."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config

from trainjob_magics import connect
from trainjob_magics.engine.trainjob import served
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)
FIELD = {
    "2.0": "podSpecOverrides",
    "2.1": "podTemplateOverrides",
    "2.2": "runtimePatches",
    "2.3": "runtimePatches",
}


@pytest.fixture(params=sorted(FIELD))
def versioned(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[str, LocalCluster]]:
    served.reset()  # each cluster is a new server
    with LocalCluster(trainer_version=request.param, root_dir=tmp_path / "c") as cluster:
        yield request.param, cluster
    served.reset()


def test_each_release_gets_its_field_and_the_pods_get_the_shape(
    versioned: tuple[str, LocalCluster],
) -> None:
    version, cluster = versioned
    kubeconfig = str(cluster.kubeconfig_path)
    session = connect(
        "torch-distributed",
        config_file=kubeconfig,
        timeout=60,
        volumes=["emptydir:/scratch:64Mi"],
        shm_size="32Mi",
        labels={"team": "vision"},
        tolerations=["gpu=true:NoSchedule"],
    )
    try:
        api = config.new_client_from_config(kubeconfig)
        tj = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", session.name
        )
        assert FIELD[version] in tj["spec"], sorted(tj["spec"])
        assert tj["metadata"]["labels"]["team"] == "vision"
        result = session.execute("ls -d /scratch && df -k /dev/shm | tail -1")
        assert result.ok, result.stderr
        assert result.stdout.splitlines()[-1].split()[1] == str(32 * 1024)
        pod = client.CoreV1Api(api).read_namespaced_pod(session.pod, "default")
        assert ("gpu", "true", "NoSchedule") in {
            (t.key, t.value, t.effect) for t in pod.spec.tolerations or []
        }
        if version != "2.0":  # 2.0's podSpecOverrides has no pod metadata
            assert pod.metadata.labels["team"] == "vision"
        shape = session.status().shape
        assert shape is not None
        assert (
            "emptydir 64Mi -> /scratch" in shape.volumes and "shm 32Mi -> /dev/shm" in shape.volumes
        )
        assert "gpu=true:NoSchedule" in shape.tolerations
    finally:
        session.close(timeout=60)
