"""A pod's volumes, mounted as a kubelet mounts them, for the real stack's pod runner.

Each pod that mounts anything gets a mount namespace of its own, held by a small process
(``unshare --mount --propagation private sleep infinity``, its pid and namespace in
``POD_DIR/ns.json``): its containers start in it, the node agent's execs enter it, and it ends
with the pod's last process (its mounts go with it: nothing is ever mounted on the host).

Volumes live where a kubelet keeps them, ``POD_DIR/volumes/kubernetes.io~<plugin>/<name>``:

- ``persistentVolumeClaim``, ``ephemeral``: the bound PV's ``hostPath``/``local`` directory;
- ``hostPath``: the path (``type`` checked or created as the kubelet does);
- ``emptyDir``: a directory; ``medium: Memory`` is a tmpfs of ``sizeLimit`` (else the pod's
  memory limit, else the node's allocatable memory);
- ``configMap`` (a directory), ``secret``, ``projected`` and ``downwardAPI`` (a tmpfs): files
  in the kubelet's atomic-writer layout (``..data`` -> ``..<timestamp>``, one symlink per
  key), ``items``, ``defaultMode`` and per-item modes honoured; ``serviceAccountToken``
  sources are TokenRequests bound to the pod. The runner writes them again when an object
  changes or a token nears its expiry (``refresh_plan``, ``sync_state``).

Then each container's ``volumeMounts`` (``subPath``, ``subPathExpr``, ``readOnly``) become
bind mounts at their paths inside the namespace. The mount points are created on the host's
filesystem if missing (empty directories or files; what is mounted on them is seen only in
the pod). The mounting runs inside the namespace (``nsenter --mount=... python -m
devtools.realstack.podvolumes mount``), its plan on stdin: tokens and secret data never touch
the host's disk or the logs.

Errors are the kubelet's (``pkg/volume/secret/secret.go``, ``configmap/configmap.go``,
``projected/projected.go``, ``hostpath/host_path.go`` and
``util/operationexecutor/operation_executor.go`` of k8s.io/kubernetes v1.36.3): the runner
turns each into a ``FailedMount`` Event ``MountVolume.SetUp failed for volume "v" : <error>``.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ENV_HOLDER = "TRAINJOB_REALSTACK_NS_HOLDER"
NS_FILE = "ns.json"
DEFAULT_MODE = 0o644  # SecretVolumeSourceDefaultMode, ConfigMapVolumeSourceDefaultMode
SERVICE_ACCOUNT_TOKEN_EXPIRATION = 3600

# mount(2) flags
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384


class MountFailures(Exception):
    """Volumes that cannot be set up yet: ``(volume name, the kubelet's error)`` each."""

    def __init__(self, failures: list[tuple[str, str]]) -> None:
        self.failures = failures
        super().__init__("; ".join(f"{v}: {m}" for v, m in failures))


@dataclass
class Plan:
    """What to do inside the pod's namespace: tmpfs mounts, file payloads, bind mounts."""

    tmpfs: list[dict] = field(default_factory=list)  # {path, size, mode, volume}
    files: list[dict] = field(default_factory=list)  # {dir, files: [[rel, b64, mode]], volume}
    binds: list[dict] = field(default_factory=list)  # {source, target, ro, file, volume}
    dirs: list[str] = field(default_factory=list)  # host directories made before (emptyDir)

    def to_json(self) -> dict:
        return {"tmpfs": self.tmpfs, "files": self.files, "binds": self.binds}


# --------------------------------------------------------------------------------------------
# Resolving a pod's volumes (in the runner)
# --------------------------------------------------------------------------------------------


def _plugin_dir(pod_dir: Path, plugin: str, name: str) -> Path:
    return pod_dir / "volumes" / f"kubernetes.io~{plugin}" / name


def _mode(value: Any, default: int) -> int:
    return int(value) if value is not None else default


def _object_payload(
    kind: str, obj: dict | None, name: str, items: list | None, mode: int, optional: bool
) -> dict[str, tuple[bytes, int]]:
    """MakePayload of pkg/volume/{secret,configmap}: every key, or the ``items``."""
    if obj is None:
        if optional:
            return {}
        raise ValueError(f'{kind.lower()} "{name}" not found')
    if kind == "Secret":
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    else:
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    if not items:
        return {k: (v, mode) for k, v in data.items()}
    out = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            if kind == "Secret":
                raise ValueError(f"references non-existent secret key: {item['key']}")
            raise ValueError(f"configmap references non-existent config key: {item['key']}")
        out[item["path"]] = (data[item["key"]], _mode(item.get("mode"), mode))
    return out


def _downward_payload(
    pod: dict, items: list, mode: int, allocatable: dict
) -> dict[str, tuple[bytes, int]]:
    from devtools.realstack.podrunner import field_ref, resource_ref

    out = {}
    for item in items or []:
        if "fieldRef" in item:
            value = field_ref(pod, item["fieldRef"]["fieldPath"])
        else:
            ref = item["resourceFieldRef"]
            containers = pod["spec"].get("containers") or []
            container = next(
                (c for c in containers if c["name"] == ref.get("containerName")),
                containers[0] if containers else {"name": ""},
            )
            value = resource_ref(pod, container, ref, allocatable)
        out[item["path"]] = (value.encode(), _mode(item.get("mode"), mode))
    return out


def _memory_size(pod: dict, volume: dict, allocatable: dict) -> int:
    """A memory-backed emptyDir's size: sizeLimit, else the pod's memory limit, else the
    node's allocatable memory (pkg/volume/emptydir: calculateEmptyDirMemorySize)."""
    from devtools.realstack.podrunner import quantity

    node = quantity(allocatable.get("memory", "0"))
    limits = [
        (c.get("resources") or {}).get("limits", {}).get("memory")
        for c in pod["spec"].get("containers") or []
    ]
    size = node
    if limits and all(limits):
        size = min(size, sum(quantity(x) for x in limits)) if size else sum(map(quantity, limits))
    limit = (volume.get("emptyDir") or {}).get("sizeLimit")
    if limit:
        size = min(size, quantity(limit)) if size else quantity(limit)
    return int(size) or 64 * 2**20


class Resolver:
    """Turns a pod's volumes into a Plan, reading the API as the kubelet's volume plugins do."""

    def __init__(
        self,
        api: Any,
        pod: dict,
        pod_dir: Path,
        *,
        allocatable: dict,
        env_of: Callable[[dict], dict[str, str]],
    ) -> None:
        self.api, self.pod, self.dir = api, pod, pod_dir
        self.ns = pod["metadata"]["namespace"]
        self.allocatable = allocatable
        self.env_of = env_of
        self._cache: dict[tuple[str, str], dict | None] = {}
        self._current = ""  # the volume being resolved
        # per file volume: the objects it was made from ("plural/name" -> resourceVersion,
        # "" when missing) and its token's lifetime: what sync_state() hands the runner
        self.refs: dict[str, dict[str, str]] = {}
        self.ttls: dict[str, int] = {}
        self.file_volumes: list[str] = []

    def _get(self, plural: str, name: str) -> dict | None:
        key = (plural, name)
        if key not in self._cache:
            self._cache[key] = self.api.get(
                f"/api/v1/namespaces/{self.ns}/{plural}/{name}", ok404=True
            )
        obj = self._cache[key]
        rv = ((obj or {}).get("metadata") or {}).get("resourceVersion", "")
        self.refs.setdefault(self._current, {})[f"{plural}/{name}"] = rv
        return obj

    def _token(self, source: dict) -> bytes:
        meta = self.pod["metadata"]
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "expirationSeconds": int(
                source.get("expirationSeconds") or SERVICE_ACCOUNT_TOKEN_EXPIRATION
            ),
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        }
        if source.get("audience"):
            spec["audiences"] = [source["audience"]]
        self.ttls[self._current] = spec["expirationSeconds"]
        from devtools.realstack.podrunner import ApiError

        try:
            out = self.api.request(
                "POST",
                f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
            )
        except ApiError as e:
            msg = e.body.get("message") if isinstance(e.body, dict) else str(e.body)
            raise ValueError(msg or f"TokenRequest failed: HTTP {e.status}") from None
        return out["status"]["token"].encode()

    def _projected(self, src: dict) -> dict[str, tuple[bytes, int]]:
        mode = _mode(src.get("defaultMode"), DEFAULT_MODE)
        payload: dict[str, tuple[bytes, int]] = {}
        errors: list[str] = []
        for source in src.get("sources") or []:
            try:
                if "secret" in source or "configMap" in source:
                    kind = "Secret" if "secret" in source else "ConfigMap"
                    ref = source.get("secret") or source.get("configMap")
                    plural = "secrets" if kind == "Secret" else "configmaps"
                    obj = self._get(plural, ref["name"])
                    payload.update(
                        _object_payload(
                            kind,
                            obj,
                            ref["name"],
                            ref.get("items"),
                            mode,
                            bool(ref.get("optional")),
                        )
                    )
                elif "downwardAPI" in source:
                    payload.update(
                        _downward_payload(
                            self.pod, source["downwardAPI"].get("items"), mode, self.allocatable
                        )
                    )
                elif "serviceAccountToken" in source:
                    tok = source["serviceAccountToken"]
                    payload[tok["path"]] = (self._token(tok), mode)
                else:
                    errors.append(f"projection {sorted(source)} is not supported by the real stack")
            except ValueError as e:
                errors.append(str(e))
        if errors:
            raise ValueError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
        return payload

    def _pv_path(self, claim: str) -> str:
        pvc = self._get("persistentvolumeclaims", claim)
        if pvc is None:
            raise ValueError(f'persistentvolumeclaim "{claim}" not found')
        pv_name = (pvc.get("spec") or {}).get("volumeName")
        if not pv_name or (pvc.get("status") or {}).get("phase") != "Bound":
            raise ValueError(f"PVC {self.ns}/{claim} is not bound")
        pv = self.api.get(f"/api/v1/persistentvolumes/{pv_name}", ok404=True)
        if pv is None:
            raise ValueError(f'persistentvolume "{pv_name}" not found')
        spec = pv.get("spec") or {}
        path = (spec.get("hostPath") or spec.get("local") or {}).get("path")
        if not path:
            raise ValueError(
                f"persistentvolume {pv_name}: only hostPath and local volumes can be mounted "
                "on the real stack"
            )
        Path(path).mkdir(parents=True, exist_ok=True)
        return path

    def _host_path(self, src: dict) -> str:
        path, typ = src["path"], src.get("type") or ""
        p = Path(path)
        if typ == "DirectoryOrCreate":
            p.mkdir(mode=0o755, parents=True, exist_ok=True)
        elif typ == "FileOrCreate" and not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch(mode=0o644)
        checks = {
            "Directory": (p.is_dir, "a directory"),
            "DirectoryOrCreate": (p.is_dir, "a directory"),
            "File": (p.is_file, "a file"),
            "FileOrCreate": (p.is_file, "a file"),
            "Socket": (p.is_socket, "a socket file"),
            "CharDevice": (p.is_char_device, "a character device"),
            "BlockDevice": (p.is_block_device, "a block device"),
        }
        if typ in checks and not checks[typ][0]():
            raise ValueError(f"hostPath type check failed: {path} is not {checks[typ][1]}")
        return path

    def _volume(self, plan: Plan, vol: dict) -> str:
        """Set up one volume in the plan; returns its directory (or file) inside the pod."""
        name = self._current = vol["name"]
        if any(k in vol for k in ("configMap", "secret", "projected", "downwardAPI")):
            self.file_volumes.append(name)
        if "emptyDir" in vol:
            d = _plugin_dir(self.dir, "empty-dir", name)
            if (vol["emptyDir"] or {}).get("medium") == "Memory":
                size = _memory_size(self.pod, vol, self.allocatable)
                plan.tmpfs.append({"path": str(d), "size": size, "mode": 0o777, "volume": name})
            else:
                plan.dirs.append(str(d))
            return str(d)
        if "hostPath" in vol:
            return self._host_path(vol["hostPath"])
        if "persistentVolumeClaim" in vol:
            return self._pv_path(vol["persistentVolumeClaim"]["claimName"])
        if "ephemeral" in vol:
            return self._pv_path(f"{self.pod['metadata']['name']}-{name}")
        if "configMap" in vol or "secret" in vol:
            kind = "Secret" if "secret" in vol else "ConfigMap"
            src = vol.get("secret") or vol.get("configMap")
            ref = src.get("secretName") if kind == "Secret" else src.get("name")
            plural = "secrets" if kind == "Secret" else "configmaps"
            payload = _object_payload(
                kind,
                self._get(plural, ref),
                ref,
                src.get("items"),
                _mode(src.get("defaultMode"), DEFAULT_MODE),
                bool(src.get("optional")),
            )
            d = _plugin_dir(self.dir, "secret" if kind == "Secret" else "configmap", name)
            if kind == "Secret":
                plan.tmpfs.append({"path": str(d), "size": None, "mode": 0o755, "volume": name})
            else:
                plan.dirs.append(str(d))
            plan.files.append({"dir": str(d), "files": _encode(payload), "volume": name})
            return str(d)
        if "projected" in vol or "downwardAPI" in vol:
            if "projected" in vol:
                payload = self._projected(vol["projected"])
                d = _plugin_dir(self.dir, "projected", name)
            else:
                src = vol["downwardAPI"]
                mode = _mode(src.get("defaultMode"), DEFAULT_MODE)
                payload = _downward_payload(self.pod, src.get("items"), mode, self.allocatable)
                d = _plugin_dir(self.dir, "downward-api", name)
            plan.tmpfs.append({"path": str(d), "size": None, "mode": 0o755, "volume": name})
            plan.files.append({"dir": str(d), "files": _encode(payload), "volume": name})
            return str(d)
        kinds = sorted(k for k in vol if k != "name")
        raise ValueError(f"volume type {', '.join(kinds)} is not supported by the real stack")

    def plan(self) -> Plan:
        """The whole pod's plan; MountFailures lists every volume that cannot be set up."""
        spec = self.pod["spec"]
        plan = Plan()
        sources: dict[str, str] = {}
        failures: list[tuple[str, str]] = []
        containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
        for vol in spec.get("volumes") or []:  # the kubelet sets up unused volumes too
            try:
                sources[vol["name"]] = self._volume(plan, vol)
            except ValueError as e:
                failures.append((vol["name"], str(e)))
        if failures:
            raise MountFailures(failures)
        read_only = {
            v["name"]: bool((v.get("persistentVolumeClaim") or {}).get("readOnly"))
            for v in spec.get("volumes") or []
        }
        seen: set[str] = set()
        binds = []
        for c in containers:
            for m in c.get("volumeMounts") or []:
                target = os.path.normpath(m["mountPath"])
                if target in seen or m["name"] not in sources:
                    continue  # one namespace per pod: the first container's mount wins
                seen.add(target)
                source = sources[m["name"]]
                sub = m.get("subPath") or ""
                if m.get("subPathExpr"):
                    from devtools.realstack.podrunner import expand

                    try:
                        sub = expand(m["subPathExpr"], self.env_of(c))
                    except Exception as e:  # the env itself cannot be built yet
                        raise MountFailures([(m["name"], str(e))]) from None
                if sub:
                    source = os.path.join(source, sub)
                binds.append(
                    {
                        "source": source,
                        "target": target,
                        "ro": bool(m.get("readOnly")) or read_only.get(m["name"], False),
                        "sub": bool(sub),
                        "volume": m["name"],
                    }
                )
        binds.sort(key=lambda b: b["target"].count("/"))
        plan.binds = binds
        return plan

    def refresh_plan(self, names: set[str]) -> Plan:
        """The files of the named (already mounted) volumes, written anew: what the kubelet
        does when a ConfigMap or Secret changes or a token nears its expiry."""
        full, plan = Plan(), Plan()
        for vol in self.pod["spec"].get("volumes") or []:
            if vol["name"] in names:
                self._volume(full, vol)
        plan.files = full.files
        return plan

    def sync_state(self, now: float) -> dict[str, dict]:
        """What tells a later sync that a file volume is due: its objects' versions, its
        token's lifetime and when it was written."""
        return {
            v: {"refs": self.refs.get(v, {}), "ttl": self.ttls.get(v, 0), "at": now}
            for v in self.file_volumes
        }


