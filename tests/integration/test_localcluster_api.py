"""The local cluster through the real kubernetes python client over HTTPS."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(60)

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"


# -- helpers ---------------------------------------------------------------------------------


class Kube:
    """The python client's APIs for one kubeconfig."""

    def __init__(self, kubeconfig: str) -> None:
        self.api = config.new_client_from_config(kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)

    def create_tj(self, body: dict[str, Any], ns: str = "default") -> dict[str, Any]:
        return self.co.create_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", body)

    def get_tj(self, name: str, ns: str = "default") -> dict[str, Any]:
        return self.co.get_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", name)

    def patch_tj(self, name: str, patch: Any, ns: str = "default") -> dict[str, Any]:
        ctype = "application/json-patch+json" if isinstance(patch, list) else None
        return self.co.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "trainjobs", name, patch, _content_type=ctype
        )

    def delete_tj(self, name: str, ns: str = "default") -> Any:
        return self.co.delete_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", name)

    def pods(self, job: str, ns: str = "default") -> list[Any]:
        return self.core.list_namespaced_pod(ns, label_selector=f"{JOBSET_LABEL}={job}").items

    def raw(
        self,
        method: str,
        path: str,
        query_params: list[tuple[str, str]] | None = None,
        header_params: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """A raw request with the client's own TLS settings and auth headers."""
        cfg = self.api.configuration
        headers = dict(header_params or {})
        for auth in cfg.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                headers[auth["key"]] = auth["value"]
        url = cfg.host + path
        if query_params:
            url += "?" + urlencode(query_params)
        resp = self.api.call_api(method, url, header_params=headers)
        return resp.status, dict(resp.headers), resp.read()


def status_of(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(0.05)


def trainjob(
    name: str,
    runtime: str = "torch-distributed",
    nodes: int | None = None,
    command: list[str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    trainer: dict[str, Any] = {}
    if nodes is not None:
        trainer["numNodes"] = nodes
    if command is not None:
        trainer["command"] = command
    trainer.update(spec.pop("trainer", {}))
    body_spec: dict[str, Any] = {"runtimeRef": {"name": runtime}, **spec}
    if trainer:
        body_spec["trainer"] = trainer
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": body_spec,
    }


def phase(pod: Any) -> str:
    return pod.status.phase


def running(kube: Kube, job: str, count: int) -> list[Any]:
    def check() -> list[Any] | None:
        pods = kube.pods(job)
        if len(pods) == count and all(
            phase(p) == "Running" and not p.metadata.deletion_timestamp for p in pods
        ):
            return pods
        return None

    return wait_for(check)


def condition(tj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next(
        (c for c in (tj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None
    )


@pytest.fixture
def kube(cluster: LocalCluster) -> Kube:
    return Kube(str(cluster.kubeconfig_path))


@pytest.fixture
def jobs(kube: Kube) -> Iterator[list[str]]:
    """Names appended here are deleted after the test."""
    names: list[str] = []
    yield names
    for n in names:
        with contextlib.suppress(ApiException):
            kube.delete_tj(n)


# -- server basics ---------------------------------------------------------------------------


def test_version_health_and_discovery(kube: Kube) -> None:
    version = client.VersionApi(kube.api).get_code()
    assert (version.major, version.minor) == ("1", "32")
    assert version.git_version.startswith("v1.32.")
    status, _, body = kube.raw("GET", "/healthz")
    assert (status, body) == (200, b"ok")
    groups = {g.name: g for g in client.ApisApi(kube.api).get_api_versions().groups}
    assert groups[GROUP].preferred_version.group_version == f"{GROUP}/{VERSION}"
    assert "jobset.x-k8s.io" in groups
    core = {r.name: r for r in kube.core.get_api_resources().resources}
    assert core["pods"].namespaced and "watch" in core["pods"].verbs
    assert "pods/exec" in core and not core["namespaces"].namespaced
    status, _, body = kube.raw("GET", f"/apis/{GROUP}/{VERSION}")
    resources = {r["name"]: r for r in json.loads(body)["resources"]}
    assert resources["trainjobs"]["kind"] == "TrainJob"
    assert "trainjobs/status" in resources
    assert resources["clustertrainingruntimes"]["namespaced"] is False


def test_wrong_token_is_401(cluster: LocalCluster, tmp_path: Any) -> None:
    path = cluster.write_kubeconfig(tmp_path / "kc", token="not-a-valid-token")
    bad = Kube(str(path))
    with pytest.raises(ApiException) as info:
        bad.core.list_namespaced_pod("default")
    assert info.value.status == 401
    assert status_of(info.value)["reason"] == "Unauthorized"
    assert "not-a-valid-token" not in info.value.body


def test_unknown_path_404_and_405(kube: Kube) -> None:
    status, _, body = kube.raw("GET", "/apis/nothing.example.com/v1/things")
    assert (status, body) == (404, b"404 page not found\n")  # plain text, as net/http NotFound
    status, _, body = kube.raw("GET", "/api/v1/things")
    assert status == 404 and json.loads(body)["reason"] == "NotFound"
    status, _, body = kube.raw("PUT", "/api/v1/namespaces/default/pods")
    assert status == 405 and json.loads(body)["reason"] == "MethodNotAllowed"


def test_namespaces(kube: Kube, unique_name: Callable[[str], str]) -> None:
    name = unique_name("ns")
    created = kube.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )
    assert created.status.phase == "Active"
    assert kube.core.read_namespace(name).metadata.uid == created.metadata.uid
    assert name in [n.metadata.name for n in kube.core.list_namespace().items]
    with pytest.raises(ApiException) as info:
        kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    assert info.value.status == 409
    assert status_of(info.value)["message"] == f'namespaces "{name}" already exists'
    with pytest.raises(ApiException) as info:
        kube.create_tj(trainjob("x"), ns=unique_name("missing"))
    assert info.value.status == 404
    assert status_of(info.value)["details"]["kind"] == "namespaces"


# -- TrainJob CRUD and errors ----------------------------------------------------------------


def test_trainjob_crud_and_status_bodies(
    kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    jobs.append(name)
    created = kube.create_tj(trainjob(name, nodes=1, command=["sleep", "30"]))
    meta = created["metadata"]
    assert meta["generation"] == 1 and meta["uid"] and int(meta["resourceVersion"]) > 0
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", meta["creationTimestamp"])

    with pytest.raises(ApiException) as info:
        kube.create_tj(trainjob(name))
    st = status_of(info.value)
    assert (info.value.status, st["reason"]) == (409, "AlreadyExists")
    assert st["message"] == f'trainjobs.trainer.kubeflow.org "{name}" already exists'

    missing = unique_name("t")
    with pytest.raises(ApiException) as info:
        kube.get_tj(missing)
    st = status_of(info.value)
    assert info.value.status == 404 and st["kind"] == "Status"
    assert st["message"] == f'trainjobs.trainer.kubeflow.org "{missing}" not found'
    assert st["details"] == {"name": missing, "group": GROUP, "kind": "trainjobs"}

    listed = kube.co.list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")
    assert name in [i["metadata"]["name"] for i in listed["items"]]

    patched = kube.patch_tj(name, {"metadata": {"labels": {"team": "a"}}})
    assert patched["metadata"]["labels"]["team"] == "a"
    assert int(patched["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    patched = kube.patch_tj(name, [{"op": "add", "path": "/metadata/labels/owner", "value": "b"}])
    assert patched["metadata"]["labels"] == {"team": "a", "owner": "b"}

    with pytest.raises(ApiException) as info:  # trainer is immutable
        kube.patch_tj(name, {"spec": {"trainer": {"numNodes": 3}}})
    assert info.value.status == 422
    assert status_of(info.value)["details"]["causes"][0]["field"] == "spec.trainer"

    # status subresource: main resource ignores status, /status only takes status
    kube.patch_tj(name, {"status": {"conditions": [{"type": "Bogus", "status": "True"}]}})
    assert condition(kube.get_tj(name), "Bogus") is None
    kube.co.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "trainjobs", name, {"status": {"custom": "x"}, "spec": {"x": 1}}
    )
    got = kube.get_tj(name)
    assert got["status"]["custom"] == "x" and "x" not in got["spec"]
    assert got["metadata"]["generation"] == 1

    deleted = kube.delete_tj(name)
    assert deleted["status"] == "Success" and deleted["details"]["name"] == name
    with pytest.raises(ApiException) as info:
        kube.get_tj(name)
    assert info.value.status == 404


def test_invalid_trainjob_is_422_with_causes(kube: Kube) -> None:
    with pytest.raises(ApiException) as info:
        kube.create_tj(trainjob("Bad_Name"))
    st = status_of(info.value)
    assert (info.value.status, st["reason"]) == (422, "Invalid")
    assert st["message"].startswith('TrainJob.trainer.kubeflow.org "Bad_Name" is invalid: ')
    assert st["details"]["kind"] == "TrainJob" and st["details"]["group"] == GROUP
    assert any(c["field"] == "metadata.name" for c in st["details"]["causes"])


def test_unknown_field_dropped_with_warning(
    kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    jobs.append(name)
    body = trainjob(name, nodes=1, suspend=True)
    body["spec"]["foo"] = "bar"
    data, status, headers = kube.co.create_namespaced_custom_object_with_http_info(
        GROUP, VERSION, "default", "trainjobs", body
    )
    assert status == 201 and "foo" not in data["spec"]
    assert headers["Warning"] == '299 - "unknown field \\"spec.foo\\""'


def test_missing_runtime_is_rejected_at_create(
    kube: Kube, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    with pytest.raises(ApiException) as info:
        kube.create_tj(trainjob(name, runtime="no-such-runtime"))
    st = status_of(info.value)
    assert info.value.status == 422
    assert '"no-such-runtime" not found' in st["message"]
    assert "ClusterTrainingRuntime" in st["message"]
    with pytest.raises(ApiException):
        kube.get_tj(name)


def test_runtimes_cluster_and_namespaced(
    cluster: LocalCluster, kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    names = {
        i["metadata"]["name"]
        for i in kube.co.list_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes")[
            "items"
        ]
    }
    assert {"torch-distributed", "deepspeed-distributed", "mpi-interactive"} <= names
    # Trainer fetches each kind by name only (clustertrainingruntime.go): a namespaced
    # TrainingRuntime does not stand in for the cluster runtime of the same name
    rt_name = unique_name("rt")
    base = kube.co.get_cluster_custom_object(
        GROUP, VERSION, "clustertrainingruntimes", "torch-distributed"
    )
    for kind, extra in (("ClusterTrainingRuntime", "cluster"), ("TrainingRuntime", "namespaced")):
        rt = json.loads(json.dumps(base))
        rt["kind"], rt["metadata"] = kind, {"name": rt_name, "labels": {"which": extra}}
        container = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"
        ]["spec"]["containers"][0]
        container["env"] = [{"name": "WHICH", "value": extra}]
        cluster.load_runtime_yaml(json.dumps(rt) + "\n")
    got = kube.co.get_namespaced_custom_object(
        GROUP, VERSION, "default", "trainingruntimes", rt_name
    )
    assert got["metadata"]["labels"]["which"] == "namespaced"
    for kind, which in (("ClusterTrainingRuntime", "cluster"), ("TrainingRuntime", "namespaced")):
        name = unique_name("t")
        jobs.append(name)
        body = trainjob(name, runtime=rt_name, nodes=1)
        body["spec"]["runtimeRef"]["kind"] = kind
        kube.create_tj(body)
        (pod,) = running(kube, name, 1)
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["WHICH"] == which, kind


# -- pods of a TrainJob ----------------------------------------------------------------------


@pytest.mark.parametrize("ancestor_on_pods", [False, True])
def test_torch_pods_layout(
    request: pytest.FixtureRequest, ancestor_on_pods: bool, unique_name: Callable[[str], str]
) -> None:
    fixture = "local_cluster_ancestor_on_pods" if ancestor_on_pods else "local_cluster"
    c: LocalCluster = request.getfixturevalue(fixture)
    kube = Kube(str(c.kubeconfig_path))
    name = unique_name("t")
    body = trainjob(
        name,
        nodes=3,
        command=[
            "sh",
            "-c",
            'echo "rank=$JOB_COMPLETION_INDEX host=$(hostname) v=$MYVAR"; sleep 30',
        ],
        trainer={"env": [{"name": "MYVAR", "value": "hello"}]},
    )
    kube.create_tj(body)
    try:
        pods = running(kube, name, 3)
        by_index = {p.metadata.labels["batch.kubernetes.io/job-completion-index"]: p for p in pods}
        assert sorted(by_index) == ["0", "1", "2"]
        for idx, pod in by_index.items():
            host = f"{name}-node-0-{idx}"
            assert re.fullmatch(rf"{host}-[a-z0-9]{{5}}", pod.metadata.name)
            assert pod.spec.hostname == host and pod.spec.subdomain == name
            labels = pod.metadata.labels
            assert labels[JOBSET_LABEL] == name
            assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
            assert labels["jobset.sigs.k8s.io/job-index"] == "0"
            assert labels["job-name"] == f"{name}-node-0"
            assert (ANCESTOR in labels) is ancestor_on_pods
            assert pod.spec.node_name == "local-node" and pod.status.pod_ip
            cs = pod.status.container_statuses[0]
            assert cs.name == "node" and cs.ready and cs.state.running.started_at
            env = {e.name: e.value for e in pod.spec.containers[0].env}
            assert env["MYVAR"] == "hello"
            log = wait_for(
                lambda p=pod: kube.core.read_namespaced_pod_log(p.metadata.name, "default")
            )
            assert log == f"rank={idx} host={host} v=hello\n"
            assert (c.pod_dir("default", pod.metadata.name)).is_dir()
        jobset = kube.co.get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", name
        )
        owner = jobset["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("TrainJob", name)
        rjob = jobset["spec"]["replicatedJobs"][0]
        assert rjob["template"]["metadata"]["labels"][ANCESTOR] == "trainer"
        assert rjob["template"]["spec"]["parallelism"] == 3
        tj = wait_for(lambda: (s := kube.get_tj(name).get("status")) and s.get("jobsStatus") and s)
        assert tj["jobsStatus"][0]["name"] == "node"
    finally:
        kube.delete_tj(name)


def test_mpi_launcher_created_after_nodes_running(
    kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    name = unique_name("m")
    rv = kube.core.list_namespaced_pod("default").metadata.resource_version
    jobs.append(name)
    kube.create_tj(trainjob(name, runtime="mpi-interactive", nodes=4))
    pods = running(kube, name, 4)
    roles = sorted(p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] for p in pods)
    assert roles == ["launcher", "node", "node", "node"]
    # Replay the pod events: the launcher pod must appear only after every node pod ran.
    w = watch.Watch()
    running_nodes: set[str] = set()
    launcher_seen_with = None
    for ev in w.stream(
        kube.core.list_namespaced_pod,
        "default",
        label_selector=f"{JOBSET_LABEL}={name}",
        resource_version=rv,
        timeout_seconds=1,
    ):
        pod = ev["object"]
        role = pod.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"]
        if role == "node" and pod.status.phase == "Running":
            running_nodes.add(pod.metadata.name)
        if role == "launcher" and ev["type"] == "ADDED" and launcher_seen_with is None:
            launcher_seen_with = len(running_nodes)
    assert launcher_seen_with == 3
    nodes = [
        p for p in pods if p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    ]
    log = kube.core.read_namespaced_pod_log(nodes[0].metadata.name, "default")
    assert "Server listening on 0.0.0.0 port 2222." in log
    launcher = next(p for p in pods if p not in nodes)
    assert ANCESTOR not in launcher.metadata.labels


def test_command_exit_sets_pod_and_trainjob_phase(
    kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    ok, bad = unique_name("t"), unique_name("t")
    jobs += [ok, bad]
    kube.create_tj(trainjob(ok, nodes=2, command=["sh", "-c", "exit 0"]))
    kube.create_tj(trainjob(bad, nodes=1, command=["sh", "-c", "echo boom; exit 3"]))
    done = wait_for(lambda: condition(kube.get_tj(ok), "Complete"))
    assert done["status"] == "True"
    assert all(phase(p) == "Succeeded" for p in kube.pods(ok))
    failed = wait_for(lambda: condition(kube.get_tj(bad), "Failed"))
    assert failed["status"] == "True"
    (pod,) = kube.pods(bad)
    assert phase(pod) == "Failed"
    term = pod.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason) == (3, "Error")
    assert kube.core.read_namespaced_pod_log(pod.metadata.name, "default") == "boom\n"
    assert kube.get_tj(bad)["status"]["jobsStatus"][0]["failed"] == 1


def test_delete_cascades_with_grace(
    cluster: LocalCluster, kube: Kube, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    kube.create_tj(trainjob(name, nodes=2, command=["sh", "-c", "echo $$$$ > pid; sleep 60"]))
    # "$$$$": the kubelet turns "$$" in a container's command into "$"
    pods = running(kube, name, 2)
    pid_file = cluster.pod_dir("default", pods[0].metadata.name) / "pid"
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()))
    rv = kube.core.list_namespaced_pod("default").metadata.resource_version
    kube.delete_tj(name)
    with pytest.raises(ApiException):
        kube.co.get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", name
        )
    seen: dict[str, list[str]] = {}
    for ev in watch.Watch().stream(
        kube.core.list_namespaced_pod,
        "default",
        label_selector=f"{JOBSET_LABEL}={name}",
        resource_version=rv,
        timeout_seconds=2,
    ):
        kind = ev["type"]
        if kind == "MODIFIED" and ev["object"].metadata.deletion_timestamp:
            kind = "TERMINATING"
        seen.setdefault(ev["object"].metadata.name, []).append(kind)
    assert set(seen) == {p.metadata.name for p in pods}
    for events in seen.values():
        assert events.index("TERMINATING") < events.index("DELETED")
    assert kube.pods(name) == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_deleted_pod_is_recreated(
    kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    jobs.append(name)
    kube.create_tj(trainjob(name, nodes=2, command=["sleep", "60"]))
    pods = running(kube, name, 2)
    victim = pods[0]
    kube.core.delete_namespaced_pod(victim.metadata.name, "default")
    new = running(kube, name, 2)
    names = {p.metadata.name for p in new}
    assert victim.metadata.name not in names
    replacement = next(p for p in new if p.spec.hostname == victim.spec.hostname)
    assert replacement.metadata.name != victim.metadata.name


def test_suspend_and_resume(kube: Kube, jobs: list[str], unique_name: Callable[[str], str]) -> None:
    name = unique_name("t")
    jobs.append(name)
    kube.create_tj(trainjob(name, nodes=2, command=["sleep", "60"], suspend=True))
    cond = wait_for(lambda: condition(kube.get_tj(name), "Suspended"))
    assert (cond["status"], cond["reason"]) == ("True", "Suspended")
    time.sleep(0.3)
    assert kube.pods(name) == []
    kube.patch_tj(name, {"spec": {"suspend": False}})
    running(kube, name, 2)
    cond = condition(kube.get_tj(name), "Suspended")
    assert (cond["status"], cond["reason"]) == ("False", "Resumed")
    kube.patch_tj(name, {"spec": {"suspend": True}})
    wait_for(lambda: kube.pods(name) == [])
    assert condition(kube.get_tj(name), "Suspended")["status"] == "True"
    kube.patch_tj(name, {"spec": {"suspend": False}})
    running(kube, name, 2)


# -- selectors and watches -------------------------------------------------------------------


def test_label_and_field_selectors(
    kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    jobs.append(name)
    kube.create_tj(trainjob(name, nodes=3, command=["sleep", "60"]))
    pods = running(kube, name, 3)
    sel = f"{JOBSET_LABEL}={name}"
    idx = "batch.kubernetes.io/job-completion-index"

    def names(label: str = "", field: str = "") -> set[str]:
        items = kube.core.list_namespaced_pod(
            "default", label_selector=label, field_selector=field
        ).items
        return {p.metadata.spec.hostname if False else p.spec.hostname for p in items}

    host = lambda i: f"{name}-node-0-{i}"  # noqa: E731
    assert names(f"{sel},{idx}=1") == {host(1)}
    assert names(f"{sel},{idx}!=1") == {host(0), host(2)}
    assert names(f"{sel},{idx} in (0,2)") == {host(0), host(2)}
    assert names(f"{sel},{idx} notin (0,2)") == {host(1)}
    assert names(f"{sel},{idx}") == {host(0), host(1), host(2)}
    assert names(f"{sel},!{idx}") == set()
    assert names(field=f"metadata.name={pods[0].metadata.name}") == {pods[0].spec.hostname}
    with pytest.raises(ApiException) as info:
        kube.core.list_namespaced_pod("default", label_selector="a in (")
    assert info.value.status == 400


def test_watch_resource_version_and_expired(
    cluster: LocalCluster, kube: Kube, unique_name: Callable[[str], str]
) -> None:
    ns = kube.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=unique_name("w")))
    ).metadata.name
    rv0 = kube.co.list_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs")["metadata"][
        "resourceVersion"
    ]
    a, b = unique_name("a"), unique_name("b")
    kube.create_tj(trainjob(a, suspend=True), ns=ns)
    rv1 = kube.create_tj(trainjob(b, suspend=True), ns=ns)["metadata"]["resourceVersion"]

    def events(rv: str, **kw: Any) -> list[tuple[str, str]]:
        out = []
        for ev in watch.Watch().stream(
            kube.co.list_namespaced_custom_object,
            GROUP,
            VERSION,
            ns,
            "trainjobs",
            resource_version=rv,
            timeout_seconds=1,
            **kw,
        ):
            out.append((ev["type"], ev["object"]["metadata"]["name"]))
        return out

    assert ("ADDED", a) in events(rv0) and ("ADDED", b) in events(rv0)
    after = events(rv1)
    assert ("ADDED", a) not in after and ("ADDED", b) not in after
    # "0": the current objects are sent as ADDED first
    assert {("ADDED", a), ("ADDED", b)} <= set(events("0"))

    cluster.compact()
    status, _, body = kube.raw(
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/trainjobs",
        query_params=[("watch", "true"), ("resourceVersion", rv0), ("timeoutSeconds", "2")],
    )
    lines = [json.loads(x) for x in body.decode().splitlines()]
    assert status == 200 and len(lines) == 1 and lines[0]["type"] == "ERROR"
    assert (lines[0]["object"]["code"], lines[0]["object"]["reason"]) == (410, "Expired")
    with pytest.raises(ApiException) as info:
        events(rv0)
    assert info.value.status == 410


def test_watch_selector_transitions_bookmarks_and_timeout(
    kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    jobs.append(name)
    rv = kube.create_tj(trainjob(name, suspend=True))["metadata"]["resourceVersion"]
    kube.patch_tj(name, {"metadata": {"labels": {"pick": "yes"}}})
    kube.patch_tj(name, {"metadata": {"labels": {"pick": "no"}}})
    start = time.monotonic()
    _, _, body = kube.raw(
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/default/trainjobs",
        query_params=[
            ("watch", "1"),
            ("resourceVersion", rv),
            ("labelSelector", "pick=yes"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", "2"),
        ],
    )
    elapsed = time.monotonic() - start
    events = [json.loads(x) for x in body.decode().splitlines()]
    types = [e["type"] for e in events]
    assert types[:2] == ["ADDED", "DELETED"]  # entered then left the selection
    assert "BOOKMARK" in types[2:] and types[-1] == "BOOKMARK"
    bookmark = events[-1]["object"]
    assert bookmark["kind"] == "TrainJob" and int(bookmark["metadata"]["resourceVersion"]) >= int(
        rv
    )
    assert 1.8 <= elapsed < 5


# -- pods/log, pods/exec pre-checks, tables --------------------------------------------------


def test_pod_logs_tail_and_follow(
    kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    jobs.append(name)
    kube.create_tj(
        trainjob(
            name,
            nodes=1,
            command=["sh", "-c", "for i in 1 2 3; do echo l$i; done; sleep 1; echo end"],
        )
    )
    (pod,) = running(kube, name, 1)
    pod_name = pod.metadata.name
    wait_for(lambda: "l3" in kube.core.read_namespaced_pod_log(pod_name, "default"))
    assert kube.core.read_namespaced_pod_log(pod_name, "default", tail_lines=1) == "l3\n"
    resp = kube.core.read_namespaced_pod_log(
        pod_name, "default", follow=True, _preload_content=False
    )
    assert resp.data.decode() == "l1\nl2\nl3\nend\n"
    with pytest.raises(ApiException) as info:
        kube.core.read_namespaced_pod_log(pod_name, "default", container="nope")
    assert info.value.status == 400
    assert status_of(info.value)["message"] == f"container nope is not valid for pod {pod_name}"


def test_exec_prechecks_are_plain_http_errors(
    cluster: LocalCluster, kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    jobs.append(name)
    kube.create_tj(trainjob(name, nodes=1, command=["sh", "-c", "sleep 0.5"]))
    (pod,) = running(kube, name, 1)
    base = "/api/v1/namespaces/default/pods"
    q = [("command", "true"), ("stdout", "true")]
    status, _, body = kube.raw("GET", f"{base}/nope-xyz/exec", query_params=q)
    assert status == 404 and json.loads(body)["message"] == 'pods "nope-xyz" not found'
    status, _, body = kube.raw(
        "GET", f"{base}/{pod.metadata.name}/exec", query_params=[*q, ("container", "x")]
    )
    assert status == 400
    assert json.loads(body)["message"] == f"container x is not valid for pod {pod.metadata.name}"
    status, _, body = kube.raw("GET", f"{base}/{pod.metadata.name}/exec", query_params=q[1:])
    assert status == 400
    wait_for(
        lambda: phase(kube.core.read_namespaced_pod(pod.metadata.name, "default")) == "Succeeded"
    )
    status, _, body = kube.raw("POST", f"{base}/{pod.metadata.name}/exec", query_params=q)
    assert status == 400
    assert json.loads(body)["message"] == (
        "cannot exec into a container in a completed pod; current phase is Succeeded"
    )


def test_tables_for_kubectl(kube: Kube, jobs: list[str], unique_name: Callable[[str], str]) -> None:
    name = unique_name("t")
    jobs.append(name)
    kube.create_tj(trainjob(name, nodes=1, command=["sleep", "60"]))
    (pod,) = running(kube, name, 1)
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    _, _, body = kube.raw(
        "GET", "/api/v1/namespaces/default/pods", header_params={"Accept": accept}
    )
    table = json.loads(body)
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"][:5]] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    row = next(r for r in table["rows"] if r["cells"][0] == pod.metadata.name)
    assert row["cells"][1:4] == ["1/1", "Running", 0]
    _, _, body = kube.raw(
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/default/trainjobs",
        header_params={"Accept": accept},
    )
    table = json.loads(body)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "State", "Age"]
    _, _, body = kube.raw("GET", "/api/v1/namespaces/default/pods")
    assert json.loads(body)["kind"] == "PodList"


# -- fault injection -------------------------------------------------------------------------


def test_fault_fail_next_requests(
    cluster: LocalCluster, kube: Kube, unique_name: Callable[[str], str]
) -> None:
    cluster.faults.fail_requests("GET", r"/trainjobs/", 503, times=2, message="try later")
    missing = unique_name("t")
    for _ in range(2):
        with pytest.raises(ApiException) as info:
            kube.get_tj(missing)
        assert info.value.status == 503
        assert status_of(info.value)["message"] == "try later"
    with pytest.raises(ApiException) as info:
        kube.get_tj(missing)
    assert info.value.status == 404


def test_fault_hold_release_and_fail_pod(
    cluster: LocalCluster, kube: Kube, jobs: list[str], unique_name: Callable[[str], str]
) -> None:
    name = unique_name("t")
    jobs.append(name)
    cluster.faults.hold_pods(rf"^{name}-")
    kube.create_tj(trainjob(name, nodes=1, command=["sleep", "60"]))

    def waiting_reason() -> str | None:
        pods = kube.pods(name)
        css = pods[0].status.container_statuses if pods else None
        return css[0].state.waiting.reason if css and css[0].state.waiting else None

    assert wait_for(lambda: waiting_reason() == "ImagePullBackOff")
    time.sleep(0.3)
    assert phase(kube.pods(name)[0]) == "Pending"
    cluster.faults.release_pods()
    (pod,) = running(kube, name, 1)
    cluster.faults.fail_pod("default", pod.metadata.name, exit_code=137, reason="OOMKilled")
    got = kube.core.read_namespaced_pod(pod.metadata.name, "default")
    assert phase(got) == "Failed"
    assert got.status.container_statuses[0].state.terminated.exit_code == 137
    assert wait_for(lambda: condition(kube.get_tj(name), "Failed"))


def test_fault_deny_and_rbac_users(
    cluster: LocalCluster, kube: Kube, tmp_path: Any, unique_name: Callable[[str], str]
) -> None:
    token = cluster.add_user("alice", deny=[("create", "trainjobs")])
    alice = Kube(str(cluster.write_kubeconfig(tmp_path / "alice", token=token)))
    with pytest.raises(ApiException) as info:
        alice.create_tj(trainjob(unique_name("t")))
    st = status_of(info.value)
    assert (info.value.status, st["reason"]) == (403, "Forbidden")
    assert st["message"] == (
        'trainjobs.trainer.kubeflow.org is forbidden: User "alice" cannot create resource '
        '"trainjobs" in API group "trainer.kubeflow.org" in the namespace "default"'
    )
    alice.core.list_namespaced_pod("default")  # other verbs still work
    cluster.faults.deny(token, "watch", "pods")
    with pytest.raises(ApiException) as info:
        list(watch.Watch().stream(alice.core.list_namespaced_pod, "default", timeout_seconds=1))
    assert info.value.status == 403
    cluster.faults.deny(token, "create", "pods/exec")
    status, _, body = alice.raw(
        "GET",
        "/api/v1/namespaces/default/pods/somepod/exec",
        query_params=[("command", "true"), ("stdout", "true")],
    )
    assert status == 403
    assert json.loads(body)["message"] == (
        'pods "somepod" is forbidden: User "alice" cannot create resource "pods/exec" in API '
        'group "" in the namespace "default"'
    )


# -- the console script ----------------------------------------------------------------------


def test_cli_local_cluster_runs_until_sigterm(tmp_path: Any) -> None:
    kubeconfig = tmp_path / "kc"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainjob_magics.cli",
            "local-cluster",
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("export KUBECONFIG="):
                break
        assert lines[-1].strip() == f"export KUBECONFIG={kubeconfig}"
        kube = Kube(str(kubeconfig))
        assert client.VersionApi(kube.api).get_code().minor == "32"
        names = {
            i["metadata"]["name"]
            for i in kube.co.list_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes")[
                "items"
            ]
        }
        assert "mpi-interactive" in names
        token = kube.api.configuration.api_key.get("BearerToken") or ""
        assert token.split()[-1] not in "".join(lines)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_extension_kinds_and_subresource_getter(
    cluster: LocalCluster, kube: Kube, tmp_path: Any, unique_name: Callable[[str], str]
) -> None:
    """Other modules (the Kueue simulation) add kinds and read-only subresources."""
    from trainjob_magics.localcluster.core.resources import Kind

    group = f"{unique_name('g')}.example.com"
    cluster.registry.register(
        Kind(group, "v1beta2", "Queue", "queues", subresources=("pending",), has_generation=False)
    )
    calls: list[tuple[Any, ...]] = []

    def pending(version: str, plural: str, ns: str | None, name: str, query: dict) -> dict:
        calls.append((version, plural, ns, name, query.get("limit")))
        return {"kind": "PendingList", "items": [name]}

    cluster.add_subresource_getter(group, "queues", "pending", pending)
    created = kube.co.create_namespaced_custom_object(
        group, "v1beta2", "default", "queues", {"metadata": {"name": "q1"}, "spec": {"a": 1}}
    )
    assert created["kind"] == "Queue" and created["apiVersion"] == f"{group}/v1beta2"
    path = f"/apis/{group}/v1beta2/namespaces/default/queues/q1/pending"
    status, _, body = kube.raw("GET", path, query_params=[("limit", "5")])
    assert (status, json.loads(body)["items"]) == (200, ["q1"])
    assert calls == [("v1beta2", "queues", "default", "q1", "5")]
    token = cluster.add_user("bob", deny=[("get", "queues/pending")])
    bob = Kube(str(cluster.write_kubeconfig(tmp_path / "bob", token=token)))
    status, _, body = bob.raw("GET", path)
    assert status == 403 and 'cannot get resource "queues/pending"' in json.loads(body)["message"]
    groups = [g.name for g in client.ApisApi(kube.api).get_api_versions().groups]
    assert group in groups
