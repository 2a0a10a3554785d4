"""Peer checks: the local cluster against the real clients that talk to real clusters.

The peers are the `kubectl` on PATH (1.32), the official kubernetes python client (typed models
and `kubernetes.dynamic.DynamicClient`) and the wording of the Kubernetes sources named in
docs/local-cluster.md. Each test asserts something a less faithful server gets wrong.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml
from kubernetes import client, config, dynamic
from kubernetes.client.rest import ApiException

from trainjob_magics.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(90)

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
JOBSET = "jobset.sigs.k8s.io"
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")


# -- helpers ---------------------------------------------------------------------------------


class Kube:
    """Typed, custom-object and raw access through the python client's own HTTPS settings."""

    def __init__(self, kubeconfig: str) -> None:
        self.api = config.new_client_from_config(kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)

    def raw(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        body: Any = None,
    ) -> tuple[int, bytes]:
        cfg = self.api.configuration
        hdrs = dict(headers or {})
        for auth in cfg.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                hdrs[auth["key"]] = auth["value"]
        url = cfg.host + path + ("?" + urlencode(query) if query else "")
        kw: dict[str, Any] = {"header_params": hdrs}
        if body is not None:
            hdrs.setdefault("Content-Type", "application/json")
            kw["body"] = body
        try:
            resp = self.api.call_api(method, url, **kw)
        except ApiException as exc:
            data = exc.body or b""
            return exc.status, data if isinstance(data, bytes) else data.encode()
        return resp.status, resp.read()

    def raw_json(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        status, body = self.raw(method, path, **kw)
        return status, json.loads(body)


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def trainjob(name: str, command: list[str], nodes: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": nodes, "command": command},
            **extra,
        },
    }


@pytest.fixture
def kube(cluster: LocalCluster) -> Kube:
    return Kube(str(cluster.kubeconfig_path))


@pytest.fixture
def job(kube: Kube) -> Iterator[tuple[str, list[Any]]]:
    """A running 2-node torch TrainJob that printed `hello <rank>`: (name, typed pods by index)."""
    name = f"f{secrets.token_hex(5)}"
    kube.co.create_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        "trainjobs",
        trainjob(name, ["sh", "-c", "echo hello $JOB_COMPLETION_INDEX; sleep 120"], nodes=2),
    )

    def pods() -> list[Any] | None:
        items = kube.core.list_namespaced_pod(
            "default", label_selector=f"{JOBSET}/jobset-name={name}"
        ).items
        ok = len(items) == 2 and all(p.status.phase == "Running" for p in items)
        return items if ok else None

    items = wait_for(pods)
    items.sort(key=lambda p: p.metadata.labels["batch.kubernetes.io/job-completion-index"])
    yield name, items
    with contextlib.suppress(ApiException):
        kube.co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", name)


# -- kubectl ---------------------------------------------------------------------------------