def _encode(payload: dict[str, tuple[bytes, int]]) -> list[list]:
    return [[k, base64.b64encode(v).decode(), m] for k, (v, m) in sorted(payload.items())]


# --------------------------------------------------------------------------------------------
# The namespace: its holder process, and running a plan inside it
# --------------------------------------------------------------------------------------------


def mnt_ns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def read_ns(pod_dir: Path) -> dict | None:
    """``{"holder": pid, "mnt": "mnt:[...]"}`` of a pod that has a namespace."""
    try:
        return json.loads((pod_dir / NS_FILE).read_text())
    except (OSError, ValueError):
        return None


def holder_alive(pod_dir: Path) -> int | None:
    """The holder's pid while it still holds the pod's namespace."""
    info = read_ns(pod_dir)
    if info and mnt_ns(info["holder"]) == info["mnt"]:
        return int(info["holder"])
    return None


def start_holder(pod_dir: Path, markers: dict[str, str]) -> subprocess.Popen:
    """A new mount namespace (private propagation) held by ``sleep infinity``; recorded in
    ``ns.json``. The holder lives in a session of its own: it outlives the runner."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **markers, ENV_HOLDER: "1"}
    with open(pod_dir / "holder.log", "ab") as log:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sleep", "infinity"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    mine = mnt_ns("self")
    deadline = time.monotonic() + 10
    while True:
        ns = mnt_ns(proc.pid)
        try:
            comm = Path(f"/proc/{proc.pid}/comm").read_text().strip()
        except OSError:
            comm = ""
        if comm == "sleep" and ns and ns != mine:
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(OSError):
                proc.kill()
            tail = (pod_dir / "holder.log").read_text(errors="replace")[-300:].strip()
            raise MountFailures([("(namespace)", f"unshare --mount failed: {tail}")])
        time.sleep(0.002)
    tmp = pod_dir / (NS_FILE + ".tmp")
    tmp.write_text(json.dumps({"holder": proc.pid, "mnt": ns}))
    os.replace(tmp, pod_dir / NS_FILE)
    return proc


def apply(holder: int, plan: Plan) -> None:
    """Run ``plan`` inside the holder's namespace; MountFailures names the volume that failed."""
    for d in plan.dirs:
        Path(d).mkdir(mode=0o777, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(d, 0o777)
    argv = [
        "nsenter",
        f"--mount=/proc/{holder}/ns/mnt",
        "--",
        sys.executable,
        "-S",
        "-m",
        "devtools.realstack.podvolumes",
        "mount",
    ]
    proc = subprocess.run(
        argv,
        input=json.dumps(plan.to_json()).encode(),
        capture_output=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)},
    )
    if proc.returncode != 0:
        try:
            err = json.loads(proc.stdout)
            raise MountFailures([(err["volume"], err["message"])])
        except (ValueError, KeyError):
            msg = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise MountFailures([("(namespace)", f"mount helper failed: {msg[0]}")]) from None


