"""Kueue as it really behaves (issue "Real clusters", A): a defaulted LocalQueue, the versions
a release serves, MultiKueue, an unknown priority class, and a visibility 404 for a new queue.

Each test failed on the engine before these fixes: the engine showed no queue state for a
defaulted queue, hard-coded v1beta2, waited for MultiKueue pods and for a Workload that never
comes, and switched positions off after one 404.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from tests.helpers.kube import delete_all_trainjobs, trainjob_names
from trainjob_magics import connect
from trainjob_magics.engine import QueueUnavailableError
from trainjob_magics.engine.kube import kubeconfig
from trainjob_magics.engine.kueue.discovery import kueue_api
from trainjob_magics.localcluster import LocalCluster
from trainjob_magics.localcluster.kueue import KueueConfig

pytestmark = pytest.mark.timeout(120)
RUNTIME = "torch-distributed"


def _cluster(tmp_path, **cfg) -> LocalCluster:
    kueue = KueueConfig(quota={"cpu": "2", "memory": "8Gi"}, **cfg)
    trainer = "2.1" if kueue.version == "0.14" else "2.3"  # what each Kueue drives
    return LocalCluster(
        root_dir=tmp_path, kueue=kueue, trainer_version=trainer, bookmark_interval=0.5
    )


def _custom(kc: str) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(config.new_client_from_config(config_file=kc))


@pytest.fixture
def main_cluster(tmp_path) -> Iterator[LocalCluster]:
    with _cluster(tmp_path) as c:
        yield c
        delete_all_trainjobs(c.kubeconfig_path)


def test_a_defaulted_queue_is_followed_and_gets_the_max_runtime(main_cluster) -> None:
    kc = str(main_cluster.kubeconfig_path)
    _custom(kc).create_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "default",
        "localqueues",
        {"metadata": {"name": "default"}, "spec": {"clusterQueue": "cluster-queue"}},
    )
    seen = []
    session = connect(
        RUNTIME, cpu="1", config_file=kc, timeout=60, max_runtime="2h", on_status=seen.append
    )
    try:
        assert session.queue == "default"
        assert any(s.queue is not None for s in seen), "the queue state was shown while waiting"
        assert session.status().queue.state == "Admitted"
        job = _custom(kc).get_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", session.name
        )
        labels = job["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/queue-name"] == "default"
        assert labels["kueue.x-k8s.io/max-exec-time-seconds"] == "7200"
        assert "activeDeadlineSeconds" not in job["spec"]
    finally:
        session.close(timeout=30)


@pytest.mark.parametrize(("version", "served"), [("0.14", "v1beta1"), ("main", "v1beta2")])
def test_the_engine_speaks_the_versions_the_cluster_serves(tmp_path, version, served) -> None:
    with _cluster(tmp_path, version=version) as c:
        api, _ns = kubeconfig.load(str(c.kubeconfig_path), None)
        try:
            found = kueue_api(api)
            assert found.version == served
            assert found.visibility[0] == served
        finally:
            api.close()
        session = connect(
            RUNTIME, cpu="1", queue="user-queue", config_file=str(c.kubeconfig_path), timeout=60
        )
        try:
            st = session.status()
            assert st.queue is not None and st.queue.state == "Admitted", st.queue
            assert session.execute("echo queued-ok").stdout == "queued-ok\n"
        finally:
            session.close(timeout=30)
            delete_all_trainjobs(c.kubeconfig_path)


def test_multikueue_is_refused_at_once_and_the_job_deleted(main_cluster) -> None:
    kc = str(main_cluster.kubeconfig_path)
    api = _custom(kc)
    api.create_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "admissionchecks",
        {
            "metadata": {"name": "sample-multikueue"},
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "MultiKueueConfig",
                    "name": "multikueue-test",
                },
            },
        },
    )
    cq = main_cluster.kueue.cluster_queue_body("multi-cq", {"cpu": "4"})
    cq["spec"]["admissionChecks"] = ["sample-multikueue"]
    api.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cq)
    api.create_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "default",
        "localqueues",
        {"metadata": {"name": "multi"}, "spec": {"clusterQueue": "multi-cq"}},
    )
    t0 = time.monotonic()
    with pytest.raises(QueueUnavailableError) as info:
        connect(RUNTIME, cpu="1", queue="multi", name="mk-job", config_file=kc, timeout=60)
    assert time.monotonic() - t0 < 10
    msg = str(info.value)
    assert "MultiKueue" in msg and "ClusterQueue multi-cq" in msg and "sample-multikueue" in msg
    assert "exec cannot reach" in msg and "deleted" in msg
    assert "mk-job" not in trainjob_names(kc, include_deleting=False)


def test_an_unknown_priority_class_fails_fast_with_kueues_words(main_cluster) -> None:
    kc = str(main_cluster.kubeconfig_path)
    t0 = time.monotonic()
    with pytest.raises(QueueUnavailableError) as info:
        connect(
            RUNTIME,
            cpu="1",
            queue="user-queue",
            priority_class="nope",
            name="pc-job",
            config_file=kc,
            timeout=60,
        )
    assert time.monotonic() - t0 < 15
    msg = str(info.value)
    assert (
        'WorkloadPriorityClass "nope" not found' in msg and "WorkloadPriorityClassNotFound" in msg
    )
    assert "the TrainJob was deleted" in msg
    assert "pc-job" not in trainjob_names(kc, include_deleting=False)
    assert main_cluster.kueue.workload_for("pc-job") is None  # Kueue made no Workload


def test_a_visibility_404_for_a_new_queue_is_transient(tmp_path) -> None:
    """Kueue answers 404 for a LocalQueue its queue manager has not seen yet; the engine must
    ask again instead of switching positions off for the whole session."""
    with _cluster(tmp_path, visibility_delay=3.0) as c:
        c.kueue.set_quota({"cpu": "1"})
        kc = str(c.kubeconfig_path)
        holder = connect(RUNTIME, cpu="1", queue="user-queue", config_file=kc, timeout=60)
        _custom(kc).create_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "default",
            "localqueues",
            {"metadata": {"name": "fresh"}, "spec": {"clusterQueue": "cluster-queue"}},
        )
        seen: list = []
        box: dict = {}
        waiter = threading.Thread(
            target=lambda: box.setdefault(
                "err",
                _try(
                    lambda: connect(
                        RUNTIME,
                        cpu="1",
                        queue="fresh",
                        config_file=kc,
                        timeout=8,
                        on_status=seen.append,
                    )
                ),
            )
        )
        waiter.start()
        waiter.join(30)
        holder.close(timeout=30)
        queued = [s.queue for s in seen if s.queue is not None and s.queue.state == "Queued"]
        assert queued, "the second session was queued"
        assert any(q.position_in_local_queue == 0 for q in queued), [
            (q.position_text(), q.message) for q in queued
        ]
        delete_all_trainjobs(c.kubeconfig_path)


def _try(fn):
    try:
        fn()
    except Exception as exc:
        return exc
    return None


@pytest.mark.parametrize(("version", "defaulted"), [("0.19", False), ("main", True)])
def test_the_default_priority_class_is_applied_on_main(tmp_path, version, defaulted) -> None:
    """WorkloadPriorityClassDefaulting: beta and on from Kueue 0.20 (pkg/features)."""
    with _cluster(tmp_path, version=version) as c:
        kc = str(c.kubeconfig_path)
        _custom(kc).create_cluster_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "workloadpriorityclasses",
            {"metadata": {"name": "default"}, "value": 100, "description": "the default"},
        )
        session = connect(RUNTIME, cpu="1", queue="user-queue", config_file=kc, timeout=60)
        try:
            job = _custom(kc).get_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", session.name
            )
            label = job["metadata"]["labels"].get("kueue.x-k8s.io/priority-class")
            assert (label == "default") is defaulted
            wl = c.kueue.workload_for(session.name)
            assert wl["spec"]["priority"] == (100 if defaulted else 0)
        finally:
            session.close(timeout=30)
            delete_all_trainjobs(c.kubeconfig_path)


def test_kueue_014_with_trainer_21_runs_a_queued_session_end_to_end(tmp_path) -> None:
    """The acceptance pair: Kueue 0.14 (v0.14.8: v1beta1 only, podTemplateOverrides with the
    override-idx annotation, #7755) over Trainer 2.1, the pair v0.14.8's go.mod names."""
    kueue = KueueConfig(quota={"cpu": "2", "memory": "8Gi"}, version="0.14")
    with LocalCluster(
        root_dir=tmp_path, kueue=kueue, trainer_version="2.1", bookmark_interval=0.5
    ) as c:
        assert c.version_warnings == []
        kc = str(c.kubeconfig_path)
        seen: list = []
        session = connect(
            RUNTIME, cpu="1", queue="user-queue", config_file=kc, timeout=60, on_status=seen.append
        )
        try:
            assert any(s.queue is not None for s in seen)
            assert session.status().queue.state == "Admitted"
            assert session.execute("echo from-0.14").stdout == "from-0.14\n"
            wl = c.kueue.workload_for(session.name)
            assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta1"
            job = _custom(kc).get_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", session.name
            )
            [ours] = job["spec"]["podTemplateOverrides"]
            assert ours["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "node"
            assert job["metadata"]["annotations"]["kueue.x-k8s.io/trainjob-override-idx"] == "0"
        finally:
            session.close(timeout=30)
            delete_all_trainjobs(c.kubeconfig_path)


def test_an_impossible_version_pair_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"Kueue main cannot drive Trainer 2\.1"):
        LocalCluster(root_dir=tmp_path, kueue_version="main", trainer_version="2.1")