@needs_kubectl
def test_kubectl_apply_get_logs_delete_without_validate_false(
    kubectl: Callable[..., Any], kube: Kube, tmp_path: Path
) -> None:
    """kubectl 1.32 downloads /openapi/v3 before apply/create: with it served, apply works with
    the default --validate=strict, and unknown fields are rejected server-side as upstream."""
    name = f"a{secrets.token_hex(5)}"
    manifest = tmp_path / "tj.yaml"
    body = trainjob(name, ["sh", "-c", "echo from-apply; sleep 120"])
    manifest.write_text(yaml.safe_dump(body))
    try:
        r = kubectl("apply", "-f", str(manifest))
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"trainjob.{GROUP}/{name} created"
        r = kubectl("apply", "-f", str(manifest))
        assert r.stdout.strip() == f"trainjob.{GROUP}/{name} unchanged", r.stderr
        body["metadata"]["labels"] = {"team": "fidelity"}
        manifest.write_text(yaml.safe_dump(body))
        r = kubectl("apply", "-f", str(manifest))  # a JSON merge patch, as for any CR
        assert r.stdout.strip() == f"trainjob.{GROUP}/{name} configured", r.stderr

        r = kubectl("get", "trainjob", name, "-o", "yaml")
        got = yaml.safe_load(r.stdout)
        assert got["metadata"]["labels"] == {"team": "fidelity"}
        assert "kubectl.kubernetes.io/last-applied-configuration" in got["metadata"]["annotations"]
        assert got["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"  # CRD default

        def pod_name() -> str | None:
            items = kube.core.list_namespaced_pod(
                "default", label_selector=f"{JOBSET}/jobset-name={name}"
            ).items
            return items[0].metadata.name if items and items[0].status.phase == "Running" else None

        pod = wait_for(pod_name)
        wait_for(lambda: kubectl("logs", pod).stdout == "from-apply\n")

        r = kubectl("delete", "-f", str(manifest))
        assert r.returncode == 0 and f'trainjob.{GROUP} "{name}" deleted' in r.stdout, r.stderr
        r = kubectl("get", "trainjob", name)
        assert r.returncode == 1 and f'trainjobs.{GROUP} "{name}" not found' in r.stderr
    finally:
        kubectl("delete", "-f", str(manifest), "--ignore-not-found")

    bad = trainjob(f"b{secrets.token_hex(5)}", ["true"])
    bad["spec"]["bogus"] = 1
    manifest.write_text(yaml.safe_dump(bad))
    r = kubectl("create", "-f", str(manifest))
    assert r.returncode == 1
    assert (
        'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: strict decoding error: '
        'unknown field "spec.bogus"'
    ) in r.stderr
    r = kubectl("apply", "-f", str(manifest), "--dry-run=server")
    assert r.returncode == 1 and "BadRequest" in r.stderr
    del bad["spec"]["bogus"]
    manifest.write_text(yaml.safe_dump(bad))
    r = kubectl("apply", "-f", str(manifest), "--dry-run=server")
    assert r.returncode == 0 and "(server dry run)" in r.stdout, r.stderr
    r = kubectl("get", "trainjob", bad["metadata"]["name"])
    assert r.returncode == 1, "a server dry run must not store the object"


@needs_kubectl
def test_kubectl_watch_gets_table_rows(
    kubectl: Callable[..., Any], kube: Kube, cluster: LocalCluster
) -> None:
    """`kubectl get pods -w` asks for Table watch events; raw Pod events make it fall back to
    printing `NAME AGE` only. Each row must carry READY and STATUS."""
    name = f"w{secrets.token_hex(5)}"
    out: dict[str, Any] = {}

    def watch() -> None:
        out["r"] = kubectl(
            "get", "pods", "-w", "-l", f"{JOBSET}/jobset-name={name}", "--request-timeout=4s"
        )

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(1.0)
    try:
        kube.co.create_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", trainjob(name, ["sleep", "60"])
        )
        t.join(timeout=30)
    finally:
        kube.co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", name)
    rows = [line.split() for line in out["r"].stdout.splitlines()]
    assert rows and rows[0][:3] == ["NAME", "READY", "STATUS"], out["r"]
    states = {row[2] for row in rows[1:] if row[0].startswith(f"{name}-node-0-0-")}
    assert "Running" in states, rows
    assert all(re.fullmatch(r"\d/\d", row[1]) for row in rows[1:]), rows


@needs_kubectl
def test_kubectl_describe_pod(kubectl: Callable[..., Any], job: tuple[str, list[Any]]) -> None:
    _, pods = job
    r = kubectl("describe", "pod", pods[0].metadata.name)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert re.search(r"^Status:\s+Running$", text, re.M)
    assert re.search(r"^QoS Class:\s+BestEffort$", text, re.M)
    for cond in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
        assert re.search(rf"^\s+{cond}\s+True\s*$", text, re.M), cond
    assert re.search(r"Container ID:\s+containerd://[0-9a-f]+", text)
    assert re.search(r"Image ID:\s+\S+@sha256:[0-9a-f]{64}", text)


# -- kubernetes python client ------------------------------------------------------------------


