"""Pods that run on the real stack's kwok nodes (devtools/realstack/podrunner.py), through the
real kube-apiserver, scheduler and controller-manager, with the real ``kubectl``.

They need a running stack with its nodes (``python -m devtools.realstack up``; the stack's
folder is ``TRAINJOB_MAGICS_REALSTACK_DIR`` or ``~/.cache/trainjob-magics/realstack/run/default``).
Without one they skip, naming what is missing; with ``TRAINJOB_MAGICS_REQUIRE_REALSTACK=1`` they
fail.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.realstack import paths, procs
from devtools.realstack.context import StackContext
from devtools.realstack.podrunner import KubeApi, pod_path

REQUIRE = os.environ.get("TRAINJOB_MAGICS_REQUIRE_REALSTACK") == "1"
TIMEOUT = 60.0


def _missing(why: str) -> None:
    if REQUIRE:
        pytest.fail(f"real stack required (TRAINJOB_MAGICS_REQUIRE_REALSTACK=1): {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def stack() -> StackContext:
    run = paths.run_dir()
    if shutil.which("kubectl") is None:
        _missing("kubectl is not on PATH")
    if not (run / "state.json").exists():
        _missing(f"no real stack at {run} (python -m devtools.realstack up)")
    ctx = StackContext.load(run)
    if not ctx.admin_kubeconfig.exists():
        _missing(f"the real stack at {run} has no admin kubeconfig (control plane not up)")
    for name in (
        "kube-apiserver",
        "kube-scheduler",
        "kube-controller-manager",
        "kwok",
        "podrunner",
    ):
        if procs.pid_of(run, name) is None:
            _missing(f"{name} of the real stack at {run} is not running")
    return ctx


def kubectl(
    ctx: StackContext, *args: str, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": str(ctx.admin_kubeconfig)}
    proc = subprocess.run(
        ["kubectl", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def kubectl_apply(ctx: StackContext, obj: dict) -> None:
    env = {**os.environ, "KUBECONFIG": str(ctx.admin_kubeconfig)}
    proc = subprocess.run(
        ["kubectl", "apply", "-f", "-"],
        input=json.dumps(obj),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def get(ctx: StackContext, *args: str) -> Any:
    return json.loads(kubectl(ctx, "get", *args, "-o", "json").stdout)


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
        time.sleep(0.3)
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last: {last})" if last else "")
    )


@pytest.fixture(scope="module")
def ns(stack: StackContext) -> Iterator[str]:
    name = f"podrunner-{secrets.token_hex(3)}"
    kubectl(stack, "create", "namespace", name)
    yield name
    kubectl(stack, "delete", "namespace", name, "--wait=false", check=False)


def pod(
    name: str, ns: str, command: list[str], *, restart: str = "Never", grace: int = 2, **extra: Any
) -> dict:
    container = {"name": "main", "image": "python:3.12", "command": command, **extra}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": grace,
            "containers": [container],
        },
    }


def phase_is(ctx: StackContext, ns: str, name: str, *phases: str) -> Callable[[], Any]:
    def check() -> Any:
        p = get(ctx, "pod", "-n", ns, name)
        return p if p["status"].get("phase") in phases else None

    return check


def ready(ctx: StackContext, ns: str, name: str) -> dict:
    def check() -> Any:
        p = get(ctx, "pod", "-n", ns, name)
        conds = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
        return p if conds.get("Ready") == "True" else None

    return until(f"pod {name} Ready", check)


ENV_SCRIPT = (
    "import os, json; keys = ['MY_NAME', 'MY_NS', 'MY_UID', 'NODE', 'APP', 'IP', 'CPU', "
    "'GREETING', "
    "'CM_other', 'HOSTNAME', 'HOME', 'TMPDIR', 'KUBERNETES_SERVICE_HOST']; "
    "print(json.dumps({'cwd': os.getcwd(), **{k: os.environ.get(k) for k in keys}}), flush=True)"
)


def test_command_runs_with_its_env_and_kubectl_logs(stack: StackContext, ns: str) -> None:
    kubectl_apply(
        stack,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": ns},
            "data": {"greeting": "hello", "other": "x"},
        },
    )
    env = [
        {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "MY_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {
            "name": "CPU",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}},
        },
        {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "greeting"}}},
    ]
    kubectl_apply(
        stack,
        pod(
            "envpod",
            ns,
            ["python3", "-c", ENV_SCRIPT],
            env=env,
            envFrom=[{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
            resources={"limits": {"cpu": "1500m", "memory": "64Mi"}},
        ),
    )
    p = until("envpod Succeeded", phase_is(stack, ns, "envpod", "Succeeded", "Failed"))
    assert p["status"]["phase"] == "Succeeded", p["status"]
    out = json.loads(kubectl(stack, "logs", "-n", ns, "envpod").stdout)
    assert (
        out["MY_NAME"] == "envpod" and out["MY_NS"] == ns and out["MY_UID"] == p["metadata"]["uid"]
    )
    assert (
        out["NODE"] == p["spec"]["nodeName"] and out["APP"] == "envpod" and out["IP"] == "127.0.0.1"
    )
    assert out["CPU"] == "1500" and out["GREETING"] == "hello" and out["CM_other"] == "x"
    assert out["HOSTNAME"] == "envpod" and out["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    pod_dir = Path(out["cwd"]).parent
    assert pod_dir.name.endswith(p["metadata"]["uid"]) and Path(out["HOME"]) == pod_dir / "home"
    assert Path(out["TMPDIR"]) == pod_dir / "tmp"
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    assert {c["type"] for c in p["status"]["conditions"]} >= {
        "PodScheduled",
        "Initialized",
        "Ready",
        "ContainersReady",
    }


def test_exec_runs_in_the_pod_dir_with_its_env(stack: StackContext, ns: str) -> None:
    env = [{"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    kubectl_apply(
        stack,
        pod("execpod", ns, ["sh", "-c", "echo $MY_NAME > from-command; exec sleep 3600"], env=env),
    )
    p = ready(stack, ns, "execpod")
    st = p["status"]
    assert st["phase"] == "Running" and st["podIP"] == "127.0.0.1" and st["hostIP"] == "127.0.0.1"
    assert st["startTime"] and st["containerStatuses"][0]["started"] is True
    assert "running" in st["containerStatuses"][0]["state"]
    out = kubectl(
        stack,
        "exec",
        "-n",
        ns,
        "execpod",
        "--",
        "sh",
        "-c",
        # the command may not have written its file yet when the pod turns Ready
        "until [ -s from-command ]; do sleep 0.05; done; "
        'echo "$MY_NAME|$(cat from-command)|$PWD|$HOME"',
    ).stdout.strip()
    name, from_command, cwd, home = out.split("|")
    assert name == from_command == "execpod"
    assert cwd.endswith("/work") and home == str(Path(cwd).parent / "home")
    assert p["metadata"]["uid"] in cwd


def test_exit_code_sets_terminated_state_and_phase(stack: StackContext, ns: str) -> None:
    kubectl_apply(stack, pod("fails", ns, ["sh", "-c", "echo bye; exit 3"]))
    p = until("fails Failed", phase_is(stack, ns, "fails", "Failed", "Succeeded"))
    assert p["status"]["phase"] == "Failed"
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert kubectl(stack, "logs", "-n", ns, "fails").stdout == "bye\n"


def test_on_failure_restarts_with_restart_count(stack: StackContext, ns: str) -> None:
    # fails once, then succeeds (the kubelet's first restart has no back-off)
    script = "if [ -e ran ]; then echo second; exit 0; fi; touch ran; echo first; exit 1"
    kubectl_apply(stack, pod("retry", ns, ["sh", "-c", script], restart="OnFailure"))
    p = until("retry Succeeded", phase_is(stack, ns, "retry", "Succeeded", "Failed"))
    cs = p["status"]["containerStatuses"][0]
    assert p["status"]["phase"] == "Succeeded" and cs["restartCount"] == 1
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert kubectl(stack, "logs", "-n", ns, "retry").stdout == "second\n"
    assert kubectl(stack, "logs", "-n", ns, "retry", "--previous").stdout == "first\n"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_deleting_a_pod_ends_its_exec_processes(stack: StackContext, ns: str) -> None:
    kubectl_apply(stack, pod("victim", ns, ["sleep", "3600"], restart="Always", grace=1))
    ready(stack, ns, "victim")
    out = kubectl(
        stack,
        "exec",
        "-n",
        ns,
        "victim",
        "--",
        "sh",
        "-c",
        "nohup setsid sleep 3601 >/dev/null 2>&1 & echo $!",
    ).stdout
    pid = int(out.split()[-1])
    until("the exec'd process to start", lambda: _alive(pid), timeout=5)
    kubectl(stack, "delete", "pod", "-n", ns, "victim", "--wait=true", timeout=60)
    until("the exec'd process to end", lambda: not _alive(pid), timeout=10)
    assert kubectl(stack, "get", "pod", "-n", ns, "victim", check=False).returncode != 0


def test_a_job_replaces_its_failed_pod(stack: StackContext, ns: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "flaky", "namespace": ns},
        "spec": {
            "backoffLimit": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "main", "image": "x", "command": ["sh", "-c", "exit 1"]}
                    ],
                }
            },
        },
    }
    kubectl_apply(stack, job)

    def failed_twice() -> Any:
        j = get(stack, "job", "-n", ns, "flaky")
        return j if j.get("status", {}).get("failed", 0) >= 2 else None

    until("the Job to count two failed pods", failed_twice, timeout=90)
    pods = get(stack, "pods", "-n", ns, "-l", "job-name=flaky")["items"]
    assert len({p["metadata"]["uid"] for p in pods}) >= 2
    assert all(p["status"]["phase"] == "Failed" for p in pods)


def test_a_pod_deleted_as_its_container_starts_is_gone_before_its_grace_ends(
    stack: StackContext, ns: str
) -> None:
    """A deletion that reaches the runner while a container's start is in flight (its
    supervisor spawned, the main process's pid not yet known) still sends the stop signal as
    soon as the pid is known, as the kubelet's killContainer does: the pod ends long before its
    60 s grace period. Several pods at once, each deleted the moment its status first says
    ``running`` (the runner publishes that right after spawning the supervisor)."""
    api = KubeApi(stack.admin_kubeconfig)
    names = [f"early-stop-{i}" for i in range(4)]
    path = f"/api/v1/namespaces/{ns}/pods"
    rv = api.get(path)["metadata"]["resourceVersion"]
    for name in names:
        api.request("POST", path, pod(name, ns, ["sleep", "3600"], grace=60))
    deleted: set[str] = set()
    for ev in api.watch(path, rv, timeout=int(TIMEOUT)):
        obj = ev["object"]
        name = obj.get("metadata", {}).get("name")
        if ev["type"] == "BOOKMARK" or name not in names or name in deleted:
            continue
        statuses = (obj.get("status") or {}).get("containerStatuses") or []
        if any("running" in (cs.get("state") or {}) for cs in statuses):
            api.request("DELETE", pod_path(ns, name), ok404=True)  # the pod's grace: 60 s
            deleted.add(name)
            if len(deleted) == len(names):
                break
    assert deleted == set(names), f"never seen running: {sorted(set(names) - deleted)}"

    def all_gone() -> bool:
        left = {p["metadata"]["name"] for p in get(stack, "pods", "-n", ns)["items"]}
        return not left & set(names)

    # a stop signal that never came would keep them until SIGKILL at the end of the 60 s
    until("pods deleted as they started to be gone well within their grace", all_gone, 20)
