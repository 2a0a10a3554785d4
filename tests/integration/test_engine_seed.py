"""The seed PR's checks (its 11 unit-level items and its end-to-end list) against the local
cluster, over real HTTPS and WebSocket. Nothing is mocked."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.helpers.kube import GROUP, VERSION
from tests.helpers.kube import list_jobset_pods as job_pods
from tests.helpers.kube import read_trainjob as trainjob
from tests.helpers.polling import wait_until
from trainjob_magics import ExecResult, JobStatus, TrainJobSession, attach, connect
from trainjob_magics.engine import errors as E
from trainjob_magics.engine.trainjob.body import KEEP_ALIVE_COMMAND
from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

NO_LABEL_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: mpi-no-ancestor-label
spec:
  mlPolicy:
    numNodes: 1
    mpi: {numProcPerNode: 1, mpiImplementation: OpenMPI, runLauncherAsNode: true}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            spec:
              template:
                spec:
                  containers:
                    - {name: node, image: local/mpi, command: [/usr/sbin/sshd, -De]}
        - name: launcher
          dependsOn: [{name: node, status: Ready}]
          template:
            spec:
              template:
                spec:
                  containers:
                    - {name: node, image: local/mpi}
"""


def kc(cluster: LocalCluster) -> str:
    return str(cluster.kubeconfig_path)


@pytest.fixture
def api(cluster: LocalCluster) -> Iterator[k8s.ApiClient]:
    """An independent stock-client peer to inspect the cluster."""
    client = k8s_config.new_client_from_config(config_file=kc(cluster))
    yield client
    client.close()


def trainjob_names(api: k8s.ApiClient, ns: str = "default") -> set[str]:
    items = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, ns, "trainjobs"
    )["items"]
    return {i["metadata"]["name"] for i in items}


@pytest.fixture
def sessions() -> Iterator[list[TrainJobSession]]:
    """Sessions to close after the test whatever happens."""
    opened: list[TrainJobSession] = []
    yield opened
    for s in opened:
        s.close(timeout=30)


# -- 1, 2: the keep-alive command ------------------------------------------------------------


def test_connect_injects_keep_alive_command(cluster, api, unique_name, sessions) -> None:
    name = unique_name("ka")
    s = connect("torch-distributed", name=name, config_file=kc(cluster), timeout=30)
    sessions.append(s)
    job = trainjob(api, name)
    assert job is not None
    assert job["spec"]["trainer"]["command"] == KEEP_ALIVE_COMMAND  # the idle watchdog
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "trainjob-magics"
    assert job["metadata"]["labels"]["trainjob-magics/session"] == "true"
    assert job["metadata"]["annotations"]["trainjob-magics/owner-pid"]


def test_connect_keeps_the_callers_command(cluster, api, unique_name, sessions) -> None:
    name = unique_name("cmd")
    command = ["sh", "-c", "echo started > marker; exec sleep 1000"]
    s = connect("torch-distributed", name=name, command=command, config_file=kc(cluster))
    sessions.append(s)
    assert trainjob(api, name)["spec"]["trainer"]["command"] == command
    assert s.execute("cat marker").stdout == "started\n"


# -- 3: bad input is rejected before anything is sent ---------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "Bad_Name"}, "DNS-1035"),
        ({"num_nodes": 0}, "num_nodes"),
        ({"memory": "16GB"}, "quantity"),
        ({"gpu": "half"}, "gpu"),
        ({"env": {"1X": "v"}}, "env name"),
        ({"command": []}, "empty"),
    ],
)
def test_bad_input_sends_nothing(cluster, api, kwargs, match) -> None:
    before = trainjob_names(api)
    count = cluster.faults.request_count
    with pytest.raises(E.InvalidInputError, match=match):
        connect("torch-distributed", config_file=kc(cluster), **kwargs)
    assert cluster.faults.request_count == count
    assert trainjob_names(api) == before


def test_unknown_runtime_lists_available_ones(cluster, api) -> None:
    before = trainjob_names(api)
    with pytest.raises(E.InvalidInputError) as info:
        connect("no-such-runtime", config_file=kc(cluster))
    text = str(info.value)
    assert "unknown runtime 'no-such-runtime'" in text
    for known in ("torch-distributed", "deepspeed-distributed", "mpi-interactive"):
        assert known in text
    assert trainjob_names(api) == before


# -- 4: wait for the trainer pod, never the MPI node pods -----------------------------------


