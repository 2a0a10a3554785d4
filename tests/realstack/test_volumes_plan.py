"""The pod runner's volume plans and mount namespaces (devtools/realstack/podvolumes.py), without
a stack: the kubelet's payloads and errors, and a real namespace where this machine allows one."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from devtools.realstack import podvolumes as pv

POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"a": "1"}},
    "spec": {
        "nodeName": "node-0",
        "serviceAccountName": "sa",
        "containers": [{"name": "c", "resources": {"limits": {"memory": "1Gi"}}}],
    },
}


class FakeApi:
    def __init__(self, objs: dict[str, dict]) -> None:
        self.objs, self.posts = objs, []

    def get(self, path: str, ok404: bool = False):
        return self.objs.get(path)

    def request(self, method: str, path: str, body=None, **kw):
        self.posts.append((method, path, body))
        return {"status": {"token": "tok-123"}}


def resolver(objs: dict, volumes: list, mounts: list, tmp: Path) -> pv.Resolver:
    pod = {**POD, "spec": {**POD["spec"], "volumes": volumes}}
    pod["spec"]["containers"] = [{**POD["spec"]["containers"][0], "volumeMounts": mounts}]
    return pv.Resolver(
        FakeApi(objs), pod, tmp, allocatable={"memory": "128Gi"}, env_of=lambda c: {}
    )


def files_of(plan: pv.Plan, volume: str) -> dict[str, tuple[bytes, int]]:
    entry = next(f for f in plan.files if f["volume"] == volume)
    return {k: (base64.b64decode(v), m) for k, v, m in entry["files"]}


CM = "/api/v1/namespaces/ns/configmaps/"
SECRET = "/api/v1/namespaces/ns/secrets/"


def test_configmap_items_and_modes(tmp_path: Path) -> None:
    objs = {CM + "cm": {"data": {"a": "1", "b": "2"}}}
    vols = [
        {"name": "all", "configMap": {"name": "cm"}},
        {
            "name": "some",
            "configMap": {
                "name": "cm",
                "defaultMode": 0o600,
                "items": [{"key": "b", "path": "x/b"}, {"key": "a", "path": "a", "mode": 0o755}],
            },
        },
    ]
    mounts = [{"name": "all", "mountPath": "/etc/all"}, {"name": "some", "mountPath": "/etc/s"}]
    plan = resolver(objs, vols, mounts, tmp_path).plan()
    assert files_of(plan, "all") == {"a": (b"1", 0o644), "b": (b"2", 0o644)}
    assert files_of(plan, "some") == {"x/b": (b"2", 0o600), "a": (b"1", 0o755)}
    assert [(b["target"], b["ro"]) for b in plan.binds] == [("/etc/all", False), ("/etc/s", False)]
    assert not plan.tmpfs  # a ConfigMap is on disk, as the kubelet keeps it


def test_the_kubelets_errors(tmp_path: Path) -> None:
    objs = {SECRET + "s": {"data": {"k": base64.b64encode(b"v").decode()}}}
    vols = [
        {"name": "v", "secret": {"secretName": "gone"}},
        {"name": "w", "configMap": {"name": "gone"}},
        {"name": "x", "secret": {"secretName": "s", "items": [{"key": "nokey", "path": "p"}]}},
        {"name": "y", "secret": {"secretName": "gone", "optional": True}},
        {
            "name": "z",
            "projected": {"sources": [{"configMap": {"name": "c1"}}, {"secret": {"name": "s1"}}]},
        },
        {"name": "h", "hostPath": {"path": str(tmp_path / "nodir"), "type": "Directory"}},
    ]
    with pytest.raises(pv.MountFailures) as err:
        resolver(objs, vols, [], tmp_path).plan()
    assert err.value.failures == [
        ("v", 'secret "gone" not found'),
        ("w", 'configmap "gone" not found'),
        ("x", "references non-existent secret key: nokey"),
        ("z", '[configmap "c1" not found, secret "s1" not found]'),
        ("h", f"hostPath type check failed: {tmp_path / 'nodir'} is not a directory"),
    ]


def test_service_account_token_and_shm_size(tmp_path: Path) -> None:
    objs = {CM + "kube-root-ca.crt": {"data": {"ca.crt": "CA"}}}
    vols = [
        {
            "name": "api",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ],
            },
        },
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}},
        {"name": "big", "emptyDir": {"medium": "Memory"}},
    ]
    r = resolver(objs, vols, [{"name": "api", "mountPath": "/var/run/secrets/x"}], tmp_path)
    plan = r.plan()
    assert files_of(plan, "api") == {
        "token": (b"tok-123", 0o644),
        "ca.crt": (b"CA", 0o644),
        "namespace": (b"ns", 0o644),
    }
    method, path, body = r.api.posts[0]
    assert (method, path) == ("POST", "/api/v1/namespaces/ns/serviceaccounts/sa/token")
    assert body["spec"]["boundObjectRef"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "uid": "u-1",
    }
    assert body["spec"]["expirationSeconds"] == 3607
    sizes = {t["volume"]: t["size"] for t in plan.tmpfs}
    assert sizes["shm"] == 256 * 2**20
    assert sizes["big"] == 2**30  # no sizeLimit: the pod's memory limit
    assert sizes["api"] is None


def test_refresh_plan_and_sync_state(tmp_path: Path) -> None:
    objs = {
        CM + "cm": {"metadata": {"resourceVersion": "7"}, "data": {"a": "1"}},
        CM + "kube-root-ca.crt": {"metadata": {"resourceVersion": "3"}, "data": {"ca.crt": "CA"}},
    }
    vols = [
        {"name": "c", "configMap": {"name": "cm"}},
        {"name": "e", "emptyDir": {"medium": "Memory"}},
        {
            "name": "api",
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 600, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt"}},
                ]
            },
        },
    ]
    r = resolver(objs, vols, [{"name": "c", "mountPath": "/etc/c"}], tmp_path)
    r.plan()
    assert r.sync_state(5.0) == {
        "c": {"refs": {"configmaps/cm": "7"}, "ttl": 0, "at": 5.0},
        "api": {"refs": {"configmaps/kube-root-ca.crt": "3"}, "ttl": 600, "at": 5.0},
    }
    again = resolver(objs, vols, [], tmp_path).refresh_plan({"c"})
    assert not again.tmpfs and not again.binds and [f["volume"] for f in again.files] == ["c"]


def test_atomic_writer_swaps_data(tmp_path: Path) -> None:
    enc = pv._encode
    pv.write_payload(tmp_path, enc({"a": (b"1", 0o644), "d/b": (b"2", 0o600)}))
    assert (tmp_path / "a").read_text() == "1" and (tmp_path / "d" / "b").read_text() == "2"
    first = os.readlink(tmp_path / "..data")
    pv.write_payload(tmp_path, enc({"a": (b"3", 0o644)}))
    assert (tmp_path / "a").read_text() == "3" and not (tmp_path / "d").exists()
    assert os.readlink(tmp_path / "..data") != first and not (tmp_path / first).exists()


def _can_unshare() -> str | None:
    if os.geteuid() != 0:
        return "mount namespaces need root"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    r = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    return None if r.returncode == 0 else f"unshare --mount refused: {r.stderr.decode()[:200]}"


def test_a_namespace_holds_the_mounts_and_ends_with_its_holder(tmp_path: Path) -> None:
    why = _can_unshare()
    if why:
        pytest.skip(why)
    pod_dir = tmp_path / "pod"
    pod_dir.mkdir()
    holder = pv.start_holder(pod_dir, {"TRAINJOB_REALSTACK_POD_UID": "test"})
    try:
        info = pv.read_ns(pod_dir)
        assert info["holder"] == holder.pid and pv.holder_alive(pod_dir) == holder.pid
        shm = pod_dir / "volumes" / "shm"
        target = tmp_path / "mnt" / "shm"
        plan = pv.Plan(
            tmpfs=[{"path": str(shm), "size": 8 * 2**20, "mode": 0o777, "volume": "shm"}],
            files=[{"dir": str(shm), "files": pv._encode({"f": (b"hi", 0o644)}), "volume": "shm"}],
            binds=[
                {
                    "source": str(shm),
                    "target": str(target),
                    "ro": True,
                    "sub": False,
                    "volume": "shm",
                }
            ],
        )
        pv.apply(holder.pid, plan)
        inside = subprocess.run(
            [
                "nsenter",
                f"--mount=/proc/{holder.pid}/ns/mnt",
                "--",
                "sh",
                "-c",
                f"cat {target}/f; echo; df -k {target} | tail -1; touch {target}/x",
            ],
            capture_output=True,
            text=True,
        )
        lines = inside.stdout.splitlines()
        assert lines[0] == "hi" and int(lines[1].split()[1]) == 8 * 1024
        assert "Read-only file system" in inside.stderr
        assert target.is_dir() and not any(target.iterdir())  # the host sees the empty point
        assert not os.path.ismount(target)
        bad = pv.Plan(
            binds=[
                {
                    "source": str(tmp_path / "none"),
                    "target": str(target / "y"),
                    "ro": False,
                    "sub": False,
                    "volume": "broken",
                }
            ]
        )
        with pytest.raises(pv.MountFailures) as err:
            pv.apply(holder.pid, bad)
        assert err.value.failures[0][0] == "broken"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert pv.holder_alive(pod_dir) is None
