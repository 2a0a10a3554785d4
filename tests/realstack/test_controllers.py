"""The real JobSet, Trainer and Kueue controllers of a running real stack
(``python -m devtools.realstack up``; the stack's folder is ``TRAINJOB_MAGICS_REALSTACK_DIR`` or
``~/.cache/trainjob-magics/realstack/run/default``).

Without a running stack these skip, naming what is missing; with
``TRAINJOB_MAGICS_REQUIRE_REALSTACK=1`` they fail.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools.realstack import controllers, fixtures, paths, procs
from devtools.realstack.context import StackContext

REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"
TIMEOUT = 120.0


def _missing(why: str) -> None:
    if REQUIRE:
        pytest.fail(f"real stack required (TRAINJOB_MAGICS_REQUIRE_REALSTACK=1): {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def stack() -> StackContext:
    run = paths.run_dir()
    if not (run / "state.json").exists():
        _missing(f"no real stack at {run} (python -m devtools.realstack up)")
    ctx = StackContext.load(run)
    if not ctx.admin_kubeconfig.exists():
        _missing(f"the real stack at {run} has no admin kubeconfig (control plane not up)")
    if controllers.kubectl(ctx, "get", "--raw", "/readyz", check=False, timeout=15).returncode != 0:
        _missing(f"kube-apiserver of the real stack at {run} does not answer")
    wanted = ["jobset", "trainer"] + (["kueue"] if ctx.versions.kueue else [])
    for name in wanted:
        if procs.pid_of(run, name) is None:
            _missing(f"the {name} controller of the real stack at {run} is not running")
    return ctx


def kubectl_json(ctx: StackContext, *args: str) -> Any:
    return json.loads(controllers.kubectl(ctx, *args, "-o", "json").stdout)


def until(what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception as e:
            last, value = e, None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}"
        + (f" (last error: {last})" if last else "")
    )


def when(value: Any, pred: Callable[[Any], Any]) -> Any:
    return value if pred(value) else None


def trainjob(
    name: str,
    namespace: str,
    *,
    nodes: int = 1,
    labels: dict | None = None,
    resources: dict | None = None,
) -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": nodes,
                "command": ["sleep", "infinity"],
                "resourcesPerNode": {"requests": resources or {"cpu": "100m", "memory": "64Mi"}},
            },
        },
    }


@pytest.fixture
def create(stack: StackContext) -> Iterator[Callable[[dict], dict]]:
    made: list[dict] = []

    def make(obj: dict) -> dict:
        out = json.loads(
            controllers.kubectl(
                stack, "create", "-o", "json", "-f", "-", input=json.dumps(obj)
            ).stdout
        )
        made.append(obj)
        return out

    yield make
    for obj in made:
        meta = obj["metadata"]
        controllers.kubectl(
            stack,
            "delete",
            "trainjobs.trainer.kubeflow.org",
            meta["name"],
            "-n",
            meta["namespace"],
            "--ignore-not-found",
            "--wait=false",
            check=False,
        )


def _cond(obj: dict, kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def test_trainjob_on_torch_distributed_gets_its_jobset_jobs_and_pods(stack, create):
    name = "rs-" + secrets.token_hex(4)
    tj = create(trainjob(name, fixtures.NAMESPACE, nodes=2))
    assert tj["spec"].get("suspend") in (None, False), "an unqueued namespace must not be suspended"
    uid = tj["metadata"]["uid"]
    # Trainer's JobSet, owned by the TrainJob (pkg/runtime/framework/plugins/jobset, v2.2.1)
    js = until(
        "the JobSet",
        lambda: kubectl_json(
            stack, "get", "jobsets.jobset.x-k8s.io", name, "-n", fixtures.NAMESPACE
        ),
    )
    assert [o["uid"] for o in js["metadata"]["ownerReferences"]] == [uid]
    # JobSet's Jobs (label jobset.sigs.k8s.io/jobset-name) and the Job controller's pods
    sel = f"jobset.sigs.k8s.io/jobset-name={name}"
    jobs = until(
        "the Jobs",
        lambda: kubectl_json(stack, "get", "jobs", "-n", fixtures.NAMESPACE, "-l", sel)["items"],
    )
    assert {j["metadata"]["name"] for j in jobs} == {f"{name}-node-0"}
    pods = until(
        "two pods",
        lambda: when(
            kubectl_json(stack, "get", "pods", "-n", fixtures.NAMESPACE, "-l", sel)["items"],
            lambda p: len(p) == 2,
        ),
    )
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0].get("env", [])}
    assert env.get("PET_NNODES") == "2", env  # Trainer's torch plugin
    # JobSet's pod webhook labels the pods (jobset.sigs.k8s.io/jobset-name objectSelector)
    assert all("jobset.sigs.k8s.io/job-index" in p["metadata"]["labels"] for p in pods)
    if kubectl_json(stack, "get", "nodes")["items"]:  # the scheduler places them on the real node
        until(
            "both pods Running",
            lambda: all(
                p["status"].get("phase") == "Running"
                for p in kubectl_json(stack, "get", "pods", "-n", fixtures.NAMESPACE, "-l", sel)[
                    "items"
                ]
            ),
        )


@pytest.fixture
def kueue(stack: StackContext) -> StackContext:
    if not stack.versions.kueue:
        _missing("the real stack runs without Kueue")
    return stack


def _workload(ctx: StackContext, uid: str) -> dict | None:
    items = kubectl_json(
        ctx,
        "get",
        "workloads.kueue.x-k8s.io",
        "-n",
        fixtures.QUEUED_NAMESPACE,
        "-l",
        f"kueue.x-k8s.io/job-uid={uid}",
    )["items"]
    return items[0] if items else None


def test_trainjob_in_the_queued_namespace_is_suspended_then_admitted(kueue, create):
    name = "rq-" + secrets.token_hex(4)
    tj = create(trainjob(name, fixtures.QUEUED_NAMESPACE))  # no queue label: LocalQueue `default`
    # Kueue's webhook on create (pkg/controller/jobs/trainjob/trainjob_webhook.go)
    assert tj["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == "default"
    assert tj["spec"]["suspend"] is True
    uid = tj["metadata"]["uid"]
    wl = until("the Workload", lambda: _workload(kueue, uid))
    assert wl["metadata"]["name"].startswith(f"trainjob-{name}-")
    assert [o["uid"] for o in wl["metadata"]["ownerReferences"]] == [uid]
    wl = until(
        "the Workload admitted",
        lambda: when(_workload(kueue, uid), lambda w: w and _cond(w, "Admitted")),
    )
    assert wl["status"]["admission"]["clusterQueue"] == fixtures.CLUSTER_QUEUE
    until(
        "the TrainJob unsuspended",
        lambda: (
            kubectl_json(
                kueue,
                "get",
                "trainjobs.trainer.kubeflow.org",
                name,
                "-n",
                fixtures.QUEUED_NAMESPACE,
            )["spec"].get("suspend")
            is False
        ),
    )
    until(
        "its JobSet",
        lambda: kubectl_json(
            kueue, "get", "jobsets.jobset.x-k8s.io", name, "-n", fixtures.QUEUED_NAMESPACE
        ),
    )


def test_visibility_api_answers_pendingworkloads(kueue, create):
    name = "rp-" + secrets.token_hex(4)
    too_many = str(
        kueue.nodes.gpus * kueue.nodes.count + 1
    )  # above the ClusterQueue's quota: stays pending
    tj = create(
        trainjob(
            name,
            fixtures.QUEUED_NAMESPACE,
            labels={"kueue.x-k8s.io/queue-name": "user-queue"},
            resources={"cpu": "100m", "nvidia.com/gpu": too_many},
        )
    )
    until("the Workload", lambda: _workload(kueue, tj["metadata"]["uid"]))
    versions = [
        v["version"]
        for v in json.loads(
            controllers.kubectl(kueue, "get", "--raw", "/apis/visibility.kueue.x-k8s.io").stdout
        )["versions"]
    ]
    for version in versions:  # v1beta1 on every Kueue, v1beta2 from v0.15
        path = (
            f"/apis/visibility.kueue.x-k8s.io/{version}/namespaces/{fixtures.QUEUED_NAMESPACE}"
            "/localqueues/user-queue/pendingworkloads"
        )

        def mine(path=path):
            items = json.loads(controllers.kubectl(kueue, "get", "--raw", path).stdout)["items"]
            return [
                i
                for i in items
                if any(o["name"] == name for o in i["metadata"].get("ownerReferences", []))
            ]

        item = until(f"{name} in {path}", mine)[0]
        assert item["localQueueName"] == "user-queue"
        assert item["positionInLocalQueue"] == 0
        assert "positionInClusterQueue" in item
    if (
        kueue.restricted_kubeconfig.exists()
    ):  # docs/kueue.md's Role, bound to tjm-user by fixtures.apply
        out = procs_run(
            ["kubectl", f"--kubeconfig={kueue.restricted_kubeconfig}", "get", "--raw", path]
        )
        assert out.returncode == 0, out.stderr


def procs_run(argv: list[str]):
    import subprocess

    return subprocess.run(argv, capture_output=True, text=True, timeout=30)
