"""PersistentVolumes for the real stack's claims, as an external provisioner makes them.

The stack's default StorageClass (``fixtures.STORAGE_CLASS``) names the provisioner
``realstack.trainjob-magics/local``. kube-controller-manager's PV controller marks each claim
of that class ``volume.kubernetes.io/storage-provisioner: <it>`` and waits; this provisioner
(run inside the pod runner, which already watches the API) then creates a PV ``pvc-<uid>``: a
``hostPath`` directory ``RUN/volumes/pvc-<uid>`` with the claim's size and access modes,
``pv.kubernetes.io/provisioned-by`` and a ``claimRef``, and the PV controller binds the two.
A Released PV of reclaim policy ``Delete`` loses its directory and is deleted (as
sigs.k8s.io/sig-storage-lib-external-provisioner does); ``Retain`` keeps both. The
directories outlive the pods that mount them.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROVISIONER = "realstack.trainjob-magics/local"
ANN_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_PROVISIONER_BETA = "volume.beta.kubernetes.io/storage-provisioner"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


class Provisioner:
    def __init__(self, api: Any, run: Path, event: Callable[..., None], log: Callable) -> None:
        self.api, self.root, self.event, self.log = api, run / "volumes", event, log
        self.classes: dict[str, tuple[float, dict | None]] = {}
        self.done: set[str] = set()

    def _class(self, name: str) -> dict | None:
        cached = self.classes.get(name)
        if cached and time.monotonic() - cached[0] < 30:
            return cached[1]
        sc = self.api.get(f"/apis/storage.k8s.io/v1/storageclasses/{name}", ok404=True)
        self.classes[name] = (time.monotonic(), sc)
        return sc

    def on_claim(self, pvc: dict) -> None:
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        ann = meta.get("annotations") or {}
        ours = PROVISIONER in (ann.get(ANN_PROVISIONER), ann.get(ANN_PROVISIONER_BETA))
        if not ours or spec.get("volumeName") or meta.get("deletionTimestamp"):
            return
        if (pvc.get("status") or {}).get("phase", "Pending") != "Pending":
            return
        uid = meta["uid"]
        if uid in self.done:
            return
        name = f"pvc-{uid}"
        sc = self._class(spec.get("storageClassName") or "") or {}
        involved = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": uid,
        }
        if spec.get("volumeMode") == "Block":
            self.event(
                involved,
                "Warning",
                "ProvisioningFailed",
                "failed to provision volume: block volumes are not supported by the real stack",
                PROVISIONER,
            )
            self.done.add(uid)
            return
        path = self.root / name
        path.mkdir(mode=0o777, parents=True, exist_ok=True)
        path.chmod(0o777)
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {ANN_PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": storage},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
                "storageClassName": spec.get("storageClassName") or "",
                "volumeMode": "Filesystem",
                "mountOptions": sc.get("mountOptions") or [],
                "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                "claimRef": {**involved, "resourceVersion": meta.get("resourceVersion", "")},
            },
        }
        from devtools.realstack.kubeapi import ApiError

        try:
            self.api.request("POST", "/api/v1/persistentvolumes", pv)
        except ApiError as e:
            if e.status != 409:
                self.log(f"provisioner: {meta['namespace']}/{meta['name']}: {e}")
                return
        self.done.add(uid)
        self.event(
            involved,
            "Normal",
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {name}",
            PROVISIONER,
        )
        self.log(f"provisioner: {meta['namespace']}/{meta['name']} -> {name} ({path})")

    def on_volume(self, pv: dict) -> None:
        meta, spec = pv["metadata"], pv.get("spec") or {}
        if (meta.get("annotations") or {}).get(ANN_PROVISIONED_BY) != PROVISIONER:
            return
        if (pv.get("status") or {}).get("phase") != "Released":
            return
        if spec.get("persistentVolumeReclaimPolicy") != "Delete" or meta.get("deletionTimestamp"):
            return
        path = Path((spec.get("hostPath") or {}).get("path") or "")
        if path.parent == self.root:  # only what this provisioner made
            shutil.rmtree(path, ignore_errors=True)
        self.api.request("DELETE", f"/api/v1/persistentvolumes/{meta['name']}", ok404=True)
        self.log(f"provisioner: released {meta['name']} deleted with its directory")


# --- a process of its own, beside the real node --------------------------------------------------


def _post_event(api: Any, involved: dict, typ: str, reason: str, message: str, source: str) -> None:
    ns = involved.get("namespace") or "default"
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": ns},
        "involvedObject": involved,
        "type": typ,
        "reason": reason,
        "message": message,
        "source": {"component": source},
        "reportingComponent": source,
    }
    api.request("POST", f"/api/v1/namespaces/{ns}/events", event)


def serve(run: Path, interval: float = 0.5) -> None:
    """List claims and volumes every ``interval`` and act on them, until killed."""
    from devtools.realstack.kubeapi import KubeApi

    api = KubeApi(run / "admin.kubeconfig")

    def log(msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)

    def event(*args: Any) -> None:
        try:
            _post_event(api, *args)
        except Exception as e:  # an event is best effort
            log(f"event: {e}")

    prov = Provisioner(api, run, event, log)
    (run / "provisioner.ready").write_text("")
    while True:
        for path, on in (
            ("/api/v1/persistentvolumeclaims", prov.on_claim),
            ("/api/v1/persistentvolumes", prov.on_volume),
        ):
            try:
                items = api.get(path).get("items", [])
            except Exception as e:
                log(f"list {path}: {e}")
                continue
            for item in items:
                try:
                    on(item)
                except Exception as e:
                    log(f"provisioner: {item['metadata']['name']}: {e}")
        time.sleep(interval)


def start(ctx: Any) -> None:
    """Run ``serve`` as the stack's process ``provisioner``."""
    import os
    import sys

    from devtools.realstack import procs

    root = Path(__file__).resolve().parents[2]
    ready = ctx.run / "provisioner.ready"
    ready.unlink(missing_ok=True)
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    }
    procs.start(
        ctx.run,
        "provisioner",
        [sys.executable, "-m", "devtools.realstack.provisioner", str(ctx.run)],
        env=env,
        cwd=root,
    )
    procs.wait_for("the provisioner", ready.exists, timeout=60, run=ctx.run, name="provisioner")


def stop(ctx: Any) -> None:
    from devtools.realstack import procs

    procs.stop(ctx.run, "provisioner")


if __name__ == "__main__":
    import sys

    serve(Path(sys.argv[1]))