# --------------------------------------------------------------------------------------------
# Inside the namespace (python -m devtools.realstack.podvolumes mount < plan)
# --------------------------------------------------------------------------------------------

_libc = None


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]

    def b(s: str | None) -> bytes | None:
        return s.encode() if s is not None else None

    if _libc.mount(b(source), b(target), b(fstype), flags, b(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or ''} {target}: {os.strerror(err)}")


def write_payload(target: Path, files: list[list]) -> None:
    """The kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go): a new ``..<timestamp>``
    directory, ``..data`` swapped to it, one ``<key> -> ..data/<key>`` link per top name."""
    target.mkdir(parents=True, exist_ok=True)
    data_link = target / "..data"
    old = os.readlink(data_link) if data_link.is_symlink() else None
    ts = Path(
        tempfile.mkdtemp(prefix=time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()), dir=target)
    )
    os.chmod(ts, 0o755)
    tops = set()
    for rel, b64, mode in files:
        parts = Path(rel).parts
        if not parts or rel.startswith("/") or ".." in parts:
            raise ValueError(f"invalid path {rel!r}")
        p = ts / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(base64.b64decode(b64))
        os.chmod(p, mode)
        tops.add(parts[0])
    tmp = target / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(ts.name, tmp)
    os.rename(tmp, data_link)
    for top in tops:
        link = target / top
        if not link.is_symlink():
            os.symlink(f"..data/{top}", link)
    for entry in target.iterdir():
        if not entry.name.startswith("..") and entry.name not in tops and entry.is_symlink():
            entry.unlink()
    if old and old != ts.name:
        shutil.rmtree(target / old, ignore_errors=True)