def test_typed_models_deserialize_without_warnings(kube: Kube, job: tuple[str, list[Any]]) -> None:
    """Pod/Namespace responses into the client's typed models; shapes as kubelet/JobSet set
    them (conditions, containerStatuses, podIPs, JobSet labels and annotations)."""
    name, _ = job
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pods = kube.core.list_namespaced_pod(
            "default", label_selector=f"{JOBSET}/jobset-name={name}"
        )
        pod = kube.core.read_namespaced_pod(pods.items[0].metadata.name, "default")
        namespaces = kube.core.list_namespace()
    assert pods.metadata.resource_version.isdigit()
    assert {"default", "kube-system"} <= {n.metadata.name for n in namespaces.items}
    assert all(n.status.phase == "Active" for n in namespaces.items)

    st = pod.status
    assert [c.type for c in st.conditions] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    assert all(c.status == "True" for c in st.conditions)
    assert st.qos_class == "BestEffort" and st.host_ip == "127.0.0.1"
    assert st.pod_ip and [ip.ip if hasattr(ip, "ip") else ip["ip"] for ip in st.pod_ips] == [
        st.pod_ip
    ]
    cs = st.container_statuses[0]
    assert (cs.name, cs.ready, cs.started, cs.restart_count) == ("node", True, True, 0)
    assert cs.state.running.started_at is not None
    assert re.fullmatch(r"containerd://[0-9a-f]{32,64}", cs.container_id)
    assert re.fullmatch(r"\S+@sha256:[0-9a-f]{64}", cs.image_id)
    assert cs.image.startswith("docker.io/")  # containerd reports the fully qualified name

    index = pod.metadata.labels["batch.kubernetes.io/job-completion-index"]
    job_name = f"{name}-node-0"
    expected = {
        f"{JOBSET}/jobset-name": name,
        f"{JOBSET}/replicatedjob-name": "node",
        f"{JOBSET}/job-index": "0",
        f"{JOBSET}/job-global-index": "0",
        f"{JOBSET}/global-replicas": "1",
        f"{JOBSET}/replicatedjob-replicas": "1",
        f"{JOBSET}/restart-attempt": "0",
        f"{JOBSET}/job-key": hashlib.sha1(f"default/{job_name}".encode()).hexdigest(),
    }
    for key, value in expected.items():
        assert pod.metadata.labels[key] == value, key
        assert pod.metadata.annotations[key] == value, key
    assert pod.spec.hostname == f"{name}-node-0-{index}" and pod.spec.subdomain == name


