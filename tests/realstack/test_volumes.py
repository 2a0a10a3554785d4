"""Volumes on the real stack (devtools/realstack/podvolumes.py, provisioner.py): pods created
with the admin kubeconfig through the real apiserver, scheduler and controller-manager, their
mounts checked from inside with ``kubectl exec`` and from the pods' own output.

They need a running stack (``python -m devtools.realstack up``); without one they skip naming
what is missing, and fail under ``TRAINJOB_MAGICS_REQUIRE_REALSTACK=1``.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.realstack import procs
from devtools.realstack.context import StackContext
from devtools.realstack.provisioner import ANN_PROVISIONED_BY, PROVISIONER
from tests.realstack.test_podrunner import (
    _missing,
    get,
    kubectl,
    kubectl_apply,
    phase_is,
    pod,
    ready,
    stack,  # noqa: F401  (the module's fixture)
    until,
)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def ns(stack: StackContext) -> Iterator[str]:  # noqa: F811
    name = f"volumes-{secrets.token_hex(3)}"
    kubectl(stack, "create", "namespace", name)
    yield name
    kubectl(stack, "delete", "namespace", name, "--wait=false", check=False)


def exec_out(ctx: StackContext, ns: str, name: str, *cmd: str) -> str:
    return kubectl(ctx, "exec", "-n", ns, name, "--", *cmd).stdout


def with_volumes(p: dict, volumes: list[dict], mounts: list[dict]) -> dict:
    p["spec"]["volumes"] = volumes
    p["spec"]["containers"][0]["volumeMounts"] = mounts
    return p


def pod_dir(ctx: StackContext, p: dict) -> Path:
    meta = p["metadata"]
    return ctx.run / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"


def events(ctx: StackContext, ns: str, name: str) -> list[dict]:
    out = get(ctx, "events", "-n", ns, "--field-selector", f"involvedObject.name={name}")
    return out["items"]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def in_namespace(mnt: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/mnt") == mnt and _alive(int(entry)):
                    out.append(int(entry))
            except OSError:
                pass
    return out


def test_a_claim_of_the_default_class_is_provisioned_and_outlives_its_pods(
    stack: StackContext,  # noqa: F811
    ns: str,
) -> None:
    kubectl_apply(
        stack,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )

    def bound() -> Any:
        c = get(stack, "pvc", "-n", ns, "data")
        return c if c["status"].get("phase") == "Bound" else None

    claim = until("the claim Bound", bound)
    assert claim["spec"]["storageClassName"] == "standard"  # the default class, by admission
    pv = get(stack, "pv", claim["spec"]["volumeName"])
    assert pv["metadata"]["annotations"][ANN_PROVISIONED_BY] == PROVISIONER
    assert pv["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
    assert pv["spec"]["capacity"]["storage"] == "1Gi"
    host_dir = Path(pv["spec"]["hostPath"]["path"])
    assert host_dir.parent == stack.run / "volumes"

    vols = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    writer = pod("writer", ns, ["sh", "-c", "echo written-by-writer > /data/note"])
    kubectl_apply(stack, with_volumes(writer, vols, [{"name": "d", "mountPath": "/data"}]))
    p = until("writer done", phase_is(stack, ns, "writer", "Succeeded", "Failed"))
    assert p["status"]["phase"] == "Succeeded", p["status"]
    kubectl(stack, "delete", "pod", "-n", ns, "writer", "--wait=true")
    assert (host_dir / "note").read_text() == "written-by-writer\n"

    reader = pod("reader", ns, ["sh", "-c", "cat /data/note; echo x > /data/other"])
    mounts = [{"name": "d", "mountPath": "/data", "readOnly": True}]
    kubectl_apply(stack, with_volumes(reader, vols, mounts))
    p = until("reader done", phase_is(stack, ns, "reader", "Succeeded", "Failed"))
    log = kubectl(stack, "logs", "-n", ns, "reader").stdout
    assert log.startswith("written-by-writer\n")
    assert "Read-only file system" in log and p["status"]["phase"] == "Failed"
    assert not (host_dir / "other").exists()


def test_shm_configmap_secret_and_exec_see_the_same_mounts(
    stack: StackContext,  # noqa: F811
    ns: str,
) -> None:
    kubectl_apply(
        stack,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "conf", "namespace": ns},
            "data": {"a.txt": "alpha", "b.txt": "beta"},
        },
    )
    kubectl_apply(
        stack,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds", "namespace": ns},
            "stringData": {"user": "u1", "pass": "p1"},
        },
    )
    vols = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "96Mi"}},
        {
            "name": "conf",
            "configMap": {"name": "conf", "items": [{"key": "b.txt", "path": "sub/b"}]},
        },
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {"name": "scratch", "emptyDir": {}},
    ]
    mounts = [
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "conf", "mountPath": "/etc/tjm-test/conf"},
        {"name": "creds", "mountPath": "/etc/tjm-test/creds", "readOnly": True},
        {"name": "scratch", "mountPath": "/tmp/tjm-test-scratch"},
    ]
    command = ["sh", "-c", "echo from-main > /dev/shm/marker; exec sleep 3600"]
    kubectl_apply(stack, with_volumes(pod("mounts", ns, command), vols, mounts))
    p = ready(stack, ns, "mounts")
    # the size asked for, on a tmpfs of the pod's own
    df = exec_out(stack, ns, "mounts", "df", "-k", "/dev/shm").splitlines()[-1].split()
    assert df[0] == "tmpfs" and int(df[1]) == 96 * 1024, df
    # what the main command wrote there (exec is in the same namespace), not on the host
    marker = exec_out(
        stack,
        ns,
        "mounts",
        "sh",
        "-c",
        "until [ -s /dev/shm/marker ]; do sleep 0.05; done; cat /dev/shm/marker",
    )
    assert marker == "from-main\n"
    assert not Path("/dev/shm/marker").exists()
    # ConfigMap items, Secret keys with their mode, read-only
    assert exec_out(stack, ns, "mounts", "cat", "/etc/tjm-test/conf/sub/b") == "beta"
    assert exec_out(stack, ns, "mounts", "ls", "/etc/tjm-test/conf").split() == ["sub"]
    out = exec_out(
        stack,
        ns,
        "mounts",
        "sh",
        "-c",
        "cd /etc/tjm-test/creds && cat user pass && stat -L -c %a user",
    )
    assert out == "u1p1400\n"
    fails = kubectl(
        stack,
        "exec",
        "-n",
        ns,
        "mounts",
        "--",
        "sh",
        "-c",
        "echo x > /etc/tjm-test/creds/new",
        check=False,
    )
    assert fails.returncode != 0 and "Read-only file system" in fails.stderr
    # a disk emptyDir is the kubelet's directory in the pod's folder
    exec_out(stack, ns, "mounts", "sh", "-c", "echo s > /tmp/tjm-test-scratch/f")
    d = pod_dir(stack, p)
    assert (d / "volumes" / "kubernetes.io~empty-dir" / "scratch" / "f").read_text() == "s\n"
    # the secret's files are on a tmpfs of the pod: not on the host's disk
    assert not any((d / "volumes" / "kubernetes.io~secret" / "creds").iterdir())
    conds = {c["type"]: c["status"] for c in p["status"]["conditions"]}
    assert conds["PodReadyToStartContainers"] == "True"


def test_the_service_account_token_is_mounted_and_works(
    stack: StackContext,  # noqa: F811
    ns: str,
) -> None:
    kubectl(stack, "create", "serviceaccount", "-n", ns, "reader")
    p = pod("sa", ns, ["sleep", "3600"])
    p["spec"]["serviceAccountName"] = "reader"
    kubectl_apply(stack, p)
    p = ready(stack, ns, "sa")
    files = exec_out(stack, ns, "sa", "ls", SA_DIR).split()
    assert files == ["ca.crt", "namespace", "token"]
    assert exec_out(stack, ns, "sa", "cat", f"{SA_DIR}/namespace") == ns
    # kubectl's in-cluster config (the token and ca.crt at that path, KUBERNETES_SERVICE_*)
    who = exec_out(
        stack, ns, "sa", "kubectl", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"
    )
    assert who == f"system:serviceaccount:{ns}:reader"
    extra = exec_out(
        stack, ns, "sa", "kubectl", "auth", "whoami", "-o", "jsonpath={.status.userInfo.extra}"
    )
    assert p["metadata"]["uid"] in extra  # bound to this pod

    q = pod("nosa", ns, ["sleep", "3600"])
    q["spec"]["automountServiceAccountToken"] = False
    kubectl_apply(stack, q)
    q = ready(stack, ns, "nosa")
    assert not q["spec"].get("volumes")
    # (the empty mount point may exist on the host: other pods' token is mounted on it)
    missing = kubectl(stack, "exec", "-n", ns, "nosa", "--", "cat", f"{SA_DIR}/token", check=False)
    assert missing.returncode != 0 and "No such file" in missing.stderr
    assert not (pod_dir(stack, q) / "ns.json").exists()  # nothing mounted: no namespace


def test_a_changed_configmap_reaches_the_mounted_files(
    stack: StackContext,  # noqa: F811
    ns: str,
) -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "live", "namespace": ns},
        "data": {"setting": "one"},
    }
    kubectl_apply(stack, cm)
    vols = [{"name": "live", "configMap": {"name": "live"}}]
    p = pod("watcher", ns, ["sleep", "3600"])
    kubectl_apply(stack, with_volumes(p, vols, [{"name": "live", "mountPath": "/etc/tjm-live"}]))
    ready(stack, ns, "watcher")
    assert exec_out(stack, ns, "watcher", "cat", "/etc/tjm-live/setting") == "one"
    cm["data"] = {"setting": "two", "added": "yes"}
    kubectl_apply(stack, cm)

    def updated() -> Any:
        out = exec_out(
            stack, ns, "watcher", "sh", "-c", "cat /etc/tjm-live/setting; ls /etc/tjm-live"
        )
        return out if out.startswith("two") else None

    assert until("the new content in the pod", updated, timeout=90).split() == [
        "twoadded",
        "setting",
    ]


def test_a_missing_secret_is_a_failed_mount_until_it_appears(
    stack: StackContext,  # noqa: F811
    ns: str,
) -> None:
    vols = [{"name": "v", "secret": {"secretName": "later"}}]
    p = pod("waits", ns, ["sleep", "3600"])
    kubectl_apply(stack, with_volumes(p, vols, [{"name": "v", "mountPath": "/etc/tjm-later"}]))
    want = 'MountVolume.SetUp failed for volume "v" : secret "later" not found'

    def failed_mount() -> Any:
        return next((e for e in events(stack, ns, "waits") if e["reason"] == "FailedMount"), None)

    ev = until("a FailedMount Event", failed_mount)
    assert ev["message"] == want and ev["type"] == "Warning"
    assert ev["source"]["component"] == "kubelet"
    p = get(stack, "pod", "-n", ns, "waits")
    assert p["status"]["phase"] == "Pending"
    waiting = p["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ContainerCreating"
    kubectl(stack, "create", "secret", "generic", "-n", ns, "later", "--from-literal=k=v")
    ready(stack, ns, "waits")
    assert exec_out(stack, ns, "waits", "cat", "/etc/tjm-later/k") == "v"


def test_a_missing_env_from_secret_is_a_create_container_config_error(
    stack: StackContext,  # noqa: F811
    ns: str,
) -> None:
    p = pod("noenv", ns, ["sleep", "3600"], envFrom=[{"secretRef": {"name": "absent"}}])
    kubectl_apply(stack, p)

    def config_error() -> Any:
        st = get(stack, "pod", "-n", ns, "noenv")["status"]
        w = (st.get("containerStatuses") or [{}])[0].get("state", {}).get("waiting", {})
        return w if w.get("reason") == "CreateContainerConfigError" else None

    w = until("CreateContainerConfigError", config_error)
    assert w["message"] == 'secret "absent" not found'
    ev = until(
        "the Failed Event",
        lambda: next((e for e in events(stack, ns, "noenv") if e["reason"] == "Failed"), None),
    )
    assert ev["message"] == 'Error: secret "absent" not found'


def test_deleting_a_pod_ends_every_process_of_its_namespace(
    stack: StackContext,  # noqa: F811
    ns: str,
) -> None:
    vols = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    p = pod("gone", ns, ["sleep", "3600"], restart="Always", grace=1)
    kubectl_apply(stack, with_volumes(p, vols, [{"name": "shm", "mountPath": "/dev/shm"}]))
    p = ready(stack, ns, "gone")
    info = json.loads((pod_dir(stack, p) / "ns.json").read_text())
    # a process that leaves the pod's session and environment: still in its namespace
    out = exec_out(
        stack, ns, "gone", "sh", "-c", "env -i setsid sleep 3602 >/dev/null 2>&1 & echo $!"
    )
    pid = int(out.split()[-1])
    until("the escaped process to start", lambda: _alive(pid), timeout=5)
    assert os.readlink(f"/proc/{pid}/ns/mnt") == info["mnt"]
    assert _alive(info["holder"])
    kubectl(stack, "delete", "pod", "-n", ns, "gone", "--wait=true", timeout=60)
    until("the escaped process to end", lambda: not _alive(pid), timeout=10)
    # no process is left in the namespace: it and its mounts are gone
    until("the namespace to end", lambda: not in_namespace(info["mnt"]), timeout=10)


def test_a_restarted_pod_runner_keeps_the_namespaces(
    stack: StackContext,  # noqa: F811
    ns: str,
) -> None:
    vols = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "80Mi"}}]
    script = "echo $$$$ >> /dev/shm/pids; exec sleep 3600"  # the kubelet turns $$ into $
    p = pod("kept", ns, ["sh", "-c", script], restart="Always")
    kubectl_apply(stack, with_volumes(p, vols, [{"name": "shm", "mountPath": "/dev/shm"}]))
    p = ready(stack, ns, "kept")
    info = json.loads((pod_dir(stack, p) / "ns.json").read_text())
    ready_file = stack.run / "podrunner" / "ready"
    ready_file.unlink(missing_ok=True)  # the new runner writes it after its first sync
    procs.restart(stack.run, "podrunner")
    procs.wait_for("the pod runner's sync", ready_file.exists, timeout=60)
    assert _alive(info["holder"])

    def pids() -> list[str]:
        return exec_out(stack, ns, "kept", "cat", "/dev/shm/pids").split()

    first = until("the first run's pid", pids)
    df = exec_out(stack, ns, "kept", "df", "-k", "/dev/shm").splitlines()[-1].split()
    assert int(df[1]) == 80 * 1024
    # the container, restarted by the new runner, starts in the same namespace: its pid lands
    # in the same tmpfs, beside the first run's (an emptyDir outlives its containers)
    exec_out(stack, ns, "kept", "kill", first[0])
    both = until("the restarted run's pid", lambda: len(pids()) == 2 and pids())
    assert both[0] == first[0] != both[1]
    cs = get(stack, "pod", "-n", ns, "kept")["status"]["containerStatuses"][0]
    assert cs["restartCount"] == 1


def test_trainers_mpi_volumes_are_mounted(stack: StackContext, ns: str) -> None:  # noqa: F811
    """The MPI plugin's hostfile ConfigMap and ssh Secret, as the deepspeed runtime's pods
    mount them (Trainer makes both; the pod runner mounts them)."""
    runtime = "deepspeed-distributed"
    got = kubectl(stack, "get", "clustertrainingruntime", runtime, check=False)
    if got.returncode != 0:
        _missing(f"the ClusterTrainingRuntime {runtime} (Trainer's runtimes) is not installed")
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "mpi", "namespace": ns},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": 2}},
    }
    kubectl_apply(stack, job)
    selector = "jobset.sigs.k8s.io/jobset-name=mpi,jobset.sigs.k8s.io/replicatedjob-name=launcher"

    def launcher() -> Any:
        items = get(stack, "pods", "-n", ns, "-l", selector)["items"]
        return items[0]["metadata"]["name"] if items else None

    name = until("the launcher pod", launcher, timeout=120)
    ready(stack, ns, name)
    spec = get(stack, "pod", "-n", ns, name)["spec"]
    mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert "/etc/mpi" in mounts, mounts
    hostfile = exec_out(stack, ns, name, "cat", "/etc/mpi/hostfile")
    assert hostfile.count("slots=") == 2, hostfile
    ssh = next(m for m in mounts if m.endswith("/.ssh"))
    keys = exec_out(stack, ns, name, "ls", ssh).split()
    assert "authorized_keys" in keys, keys
    kubectl(stack, "delete", "trainjob", "-n", ns, "mpi", "--wait=false")


def test_the_upstream_components_report_the_other_mistakes(
    stack: StackContext,  # noqa: F811
    ns: str,
) -> None:
    """Not the pod runner's: the scheduler, the ServiceAccount admission and the Job
    controller say these (the messages the engine turns into one line)."""
    vols = [{"name": "d", "persistentVolumeClaim": {"claimName": "nosuch"}}]
    kubectl_apply(stack, with_volumes(pod("nopvc", ns, ["true"]), vols, []))
    nosel = pod("nosel", ns, ["true"])
    nosel["spec"]["nodeSelector"] = {"pool": "gpu-nowhere"}
    kubectl_apply(stack, nosel)

    def unschedulable(name: str):
        def check() -> Any:
            conds = get(stack, "pod", "-n", ns, name)["status"].get("conditions", [])
            c = next((c for c in conds if c["type"] == "PodScheduled"), None)
            return c if c and c.get("reason") == "Unschedulable" else None

        return check

    c = until("nopvc Unschedulable", unschedulable("nopvc"))
    assert 'persistentvolumeclaim "nosuch" not found' in c["message"]
    c = until("nosel Unschedulable", unschedulable("nosel"))
    assert "didn't match Pod's node affinity/selector" in c["message"]

    bad = pod("nosa-direct", ns, ["true"])
    bad["spec"]["serviceAccountName"] = "nosuch"
    env = {**os.environ, "KUBECONFIG": str(stack.admin_kubeconfig)}
    refused = subprocess.run(
        ["kubectl", "create", "-f", "-"],
        input=json.dumps(bad),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert 'serviceaccount "nosuch" not found' in refused.stderr
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "nosa", "namespace": ns},
        "spec": {"template": {"spec": {**bad["spec"], "restartPolicy": "Never"}}},
    }
    kubectl_apply(stack, job)

    def failed_create() -> Any:
        return next((e for e in events(stack, ns, "nosa") if e["reason"] == "FailedCreate"), None)

    ev = until("the Job's FailedCreate Event", failed_create)
    assert 'serviceaccount "nosuch" not found' in ev["message"]