def _prepare_target(source: str, target: str, sub: bool) -> None:
    src = Path(source)
    if sub and not src.exists():
        src.mkdir(mode=0o777, parents=True)  # the kubelet creates a missing subPath
    tgt = Path(target)
    if src.is_dir():
        tgt.mkdir(parents=True, exist_ok=True)
    elif not tgt.exists():
        tgt.parent.mkdir(parents=True, exist_ok=True)
        tgt.touch()


def mount_main() -> int:
    plan = json.loads(sys.stdin.buffer.read())
    current = "(namespace)"
    try:
        for t in plan.get("tmpfs", []):
            current = t["volume"]
            Path(t["path"]).mkdir(parents=True, exist_ok=True)
            opts = f"mode={t['mode']:o}" + (f",size={t['size']}" if t.get("size") else "")
            _mount("tmpfs", t["path"], "tmpfs", MS_NOSUID | MS_NODEV, opts)
        for f in plan.get("files", []):
            current = f["volume"]
            write_payload(Path(f["dir"]), f["files"])
        for m in plan.get("binds", []):
            current = m["volume"]
            _prepare_target(m["source"], m["target"], m.get("sub", False))
            _mount(m["source"], m["target"], None, MS_BIND | MS_REC, None)
            if m.get("ro"):
                _mount(None, m["target"], None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)
    except (OSError, ValueError) as e:
        sys.stdout.write(json.dumps({"volume": current, "message": str(e)}))
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["mount"]:
        sys.exit(mount_main())
    sys.exit("usage: python -m devtools.realstack.podvolumes mount < PLAN.json")