def test_dynamic_client_discovers_and_lists_trainjobs(
    kube: Kube, job: tuple[str, list[Any]]
) -> None:
    """DynamicClient builds its resource map from /api, /apis and each group-version."""
    name, pods = job
    dc = dynamic.DynamicClient(kube.api)
    tj = dc.resources.get(api_version=f"{GROUP}/{VERSION}", kind="TrainJob")
    assert (tj.name, tj.namespaced) == ("trainjobs", True)
    assert {"create", "get", "list", "watch", "patch", "delete"} <= set(tj.verbs)
    listed = tj.get(namespace="default")
    assert listed.kind == "TrainJobList" and name in [i.metadata.name for i in listed.items]
    assert tj.get(name=name, namespace="default").spec.runtimeRef.name == "torch-distributed"
    assert tj.status is not None  # the status subresource is discovered

    pod_res = dc.resources.get(api_version="v1", kind="Pod")
    assert pod_res.short_names == ["po"] and pod_res.categories == ["all"]
    assert set(pod_res.subresources) >= {"status", "log", "exec"}
    log = pod_res.log.get(name=pods[1].metadata.name, namespace="default")
    assert "hello 1" in str(log)
    js = dc.resources.get(api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet")
    assert (js.name, js.namespaced) == ("jobsets", True)
    status = js.get(name=name, namespace="default").status
    assert status.restarts == 0  # JobSetStatus.restarts has no omitempty
    assert [r.name for r in status.replicatedJobsStatus] == ["node"]


# -- raw wire format ------------------------------------------------------------------------


def test_openapi_v3_documents(kube: Kube) -> None:
    """What cli-runtime's queryParamVerifierV3 reads: root paths -> per-GV doc with a PATCH
    operation for the GVK that lists the fieldValidation parameter."""
    status, root = kube.raw_json("GET", "/openapi/v3")
    assert status == 200
    assert {"api/v1", f"apis/{GROUP}/{VERSION}", "apis/jobset.x-k8s.io/v1alpha2"} <= set(
        root["paths"]
    )
    url = root["paths"][f"apis/{GROUP}/{VERSION}"]["serverRelativeURL"]
    assert re.fullmatch(rf"/openapi/v3/apis/{GROUP}/{VERSION}\?hash=[0-9A-F]{{128}}", url)
    path, _, query = url.partition("?")
    status, doc = kube.raw_json("GET", path, query=[tuple(query.split("=", 1))])
    assert status == 200 and doc["openapi"].startswith("3.")
    patches = [
        op["patch"]
        for op in doc["paths"].values()
        if "patch" in op
        and op["patch"]["x-kubernetes-group-version-kind"]
        == {"group": GROUP, "version": VERSION, "kind": "TrainJob"}
    ]
    assert len(patches) == 1
    assert "fieldValidation" in [p["name"] for p in patches[0]["parameters"]]
    schema = doc["components"]["schemas"][f"org.kubeflow.trainer.{VERSION}.TrainJob"]
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["runtimeRef"]
    assert spec["properties"]["trainer"]["properties"]["numNodes"]["type"] == "integer"
    # kube-aggregator openapiv3/aggregator.go handleGroupVersion: a bare 404, no Status body
    status, body = kube.raw("GET", "/openapi/v3/apis/nothing.example.com/v1")
    assert (status, body) == (404, b"")


def test_status_bodies_match_apiserver(kube: Kube, cluster: LocalCluster, tmp_path: Path) -> None:
    """metav1.Status bodies as apiserver's errors package builds them."""
    status, body = kube.raw_json("GET", "/api/v1/namespaces/default/pods/nope")
    assert (status, body) == (
        404,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'pods "nope" not found',
            "reason": "NotFound",
            "details": {"name": "nope", "kind": "pods", "group": ""},
            "code": 404,
        },
    )
    # an unknown group: net/http's plain-text 404 (apiserver util/notfoundhandler), no Status
    status, raw = kube.raw("GET", "/apis/nothing.example.com/v1/things")
    assert (status, raw) == (404, b"404 page not found\n")
    status, body = kube.raw_json("GET", "/api/v1/things")  # the core group: go-restful's Status
    assert (status, body["message"], body["details"]) == (
        404,
        "the server could not find the requested resource",
        {},
    )
    status, body = kube.raw_json("PUT", "/api/v1/namespaces/default/pods")
    assert (status, body["reason"], body["details"]) == (405, "MethodNotAllowed", {})
    assert body["message"] == "the server does not allow this method on the requested resource"

    name = f"s{secrets.token_hex(5)}"
    path = f"/apis/{GROUP}/{VERSION}/namespaces/default/trainjobs"
    tj = trainjob(name, ["sleep", "5"], suspend=True)
    assert kube.raw_json("POST", path, body=tj)[0] == 201
    try:
        status, body = kube.raw_json("POST", path, body=tj)
        assert (status, body["reason"], body["message"]) == (
            409,
            "AlreadyExists",
            f'trainjobs.{GROUP} "{name}" already exists',
        )
        assert body["details"] == {"name": name, "group": GROUP, "kind": "trainjobs"}
        status, body = kube.raw_json("POST", path, body={**tj, "metadata": {"name": "Bad_Name"}})
        assert (status, body["reason"]) == (422, "Invalid")
        assert body["message"].startswith(f'TrainJob.{GROUP} "Bad_Name" is invalid: ')
        assert body["details"]["kind"] == "TrainJob" and body["details"]["causes"]
        status, body = kube.raw_json(
            "POST", path, query=[("fieldValidation", "Strict")], body={**tj, "x": 1}
        )
        assert (status, body["reason"]) == (400, "BadRequest")
        assert body["message"] == (
            'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: '
            'strict decoding error: unknown field "x"'
        )
        status, body = kube.raw_json("POST", path, query=[("fieldValidation", "Nope")], body=tj)
        assert status == 400 and "supported values" in body["message"]
    finally:
        kube.raw("DELETE", f"{path}/{name}")

    kc = cluster.write_kubeconfig(tmp_path / "kc", token="wrong")
    status, body = Kube(str(kc)).raw_json("GET", "/api/v1/namespaces")
    assert (status, body) == (
        401,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        },
    )
    cluster.faults.deny(cluster.token, "list", "pods")
    status, body = kube.raw_json("GET", "/api/v1/namespaces/default/pods")
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"].startswith('pods is forbidden: User "')
    assert body["message"].endswith(
        'cannot list resource "pods" in API group "" in the namespace "default"'
    )
    assert body["details"] == {"group": "", "kind": "pods"}