def test_mpi_connect_waits_for_the_launcher(cluster, unique_name, sessions) -> None:
    name = unique_name("mpi")
    # Nodes run long before the launcher does, so a node pod would be an easy wrong answer.
    cluster.faults.delay_pods(rf"^{name}-launcher-", 0.6)
    seen: list[JobStatus] = []
    s = connect(
        "mpi-interactive",
        name=name,
        num_nodes=4,
        config_file=kc(cluster),
        on_status=seen.append,
    )
    sessions.append(s)
    assert s.pod.startswith(f"{name}-launcher-0-0")
    # Node pods were Running while we kept waiting.
    assert any(
        st.state == "Pending" and sum(p.phase == "Running" for p in st.pods) == 3 for st in seen
    )
    assert all(st.trainer_pod is None or "-launcher-" in st.trainer_pod for st in seen)
    assert seen[-1].state == "Running" and seen[-1].trainer_pod == s.pod
    roles = sorted(p.role for p in seen[-1].pods)
    assert roles == ["launcher", "node", "node", "node"]
    assert s.execute("hostname").stdout.strip() == f"{name}-launcher-0-0"


# -- 5: timeout, and a pod that already finished ---------------------------------------------


def test_connect_timeout_leaves_the_job_and_says_how_to_delete(cluster, api, unique_name) -> None:
    name = unique_name("to")
    cluster.faults.hold_pods(rf"^{name}-")
    started = time.monotonic()
    with pytest.raises(E.ConnectTimeoutError) as info:
        connect("torch-distributed", name=name, config_file=kc(cluster), timeout=1.0)
    elapsed = time.monotonic() - started
    assert isinstance(info.value, TimeoutError)
    assert 0.9 <= elapsed < 5.0
    text = str(info.value)
    assert f"kubectl delete trainjob {name} -n default" in text and "still exists" in text
    assert "ImagePullBackOff" in text
    assert trainjob(api, name) is not None
    # The job is still usable once the pod starts: attach to it, then clean up.
    cluster.faults.release_pods()
    s = attach(name, config_file=kc(cluster), timeout=30)
    assert s.execute("true").ok
    s.close()


def test_attach_fails_when_the_trainer_pod_already_finished(cluster, api, unique_name) -> None:
    name = unique_name("fin")
    s = connect("torch-distributed", name=name, command="sleep 0.2", config_file=kc(cluster))
    wait_until(lambda: [p for p in job_pods(api, name) if p.status.phase == "Succeeded"])
    with pytest.raises(E.PodNotRunningError) as info:
        attach(name, config_file=kc(cluster), timeout=10)
    assert isinstance(info.value, RuntimeError)
    assert "finished (Succeeded)" in str(info.value)
    assert f"kubectl delete trainjob {name}" in str(info.value)
    with pytest.raises(E.PodNotRunningError, match="Succeeded"):
        s.execute("true")
    s.close(timeout=30)


def test_connect_fails_when_the_trainer_pod_fails_before_running(cluster, api, unique_name) -> None:
    """The pod is held Pending, then fails: connect() must raise, not hang."""
    import threading

    name = unique_name("bad")
    cluster.faults.hold_pods(rf"^{name}-")
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            connect("torch-distributed", name=name, config_file=kc(cluster), timeout=30)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    pod = wait_until(lambda: job_pods(api, name))[0]
    cluster.faults.fail_pod("default", pod.metadata.name, exit_code=2, reason="Error")
    thread.join(20)
    assert not thread.is_alive()
    # the pod's failure or the TrainJob's (JobSet failed) may be seen first: both name the pod
    assert len(outcome) == 1 and isinstance(outcome[0], E.PodNotRunningError)
    assert isinstance(outcome[0], RuntimeError)
    assert f"{pod.metadata.name} " in str(outcome[0])
    assert "finished (Failed) with exit code 2 (Error)" in str(outcome[0])
    TrainJobSession(name, "default", "torch-distributed", _api(cluster), "x").close(timeout=30)


def _api(cluster: LocalCluster) -> k8s.ApiClient:
    return k8s_config.new_client_from_config(config_file=kc(cluster))


# -- 6: label layouts and fallbacks ----------------------------------------------------------


def test_fallback_to_launcher_without_ancestor_label(cluster, unique_name, sessions) -> None:
    cluster.load_runtime_yaml(NO_LABEL_RUNTIME)
    name = unique_name("nl")
    cluster.faults.delay_pods(rf"^{name}-launcher-", 0.3)
    s = connect("mpi-no-ancestor-label", name=name, num_nodes=3, config_file=kc(cluster))
    sessions.append(s)
    assert s.pod.startswith(f"{name}-launcher-0-0")


def test_ancestor_label_on_pods_layout(local_cluster_ancestor_on_pods, unique_name) -> None:
    cluster = local_cluster_ancestor_on_pods
    name = unique_name("anc")
    with connect("mpi-interactive", name=name, num_nodes=3, config_file=kc(cluster)) as s:
        assert s.pod.startswith(f"{name}-launcher-0-0")
        pod = k8s.CoreV1Api(_api(cluster)).read_namespaced_pod(s.pod, "default")
        assert pod.metadata.labels["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
        hosts = s.execute(["mpirun", "hostname"]).stdout.split()
        # ranks run concurrently, so (as with real MPI) their lines come in any order
        assert sorted(hosts) == sorted(
            [f"{name}-launcher-0-0", f"{name}-node-0-0", f"{name}-node-0-1"]
        )


def test_torch_uses_completion_index_zero(cluster, unique_name, sessions) -> None:
    name = unique_name("torch")
    cluster.faults.delay_pods(rf"^{name}-node-0-0-", 0.4)  # index 0 is the last to run
    s = connect("torch-distributed", name=name, num_nodes=3, config_file=kc(cluster))
    sessions.append(s)
    assert s.pod.startswith(f"{name}-node-0-0-")
    assert s.execute("hostname").stdout.strip() == f"{name}-node-0-0"


# -- 7, 8: execute --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mpi_session(local_cluster: LocalCluster) -> Iterator[TrainJobSession]:
    s = connect("mpi-interactive", num_nodes=2, config_file=kc(local_cluster))
    yield s
    s.close(timeout=30)


def test_execute_list_and_string(mpi_session: TrainJobSession) -> None:
    host = f"{mpi_session.name}-launcher-0-0"
    assert mpi_session.execute(["hostname"]).stdout == f"{host}\n"
    assert mpi_session.execute("echo hello from $(hostname)").stdout == f"hello from {host}\n"
    # A list is argv: no shell, so $(...) stays literal.
    assert mpi_session.execute(["echo", "$(hostname)"]).stdout == "$(hostname)\n"
    res = mpi_session.execute("echo $0", container="node")
    assert res.stdout == "sh\n" and res.pod == mpi_session.pod


def test_execute_output_and_exit_codes(mpi_session: TrainJobSession) -> None:
    res = mpi_session.execute("echo out; echo err >&2; exit 3")
    assert isinstance(res, ExecResult)
    assert (res.stdout, res.stderr, res.returncode, res.ok) == ("out\n", "err\n", 3, False)
    assert res.duration > 0
    assert res.stdout_bytes == b"out\n" and res.stderr_bytes == b"err\n"
    ok = mpi_session.execute("true")
    assert ok.returncode == 0 and ok.ok


def test_execute_rejects_empty_commands(mpi_session: TrainJobSession) -> None:
    for bad in ("", "  \n", [], None):
        with pytest.raises(E.InvalidInputError, match="empty"):
            mpi_session.execute(bad)  # type: ignore[arg-type]


def test_execute_unknown_container(mpi_session: TrainJobSession) -> None:
    with pytest.raises(E.TrainJobError, match="nope"):
        mpi_session.execute("true", container="nope")


def test_execute_missing_executable_keeps_message(mpi_session: TrainJobSession) -> None:
    with pytest.raises(E.ApiServerError) as info:
        mpi_session.execute(["/no/such/binary"])
    assert "/no/such/binary" in str(info.value)
    assert info.value.partial is not None and info.value.partial.returncode is None


def test_execute_denied_names_pods_exec(cluster, mpi_session: TrainJobSession) -> None:
    cluster.faults.deny(cluster.token, "*", "pods/exec")
    with pytest.raises(E.PermissionDeniedError) as info:
        mpi_session.execute("true")
    text = str(info.value)
    assert "pods/exec" in text and "get and create" in text and "docs/rbac.md" in text
    assert cluster.token not in text
    cluster.faults.clear()
    assert mpi_session.execute("true").ok


def test_execute_after_pod_failed(cluster, unique_name) -> None:
    name = unique_name("pf")
    with connect("torch-distributed", name=name, config_file=kc(cluster)) as s:
        cluster.faults.fail_pod("default", s.pod, exit_code=137, reason="OOMKilled")
        with pytest.raises(E.PodNotRunningError) as info:
            s.execute("true")
        assert isinstance(info.value, RuntimeError)
        assert "Failed" in str(info.value)
        assert s.status().pods[0].waiting_reason == "OOMKilled"


def test_execute_follows_a_recreated_trainer_pod(cluster, api, unique_name) -> None:
    name = unique_name("re")
    with connect("torch-distributed", name=name, config_file=kc(cluster)) as s:
        old = s.pod
        k8s.CoreV1Api(api).delete_namespaced_pod(old, "default")

        def new_running() -> bool:
            return any(
                p.metadata.name != old and p.status.phase == "Running" for p in job_pods(api, name)
            )

        wait_until(new_running)  # the Job recreates the deleted pod
        res = s.execute("hostname")
        assert res.ok and res.pod != old and s.pod == res.pod
        assert res.stdout.strip() == f"{name}-node-0-0"


def test_execute_when_the_job_was_deleted_by_someone_else(cluster, api, unique_name) -> None:
    name = unique_name("gone")
    s = connect("torch-distributed", name=name, config_file=kc(cluster))
    k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", name
    )
    wait_until(lambda: not job_pods(api, name))
    with pytest.raises(E.PodNotRunningError, match="no longer exists"):
        s.execute("true")
    assert s.status().state == "Deleted"
    s.close()  # already gone: no error