def _events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.decode().splitlines() if line.strip()]


def test_watch_framing_bookmarks_initial_events_and_expired(
    kube: Kube, cluster: LocalCluster, job: tuple[str, list[Any]]
) -> None:
    name, _ = job
    pods = "/api/v1/namespaces/default/pods"
    sel = ("labelSelector", f"{JOBSET}/jobset-name={name}")
    # WatchList: current objects as ADDED, then a BOOKMARK marked initial-events-end.
    status, body = kube.raw(
        "GET",
        pods,
        query=[
            ("watch", "true"),
            sel,
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", "1"),
        ],
    )
    events = _events(body)
    assert status == 200 and [e["type"] for e in events[:3]] == ["ADDED", "ADDED", "BOOKMARK"]
    mark = events[2]["object"]
    assert mark["kind"] == "Pod" and mark["apiVersion"] == "v1"
    assert set(mark) == {"kind", "apiVersion", "metadata"}
    assert mark["metadata"] == {
        "resourceVersion": mark["metadata"]["resourceVersion"],
        "annotations": {"k8s.io/initial-events-end": "true"},
    }
    # without resourceVersionMatch: 422 on ListOptions, as validateWatchOptions
    status, body = kube.raw("GET", pods, query=[("watch", "true"), ("sendInitialEvents", "true")])
    err = json.loads(body)
    assert (status, err["reason"]) == (422, "Invalid")
    assert err["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    )
    # Stale resourceVersion: HTTP 200 and one ERROR event with the cacher's wording.
    cluster.compact()
    status, body = kube.raw("GET", pods, query=[("watch", "true"), ("resourceVersion", "1")])
    (event,) = _events(body)
    assert status == 200 and event["type"] == "ERROR"
    obj = event["object"]
    assert (obj["kind"], obj["code"], obj["reason"]) == ("Status", 410, "Expired")
    assert re.fullmatch(r"too old resource version: 1 \(\d+\)", obj["message"])


def test_tables_include_object_and_watch_headers(kube: Kube, job: tuple[str, list[Any]]) -> None:
    """apiserver asTable: includeObject Metadata (default) / None / Object; in a Table watch
    only the first event carries columnDefinitions."""
    name, pods = job
    table = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    path = "/api/v1/namespaces/default/pods"
    sel = ("labelSelector", f"{JOBSET}/jobset-name={name}")
    status, body = kube.raw_json("GET", path, query=[sel], headers=table)
    assert status == 200 and body["kind"] == "Table"
    assert [c["name"] for c in body["columnDefinitions"]][:3] == ["Name", "Ready", "Status"]
    row = body["rows"][0]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["apiVersion"] == "meta.k8s.io/v1" and "spec" not in row["object"]
    _, body = kube.raw_json("GET", path, query=[sel, ("includeObject", "None")], headers=table)
    assert body["rows"][0]["object"] is None
    _, body = kube.raw_json("GET", path, query=[sel, ("includeObject", "Object")], headers=table)
    assert body["rows"][0]["object"]["kind"] == "Pod"
    status, body = kube.raw_json("GET", path, query=[("includeObject", "Bogus")], headers=table)
    assert status == 400 and body["message"] == 'unrecognized includeObject value: "Bogus"'

    status, raw = kube.raw(
        "GET", path, query=[sel, ("watch", "true"), ("timeoutSeconds", "1")], headers=table
    )
    events = _events(raw)
    assert status == 200 and len(events) == 2
    first, second = (e["object"] for e in events)
    assert first["kind"] == second["kind"] == "Table"
    assert first["columnDefinitions"] and second["columnDefinitions"] is None
    names = {first["rows"][0]["cells"][0], second["rows"][0]["cells"][0]}
    assert names == {p.metadata.name for p in pods}