# -- 9, 10: close -------------------------------------------------------------------------


def test_close_deletes_job_and_pods_and_is_idempotent(cluster, api, unique_name) -> None:
    name = unique_name("cl")
    s = connect("mpi-interactive", name=name, num_nodes=2, config_file=kc(cluster))
    assert len(job_pods(api, name)) == 2
    s.close()
    assert trainjob(api, name) is None
    assert job_pods(api, name) == []
    assert s.closed
    s.close()
    s.close(timeout=1)
    with pytest.raises(E.SessionClosedError) as info:
        s.execute("true")
    assert isinstance(info.value, RuntimeError) and name in str(info.value)


def test_context_manager_closes(cluster, api, unique_name) -> None:
    name = unique_name("cm")
    with connect("torch-distributed", name=name, config_file=kc(cluster)) as s:
        assert s.execute("true").ok
    assert trainjob(api, name) is None and job_pods(api, name) == []
    with pytest.raises(RuntimeError):
        s.execute("true")


def test_close_timeout_logs_a_warning(cluster, unique_name, caplog) -> None:
    name = unique_name("slow")
    s = connect("torch-distributed", name=name, config_file=kc(cluster))
    s.close(timeout=0.001)
    assert s.closed
    assert any("being deleted" in r.getMessage() for r in caplog.records)


# -- 11: arguments reach the TrainJob -------------------------------------------------------


def test_arguments_reach_the_trainjob_and_pods(cluster, api, unique_name, sessions) -> None:
    name = unique_name("args")
    s = connect(
        "torch-distributed",
        name=name,
        image="local/custom:1",
        num_nodes=2,
        cpu="500m",
        memory="1Gi",
        gpu=1,
        env={"GREETING": "hi there"},
        labels={"team": "ml"},
        config_file=kc(cluster),
    )
    sessions.append(s)
    job = trainjob(api, name)
    trainer = job["spec"]["trainer"]
    assert trainer["image"] == "local/custom:1" and trainer["numNodes"] == 2
    assert trainer["resourcesPerNode"]["limits"] == {
        "cpu": "500m",
        "memory": "1Gi",
        "nvidia.com/gpu": "1",
    }
    assert job["metadata"]["labels"]["team"] == "ml"
    assert s.execute("echo $GREETING").stdout == "hi there\n"
    assert len(job_pods(api, name)) == 2
    st = s.status()
    assert st.name == name and st.runtime == "torch-distributed" and st.state == "Running"


def test_attach_unknown_job(cluster) -> None:
    with pytest.raises(E.NotFoundError, match="kubectl get trainjobs"):
        attach("does-not-exist", config_file=kc(cluster), timeout=5)


def test_execute_from_another_thread(mpi_session: TrainJobSession) -> None:
    import threading

    results: list[ExecResult] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(mpi_session.execute(f"echo {i}")))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r.stdout for r in results) == [f"{i}\n" for i in range(4)]


# -- the end-to-end list of the seed PR ----------------------------------------------------


def test_seed_end_to_end(cluster, api, unique_name) -> None:
    name = unique_name("e2e")
    started = time.monotonic()
    s = connect("mpi-interactive", name=name, num_nodes=4, config_file=kc(cluster))
    assert time.monotonic() - started < 20
    steps = sorted((p.role, p.phase) for p in s.status().pods)
    assert steps == [("launcher", "Running")] + [("node", "Running")] * 3

    res = s.execute(["mpirun", "hostname"])
    assert res.returncode == 0
    assert sorted(res.stdout.split()) == [
        f"{name}-launcher-0-0",
        f"{name}-node-0-0",
        f"{name}-node-0-1",
        f"{name}-node-0-2",
    ]
    assert s.execute("echo hello from $(hostname)").stdout == f"hello from {name}-launcher-0-0\n"
    assert s.execute("exit 3").returncode == 3
    err = s.execute("echo oops >&2; exit 1")
    assert (err.stderr, err.returncode) == ("oops\n", 1)
    for _ in range(3):
        assert s.execute("hostname").stdout == f"{name}-launcher-0-0\n"

    s.close()
    assert trainjob(api, name) is None and job_pods(api, name) == []
    with pytest.raises(RuntimeError, match="closed"):
        s.execute("true")

    with connect("mpi-interactive", name=name, num_nodes=4, config_file=kc(cluster)) as s2:
        res = s2.execute("echo second session on $(hostname)")
        assert res.stdout == f"second session on {name}-launcher-0-0\n"
    assert trainjob(api, name) is None
