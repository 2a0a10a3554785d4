"""Pods that run: the kubelet's part of the real stack, for pods bound to the kwok nodes.

kwok (see ``nodes.py``) keeps the Node objects, their leases and heartbeats; the kubelet API
(exec, attach, logs, port-forward) is served by our node agent (``nodeagent/``, the kubelet's
own streaming code), which reads the pod directories this process writes. Neither runs a
container's command. This process does, as a kubelet would, for every pod bound to a node this
stack manages:

- Each pod gets a directory of its own, ``RUN/pods/<namespace>_<name>_<uid>/`` with ``home/``
  (HOME), ``tmp/`` (TMPDIR), ``work/`` (the working directory of every container and exec),
  ``logs/<container>.log`` (CRI log format, served by the node agent for ``kubectl logs``;
  ``.previous.log`` after a restart), ``containers/<name>-<attempt>/`` (one run of a
  container: its spec, pids and exit code) and ``volumes/kubernetes.io~<plugin>/<name>/``.
- Volumes are mounted before any container starts (``podvolumes.py``): the pod gets a mount
  namespace of its own, held by a ``sleep`` process (``ns.json``), with PVCs (the PV's
  directory), hostPath, emptyDir (``medium: Memory`` a tmpfs of ``sizeLimit``), ConfigMap,
  Secret, downwardAPI and projected volumes (the service account token from the TokenRequest
  API, bound to the pod) bind-mounted at each container's ``volumeMounts``. Its containers
  start in it and the node agent's execs enter it. A volume that cannot be set up (a missing
  Secret or ConfigMap, a key not in it, an unbound claim) is the kubelet's ``FailedMount``
  Event ``MountVolume.SetUp failed for volume "v" : secret "x" not found``, tried again with
  back-off (0.5 s doubling to 8 s; the kubelet goes to 2m2s) while the pod stays Pending with
  ``ContainerCreating`` containers. The claims of the default StorageClass are provisioned by
  ``provisioner.py``, which runs in this process.
- The env is computed as the kubelet does (``envFrom``, then ``env`` with ``value`` and
  ``$(VAR)`` expansion, ``fieldRef``, ``resourceFieldRef``, ``configMapKeyRef``,
  ``secretKeyRef``), plus ``HOSTNAME`` (``spec.hostname`` or the pod name), ``HOME``, ``TMPDIR``,
  a standard ``PATH``, ``KUBERNETES_SERVICE_HOST/PORT`` (the real apiserver on 127.0.0.1) and
  three markers: ``TRAINJOB_REALSTACK_RUN``, ``TRAINJOB_REALSTACK_POD_UID`` and
  ``TRAINJOB_REALSTACK_CONTAINER``. A missing ConfigMap, Secret or key is the container's
  ``CreateContainerConfigError`` with the kubelet's message (``configmap "x" not found``,
  ``couldn't find key k in Secret ns/x``) and a ``Failed`` Event ``Error: <message>``.
- Init containers run in order (a ``restartPolicy: Always`` init container is a sidecar: started,
  then left running), then every container; each run of a container is a small supervisor
  process (``podrunner shim``) that starts the command in a session of its own (in the pod's
  mount namespace), writes its stdout/stderr to the CRI log and its exit code to
  ``result.json``. Supervisors and namespace holders outlive this process, so a restart of the
  runner re-adopts running pods, their namespaces included, from their directories.
- The status is set as a kubelet sets it (strategic-merge patches of ``pods/status``): Pending
  with waiting containers, then Running with running/started/ready containers and the
  ``PodReadyToStartContainers`` (once the volumes are mounted), ``Initialized``,
  ``ContainersReady`` and ``Ready`` conditions, ``podIP``/``hostIP`` 127.0.0.1 and
  ``startTime``; an exit is a terminated state with its exit code and reason
  ``Completed``/``Error``; ``restartPolicy`` decides between a terminal phase and a restart with
  the kubelet's back-off (0 s, 10 s, 20 s, ... 300 s) and ``restartCount + 1``.
- An exec into the pod (the node agent) runs the container's ``spec.json``: the same ``work/``
  directory, the same env and, when the pod has one, its mount namespace.
- Deleting or evicting a pod ends every process of it, as its cgroup would: no container of it
  starts any more, SIGTERM to each container's main process as soon as its pid is known (one
  whose start was in flight too), SIGKILL at the end of the grace period (the pod's
  ``deletionTimestamp``) to every process whose environment carries the pod's
  ``TRAINJOB_REALSTACK_POD_UID`` (exec'd processes included: the agent starts them with the
  container's env), that is in the pod's mount namespace, or that is in the session of one of
  its containers. When a container exits, the processes marked with its name go too (its pid
  namespace ends). With the last process the namespace ends, and its mounts with it. Then the
  pod gets its terminal phase and is deleted with grace 0 and a UID precondition, as the
  kubelet's status manager does, so a Job replaces it. A pod removed from the API (force
  delete, PodGC after its node was deleted) or a pod whose node was deleted loses its
  processes at once.
- It survives watch expiry (410: relist), apiserver restarts (reconnect with back-off, relist)
  and its own restart (re-adoption from the pod directories; directories whose pod is gone have
  their processes killed).

Known limits (none of these is a kubelet):
- No images: commands run on the host filesystem with the host's tools (``python3`` is the
  host's). A container without ``command`` has no entrypoint to run (the image is unknown): it
  runs ``sleep infinity`` instead (``args`` alone are ignored then). ``workingDir`` is not
  honoured: every container and exec of a pod shares its ``work/`` directory.
- Mounts: one mount namespace per pod, not per container (every container sees the mounts of
  all; for one path the first container's mount wins); mount points missing on the host are
  created there (empty directories or files); a changed ConfigMap or Secret reaches its
  volume within ``VOLUME_SYNC`` (15 s) and a projected token is renewed at 80% of its life
  (``volumeSync`` in ``state.json``), but a ``subPath`` mount keeps its first content, as
  with a kubelet; emptyDir ``sizeLimit`` on disk is not enforced (a Memory one is a tmpfs of
  that size); only hostPath and local PVs, no CSI, NFS or image volumes (a FailedMount says
  so); no ``fsGroup``, SELinux or ``mountPropagation``.
- Host network: every pod has podIP = hostIP = 127.0.0.1, so two pods cannot listen on the same
  port; there is no cluster DNS and no kube-proxy (Service names and ClusterIPs do not resolve or
  route; ``KUBERNETES_SERVICE_HOST`` is 127.0.0.1 with the apiserver's real port; other
  services' docker-link variables are not set). Port-forward dials 127.0.0.1 (no namespace to
  enter).
- No probes: a started container is ready at once. No resource limits are enforced; cpu/memory
  are only accounted by the scheduler. ``runAsUser`` and security contexts are ignored.
- "Every process of the pod" is found by environment marker, session and (for pods with
  volumes) mount namespace: in a pod without volumes, a process that clears its environment and
  leaves the session (``env -i setsid ...``) escapes, as it would not from a cgroup. Exec'd
  processes are in the node agent's process tree, not the pod's.
- MPI worker pods whose command is ``sshd`` (``/usr/sbin/sshd -De ...`` in the deepspeed and
  MPI runtimes) cannot serve ssh here (host network, no image, no sshd on the host): their
  container runs ``sleep infinity`` instead, so the pods become Running and Ready (there are no
  probes) and exec works in them (``/etc/mpi/hostfile`` and the ssh keys are mounted), but
  nothing listens on port 2222. The launcher's ``mpirun`` over ssh therefore cannot reach them
  (``plm_rsh_agent`` through pods/exec is not done).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import http.client
import json
import math
import os
import queue
import re
import select
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.realstack import podvolumes
from devtools.realstack.provisioner import Provisioner

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
ENV_RUN = "TRAINJOB_REALSTACK_RUN"
ENV_POD = "TRAINJOB_REALSTACK_POD_UID"
ENV_CONTAINER = "TRAINJOB_REALSTACK_CONTAINER"
ENV_SHIM = "TRAINJOB_REALSTACK_SHIM"
POD_IP = "127.0.0.1"
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NO_COMMAND = ["sleep", "infinity"]
STOP_FILE = "stop.sent"  # in a container run's directory: the stop signal was sent
# An MPI worker's sshd (the deepspeed and MPI runtimes' node pods): a keep-alive instead.
SSHD_COMMANDS = frozenset({"sshd"})
FIELD_MANAGER = "trainjob-magics-realstack"
BACKOFF_INITIAL = 10.0
BACKOFF_MAX = 300.0
# a volume that cannot be mounted yet is tried again after 0.5 s, doubling (the kubelet's
# operation executor goes up to 2m2s; shorter here, so that a test does not wait minutes)
MOUNT_BACKOFF_INITIAL = 0.5
MOUNT_BACKOFF_MAX = 8.0
# ConfigMap/Secret/projected volumes are checked for changes this often (the kubelet: at its
# pod sync, about a minute, plus its cache's TTL); a token is renewed at 80% of its lifetime
VOLUME_SYNC = 15.0
CLONE_NEWNS = 0x00020000
KWOK_GROUP = "kwok.x-k8s.io/v1alpha1"


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return (
        dt.datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")
        .replace(tzinfo=dt.timezone.utc)
        .timestamp()
    )


def log(msg: str) -> None:
    sys.stdout.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------------------------
# A small Kubernetes REST client (stdlib only)
# --------------------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status = status
        self.body = body
        msg = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{what}: HTTP {status}: {msg}")


class Gone(Exception):
    """A watch's resourceVersion is too old (410): relist."""


class KubeApi:
    """Requests to the apiserver named by a kubeconfig (client cert, token or none)."""

    def __init__(self, kubeconfig: Path) -> None:
        import yaml  # not at module level: the supervisors run with python -S

        cfg = yaml.safe_load(Path(kubeconfig).read_text())
        ctx_name = cfg.get("current-context") or cfg["contexts"][0]["name"]
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next((u["user"] for u in cfg.get("users", []) if u["name"] == ctx.get("user")), {})
        base = Path(kubeconfig).parent
        url = urllib.parse.urlparse(cluster["server"])
        self.host = url.hostname
        self.port = url.port or 443
        self.server = cluster["server"]
        self._tmp: list[Path] = []
        sslctx = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            sslctx.check_hostname = False
            sslctx.verify_mode = ssl.CERT_NONE
        elif "certificate-authority-data" in cluster:
            sslctx.load_verify_locations(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
        elif "certificate-authority" in cluster:
            sslctx.load_verify_locations(cafile=str(base / cluster["certificate-authority"]))
        cert = self._file(user, "client-certificate", base)
        key = self._file(user, "client-key", base)
        if cert:
            sslctx.load_cert_chain(cert, key)
        self.ssl = sslctx
        self.headers = {"Accept": "application/json"}
        if user.get("token"):
            self.headers["Authorization"] = f"Bearer {user['token']}"
        self._local = threading.local()

    def _file(self, user: dict, name: str, base: Path) -> str | None:
        if f"{name}-data" in user:
            fd, path = tempfile.mkstemp(prefix="realstack-kc-")
            os.write(fd, base64.b64decode(user[f"{name}-data"]))
            os.close(fd)
            self._tmp.append(Path(path))
            return path
        if name in user:
            return str(base / user[name])
        return None

    def _conn(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.ssl, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
        ok404: bool = False,
    ) -> Any:
        if query:
            path = f"{path}?{urllib.parse.urlencode(query, doseq=True)}"
        data = None
        headers = dict(self.headers)
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        for attempt in range(2):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self._conn(timeout)
            try:
                conn.timeout = timeout
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (OSError, http.client.HTTPException):
                self._local.conn = None
                with contextlib.suppress(Exception):
                    conn.close()
                if attempt:
                    raise
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = raw.decode(errors="replace")
        if resp.status == 404 and ok404:
            return None
        if resp.status >= 400:
            raise ApiError(resp.status, payload, f"{method} {path}")
        return payload

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def apply(self, path: str, obj: dict, *, force: bool = True) -> Any:
        """Server-side apply of ``obj`` at ``path`` (the object's own URL)."""
        return self.request(
            "PATCH",
            path,
            json.dumps(obj).encode(),
            query={"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"},
            content_type="application/apply-patch+yaml",
        )

    def watch(
        self, path: str, resource_version: str, *, query: dict | None = None, timeout: int = 240
    ):
        """Yield watch events from ``resource_version``; raise Gone on 410."""
        q = dict(query or {})
        q.update(
            watch="1",
            resourceVersion=resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(timeout),
        )
        conn = self._conn(timeout + 30)
        try:
            conn.request("GET", f"{path}?{urllib.parse.urlencode(q)}", headers=self.headers)
            resp = conn.getresponse()
            if resp.status == 410:
                raise Gone()
            if resp.status >= 400:
                raise ApiError(resp.status, resp.read()[:500], f"watch {path}")
            while True:
                line = resp.readline()
                if not line:
                    return
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object", {})
                    if status.get("code") == 410:
                        raise Gone()
                    raise ApiError(status.get("code", 500), status, f"watch {path}")
                yield event
        finally:
            conn.close()


def kwok_path(kind_plural: str, namespace: str | None = None, name: str | None = None) -> str:
    p = f"/apis/{KWOK_GROUP}"
    if namespace:
        p += f"/namespaces/{namespace}"
    p += f"/{kind_plural}"
    if name:
        p += f"/{name}"
    return p


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}" + (f"/{sub}" if sub else "")


# --------------------------------------------------------------------------------------------
# Quantities and the env a kubelet gives a container
# --------------------------------------------------------------------------------------------

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "": 1,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


def quantity(value: str | int | float) -> float:
    s = str(value).strip()
    m = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)", s)
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


class EnvError(Exception):
    """The env cannot be built yet (a ConfigMap or Secret missing): CreateContainerConfigError."""


_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: ``$$`` is ``$``, unknown references stay as written."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i : end + 1])
                    i = end + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


def _format_map(m: dict) -> str:
    return "\n".join(f'{k}="{v}"' for k, v in sorted((m or {}).items()))


def field_ref(pod: dict, path: str) -> str:
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.*)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "metadata.labels": _format_map(meta.get("labels")),
        "metadata.annotations": _format_map(meta.get("annotations")),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": POD_IP,
        "status.podIPs": POD_IP,
        "status.hostIP": POD_IP,
        "status.hostIPs": POD_IP,
    }
    if path in simple:
        return simple[path]
    raise EnvError(f"unsupported fieldRef {path!r}")


def resource_ref(pod: dict, container: dict, ref: dict, allocatable: dict) -> str:
    name = ref.get("containerName") or container["name"]
    c = next(
        (
            x
            for x in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", [])
            if x["name"] == name
        ),
        container,
    )
    kind, _, res = ref["resource"].partition(".")
    resources = c.get("resources") or {}
    value = (resources.get(kind) or {}).get(res)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(res)
    if value is None:
        value = "0" if kind == "requests" else allocatable.get(res, "0")
    divisor = quantity(ref.get("divisor") or "1") or 1.0  # the API defaults it to "0": 1
    return str(math.ceil(quantity(value) / divisor - 1e-12))


class Lookups:
    """ConfigMaps and Secrets of one namespace, fetched once per env computation."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api, self.ns, self.cache = api, namespace, {}

    def get(self, kind: str, name: str) -> dict | None:
        key = (kind, name)
        if key not in self.cache:
            plural = "configmaps" if kind == "ConfigMap" else "secrets"
            self.cache[key] = self.api.get(
                f"/api/v1/namespaces/{self.ns}/{plural}/{name}", ok404=True
            )
        return self.cache[key]

    def data(self, kind: str, name: str, optional: bool) -> dict[str, str] | None:
        obj = self.get(kind, name)
        if obj is None:
            if optional:
                return None
            raise EnvError(f'{kind.lower()} "{name}" not found')
        if kind == "Secret":
            return {
                k: base64.b64decode(v).decode(errors="replace")
                for k, v in (obj.get("data") or {}).items()
            }
        out = dict(obj.get("data") or {})
        for k, v in (obj.get("binaryData") or {}).items():
            out.setdefault(k, base64.b64decode(v).decode(errors="replace"))
        return out


def container_env(
    pod: dict, container: dict, lookups: Lookups | None, *, base: dict[str, str], allocatable: dict
) -> dict[str, str]:
    """The env as the kubelet makes it (``base`` first, then envFrom, then env)."""
    env: dict[str, str] = dict(base)
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        ref = src.get("configMapRef") or src.get("secretRef")
        kind = "ConfigMap" if "configMapRef" in src else "Secret"
        data = lookups.data(kind, ref["name"], bool(ref.get("optional"))) if lookups else {}
        for k, v in (data or {}).items():
            if _ENV_NAME.fullmatch(prefix + k):
                env[prefix + k] = v
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        vf = var["valueFrom"]
        if "fieldRef" in vf:
            env[name] = field_ref(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            env[name] = resource_ref(pod, container, vf["resourceFieldRef"], allocatable)
        elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
            kind = "ConfigMap" if "configMapKeyRef" in vf else "Secret"
            ref = vf.get("configMapKeyRef") or vf.get("secretKeyRef")
            optional = bool(ref.get("optional"))
            data = lookups.data(kind, ref["name"], optional) if lookups else {}
            if data is None:
                continue
            if ref["key"] not in data:
                if optional:
                    continue
                where = f"{pod['metadata']['namespace']}/{ref['name']}"
                raise EnvError(f"couldn't find key {ref['key']} in {kind} {where}")
            env[name] = data[ref["key"]]
        else:
            raise EnvError(f"unsupported valueFrom for {name}")
    return env


def container_argv(container: dict, env: dict[str, str]) -> list[str]:
    command = container.get("command") or []
    if not command or os.path.basename(command[0]) in SSHD_COMMANDS:
        return list(NO_COMMAND)
    return [expand(a, env) for a in command] + [expand(a, env) for a in container.get("args") or []]


# --------------------------------------------------------------------------------------------
# Processes: the per-run supervisor ("shim"), and finding a pod's processes
# --------------------------------------------------------------------------------------------


def _cri_ts() -> str:
    t = time.time_ns()
    secs, nanos = divmod(t, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{nanos:09d}Z"


def shim_main(run_dir: Path) -> int:
    """Supervise one run of a container: start it, relay its output as CRI log lines, record the
    exit code in ``result.json``. Lives in a session of its own (it outlives the runner)."""
    spec = json.loads((run_dir / "spec.json").read_text())
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    logf = open(spec["log"], "ab", buffering=0)  # noqa: SIM115
    lock = threading.Lock()

    def write(stream: str, data: bytes) -> None:
        with lock:
            parts = data.split(b"\n")
            out = []
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                if last and not part:
                    break
                tag = b"P" if last else b"F"
                out.append(f"{_cri_ts()} {stream} ".encode() + tag + b" " + part + b"\n")
            logf.write(b"".join(out))

    started = now_iso()
    try:
        preexec = _default_signals
        if spec.get("ns"):
            preexec = _enter_ns(spec["ns"], spec["cwd"])
        proc = subprocess.Popen(
            spec["argv"],
            cwd=spec["cwd"],
            env=spec["env"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
        )
    except (OSError, subprocess.SubprocessError) as e:
        write("stderr", f"{e}\n".encode())
        result = {
            "exitCode": 128,
            "reason": "StartError",
            "message": str(e),
            "startedAt": started,
            "finishedAt": now_iso(),
        }
        _atomic_write(run_dir / "result.json", json.dumps(result))
        return 0
    (run_dir / "child.pid").write_text(str(proc.pid))
    _atomic_write(run_dir / "started.json", json.dumps({"pid": proc.pid, "startedAt": started}))
    streams = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
    while streams:
        ready, _, _ = select.select(list(streams), [], [])
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                del streams[fd]
            else:
                write(streams[fd], data)
    code = proc.wait()
    exit_code = code if code >= 0 else 128 - code
    result = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": started,
        "finishedAt": now_iso(),
    }
    if code < 0:
        result["signal"] = -code
    _atomic_write(run_dir / "result.json", json.dumps(result))
    return 0


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


def _enter_ns(ns: dict, cwd: str):
    """A preexec_fn that moves the child into the pod's mount namespace (then its cwd)."""
    import ctypes

    fd = os.open(ns["path"], os.O_RDONLY)
    if os.readlink(ns["path"]) != ns["mnt"]:
        raise OSError(f"the pod's mount namespace {ns['mnt']} is gone")
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        _default_signals()
        if libc.setns(fd, CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "setns into the pod's mount namespace failed")
        os.chdir(cwd)

    return preexec


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def scan_processes(namespaces: bool = False) -> list[tuple[int, int, dict[bytes, bytes], str]]:
    """(pid, session id, marker vars, mount namespace if asked) of every live process."""
    out = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        sid = int(fields[3])
        marks = {}
        if b"TRAINJOB_REALSTACK_" in raw:
            for item in raw.split(b"\0"):
                if item.startswith(b"TRAINJOB_REALSTACK_"):
                    k, _, v = item.partition(b"=")
                    marks[k] = v
        ns = ""
        if namespaces:
            with contextlib.suppress(OSError):
                ns = os.readlink(f"/proc/{pid}/ns/mnt")
        out.append((pid, sid, marks, ns))
    return out


def pod_namespaces(run: Path, uid: str | None) -> set[str]:
    """The mount namespaces of a pod (every pod of the run when ``uid`` is None) whose holder
    still holds them: a namespace id is reused by the kernel once its namespace has ended."""
    out = set()
    for f in (run / "pods").glob(
        f"*_{uid}/{podvolumes.NS_FILE}" if uid else f"*/{podvolumes.NS_FILE}"
    ):
        if podvolumes.holder_alive(f.parent):
            out.add(podvolumes.read_ns(f.parent)["mnt"])
    return out


def processes_of(
    run: Path,
    uid: str | None,
    *,
    container: str | None = None,
    sessions: set[int] = frozenset(),
    spaces: set[str] | None = None,
) -> list[int]:
    """Pids of a pod (by its uid marker, its mount namespace or the sessions of its containers);
    every pod of this run when ``uid`` is None. Supervisors (shims) are not included."""
    run_b = str(run).encode()
    pids = []
    if spaces is None:
        spaces = pod_namespaces(run, uid) if container is None else set()
    for pid, sid, marks, ns in scan_processes(bool(spaces)):
        if ENV_SHIM.encode() in marks:
            continue
        if marks.get(ENV_RUN.encode()) not in (None, run_b):
            continue
        if uid is None:
            hit = marks.get(ENV_RUN.encode()) == run_b
        else:
            hit = marks.get(ENV_POD.encode()) == uid.encode() and (
                container is None or marks.get(ENV_CONTAINER.encode()) == container.encode()
            )
        if hit or sid in sessions or (ns and ns in spaces):
            pids.append(pid)
    return pids


def shims_of(run: Path, uid: str | None) -> list[int]:
    want = f"{run}:{uid}".encode() if uid else None
    prefix = f"{run}:".encode()
    out = []
    for pid, _sid, marks, _ns in scan_processes():
        v = marks.get(ENV_SHIM.encode())
        if v is not None and (v == want if want else v.startswith(prefix)):
            out.append(pid)
    return out


def kill_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def sweep(
    run: Path,
    uid: str | None,
    *,
    container: str | None = None,
    sessions: set[int] = frozenset(),
    rounds: int = 20,
) -> int:
    """SIGKILL every process of a pod (or container) until none is left; returns how many."""
    total = 0
    # the namespaces are read once: the first round kills their holders
    spaces = pod_namespaces(run, uid) if container is None else set()
    for _ in range(rounds):
        pids = processes_of(run, uid, container=container, sessions=sessions, spaces=spaces)
        if not pids:
            break
        total += len(pids)
        kill_all(pids, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.02)
    return total


# --------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run of a container (a supervisor and its child)."""

    dir: Path
    started_at: str = ""
    pid: int = 0
    result: dict | None = None
    stopped: bool = False  # the stop signal was sent to its main process (``stop``)

    def __post_init__(self) -> None:
        # a runner restarted during a pod's grace period does not signal it a second time
        self.stopped = (self.dir / STOP_FILE).exists()

    def stop(self, sig: int) -> None:
        """Send the stop signal to the main process, once. A run whose pid is not known yet
        (its supervisor has not started it) is signalled by a later call, after ``refresh``."""
        if self.stopped or not self.pid or self.result is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, sig)
        self.stopped = True
        with contextlib.suppress(OSError):
            (self.dir / STOP_FILE).write_text(str(sig))

    def refresh(self) -> None:
        if self.result is not None:
            return
        if not self.pid:
            with contextlib.suppress(OSError, ValueError):
                info = json.loads((self.dir / "started.json").read_text())
                self.pid, self.started_at = info["pid"], info["startedAt"]
        with contextlib.suppress(OSError, ValueError):
            self.result = json.loads((self.dir / "result.json").read_text())
            return
        if self.pid and not _alive(self.pid) and not self._shim_alive():
            # the supervisor died without a result (killed): as the kubelet when a container
            # vanished
            with contextlib.suppress(OSError, ValueError):
                self.result = json.loads((self.dir / "result.json").read_text())
                return
            self.result = {
                "exitCode": 137,
                "reason": "ContainerStatusUnknown",
                "message": "the container's supervisor ended without an exit code",
                "startedAt": self.started_at,
                "finishedAt": now_iso(),
            }
        elif (
            not self.pid
            and not self._shim_alive()
            and not (self.dir / "result.json").exists()
            and time.time() - self.dir.stat().st_mtime > 5
        ):
            # neither started nor alive: the supervisor died before its child
            self.result = {
                "exitCode": 128,
                "reason": "StartError",
                "message": "the container's supervisor did not start it",
                "startedAt": now_iso(),
                "finishedAt": now_iso(),
            }

    def _shim_alive(self) -> bool:
        try:
            return _alive(int((self.dir / "shim.pid").read_text()))
        except (OSError, ValueError):
            return False


@dataclass
class CState:
    name: str
    init: bool = False
    sidecar: bool = False
    attempt: int = 0
    restart_count: int = 0
    run: Run | None = None
    last: dict | None = None  # lastState.terminated
    waiting: tuple[str, str] | None = ("ContainerCreating", "")
    terminated: dict | None = None  # current terminated state (no restart pending)
    next_start: float = 0.0
    done_ok: bool = False  # an init container that completed

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "init": self.init,
            "sidecar": self.sidecar,
            "attempt": self.attempt,
            "restartCount": self.restart_count,
            "run": str(self.run.dir) if self.run else None,
            "last": self.last,
            "terminated": self.terminated,
            "doneOk": self.done_ok,
            "waiting": list(self.waiting) if self.waiting else None,
            "nextStart": self.next_start,
        }

    @classmethod
    def from_json(cls, d: dict) -> CState:
        c = cls(
            d["name"],
            init=d["init"],
            sidecar=d["sidecar"],
            attempt=d["attempt"],
            restart_count=d["restartCount"],
            last=d.get("last"),
            terminated=d.get("terminated"),
            done_ok=d.get("doneOk", False),
            next_start=d.get("nextStart", 0.0),
        )
        if d.get("waiting"):
            c.waiting = tuple(d["waiting"])
        if d.get("run"):
            c.run = Run(Path(d["run"]))
            c.run.refresh()
            c.waiting = None
        return c


@dataclass
class PodState:
    uid: str
    namespace: str
    name: str
    dir: Path
    pod: dict
    containers: dict[str, CState] = field(default_factory=dict)
    phase: str = "Pending"
    start_time: str = ""
    conditions: dict[str, tuple[str, str, str, str]] = field(
        default_factory=dict
    )  # type -> (status, time, reason, msg)
    kwok_objects: bool = False
    terminating: bool = False
    killed: bool = False
    deleted_api: bool = False
    finished: bool = False
    last_status: str = ""
    failed_init: bool = False
    message: str = ""
    reason: str = ""
    mounted: bool = False  # its volumes are set up (the kubelet's WaitForAttachAndMount)
    mount_next: float = 0.0
    mount_delay: float = 0.0
    volume_sync: dict[str, dict] = field(default_factory=dict)  # Resolver.sync_state()
    next_volume_sync: float = 0.0
    mount_job: Any = None  # a Future of Runner._mount_work while it runs

    @property
    def spec(self) -> dict:
        return self.pod.get("spec", {})

    def save(self) -> None:
        data = {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "phase": self.phase,
            "startTime": self.start_time,
            "conditions": self.conditions,
            "containers": [c.to_json() for c in self.containers.values()],
            "kwokObjects": self.kwok_objects,
            "failedInit": self.failed_init,
            "finished": self.finished,
            "mounted": self.mounted,
            "volumeSync": self.volume_sync,
        }
        # a pod deleted before it was prepared has no directory yet
        self.dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.dir / "state.json", json.dumps(data, indent=1))


class Runner:
    def __init__(self, run: Path, kubeconfig: Path) -> None:
        self.run = run
        self.pods_root = run / "pods"
        self.pods_root.mkdir(parents=True, exist_ok=True)
        self.api = KubeApi(kubeconfig)
        self.events: queue.Queue = queue.Queue()
        self.nodes: dict[str, dict] = {}
        self.all_pods: dict[str, dict] = {}  # uid -> pod object (bound to some node)
        self.pods: dict[str, PodState] = {}
        self.synced = {"nodes": False, "pods": False, "pvcs": False, "pvs": False}
        self.stop = threading.Event()
        self.deleting_foreign: set[str] = set()
        self._children: list[subprocess.Popen] = []
        self.apiserver_port = self.api.port
        self.event_names: dict[tuple[str, str, str], tuple[str, int]] = {}
        self.provisioner = Provisioner(self.api, run, self._event, log)
        from concurrent.futures import ThreadPoolExecutor  # not for the shims: imported here

        self.mounter = ThreadPoolExecutor(max_workers=4, thread_name_prefix="mount")
        self._adopt_dirs()

    # --- watches ----------------------------------------------------------------------------

    def _watch_loop(self, kind: str, path: str, query: dict) -> None:
        delay = 0.2
        while not self.stop.is_set():
            try:
                listing = self.api.get(path, query=dict(query), timeout=60)
                rv = listing["metadata"]["resourceVersion"]
                self.events.put((kind, "SYNC", listing.get("items", [])))
                delay = 0.2
                while not self.stop.is_set():
                    got_any = False
                    for ev in self.api.watch(path, rv, query=query):
                        got_any = True
                        obj = ev["object"]
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if ev["type"] != "BOOKMARK":
                            self.events.put((kind, ev["type"], obj))
                    if not got_any:
                        continue
            except Gone:
                log(f"{kind} watch expired (410): relisting")
            except Exception as e:
                log(f"{kind} watch: {type(e).__name__}: {e}; retrying in {delay:.1f}s")
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def start_watches(self) -> None:
        for kind, path, query in (
            ("nodes", "/api/v1/nodes", {}),
            ("pods", "/api/v1/pods", {"fieldSelector": "spec.nodeName!="}),
            ("pvcs", "/api/v1/persistentvolumeclaims", {}),
            ("pvs", "/api/v1/persistentvolumes", {}),
        ):
            threading.Thread(
                target=self._watch_loop, args=(kind, path, query), daemon=True, name=f"watch-{kind}"
            ).start()

    # --- events -----------------------------------------------------------------------------

    def _managed(self, node: dict) -> bool:
        return (node["metadata"].get("annotations") or {}).get(
            KWOK_NODE_ANNOTATION
        ) == KWOK_NODE_VALUE

    def handle(self, kind: str, typ: str, obj: Any) -> None:
        if kind in ("pvcs", "pvs"):
            on = self.provisioner.on_claim if kind == "pvcs" else self.provisioner.on_volume
            if typ == "SYNC":
                self.synced[kind] = True
            if typ != "DELETED":
                for item in obj if typ == "SYNC" else [obj]:
                    try:
                        on(item)
                    except Exception as e:
                        log(f"provisioner: {item['metadata']['name']}: {e}")
            return
        if kind == "nodes":
            if typ == "SYNC":
                self.nodes = {n["metadata"]["name"]: n for n in obj if self._managed(n)}
                self.synced["nodes"] = True
            elif typ == "DELETED":
                self.nodes.pop(obj["metadata"]["name"], None)
            elif self._managed(obj):
                self.nodes[obj["metadata"]["name"]] = obj
            else:
                self.nodes.pop(obj["metadata"]["name"], None)
            self._reconcile_nodes()
            return
        if typ == "SYNC":
            self.all_pods = {p["metadata"]["uid"]: p for p in obj}
            self.synced["pods"] = True
            for uid, st in list(self.pods.items()):
                if uid in self.all_pods:
                    st.pod = self.all_pods[uid]
                    st.deleted_api = False
                else:
                    st.deleted_api = True
            for pod in self.all_pods.values():
                self._consider(pod)
            return
        uid = obj["metadata"]["uid"]
        if typ == "DELETED":
            self.all_pods.pop(uid, None)
            if uid in self.pods:
                self.pods[uid].deleted_api = True
            return
        self.all_pods[uid] = obj
        if uid in self.pods:
            self.pods[uid].pod = obj
        else:
            self._consider(obj)

    def _reconcile_nodes(self) -> None:
        if not self.synced["nodes"]:
            return
        for st in list(self.pods.values()):
            if st.spec.get("nodeName") not in self.nodes and not st.finished:
                node = st.spec.get("nodeName")
                log(f"{st.namespace}/{st.name}: node {node} is gone: killing the pod's processes")
                self._kill_now(st)
                st.finished = True
                st.save()
        for pod in self.all_pods.values():
            self._consider(pod)

    def _consider(self, pod: dict) -> None:
        if not (self.synced["nodes"] and self.synced["pods"]):
            return
        uid = pod["metadata"]["uid"]
        if uid in self.pods or pod["spec"].get("nodeName") not in self.nodes:
            return
        phase = (pod.get("status") or {}).get("phase")
        meta = pod["metadata"]
        d = self.pods_root / f"{meta['namespace']}_{meta['name']}_{uid}"
        if phase in ("Succeeded", "Failed") and not d.exists():
            # finished before this runner knew it; nothing of it runs here, but a deletion is
            # finished at once, as the kubelet does for a terminal pod
            if meta.get("deletionTimestamp") and uid not in self.deleting_foreign:
                self.deleting_foreign.add(uid)
                self._final_delete(meta["namespace"], meta["name"], uid)
            return
        st = PodState(uid, meta["namespace"], meta["name"], d, pod)
        self.pods[uid] = st
        if (d / "state.json").exists():
            self._load(st)
            log(f"{st.namespace}/{st.name}: re-adopted (phase {st.phase})")
        else:
            log(f"{st.namespace}/{st.name}: admitted on {pod['spec']['nodeName']}")

    # --- adoption after a restart ------------------------------------------------------------

    def _adopt_dirs(self) -> None:
        self.orphan_dirs = (
            [d for d in self.pods_root.iterdir() if (d / "state.json").exists()]
            if self.pods_root.exists()
            else []
        )

    def _orphans(self) -> None:
        """Pod directories whose pod is not in the API any more: end their processes."""
        known = {st.dir for st in self.pods.values()}
        for d in self.orphan_dirs:
            if d in known:
                continue
            with contextlib.suppress(OSError, ValueError):
                data = json.loads((d / "state.json").read_text())
                if data.get("finished"):
                    continue
                n = sweep(self.run, data["uid"])
                data["finished"] = True
                _atomic_write(d / "state.json", json.dumps(data, indent=1))
                if n:
                    who = f"{data['namespace']}/{data['name']}"
                    log(f"{who}: gone while the runner was away: killed {n} processes")
        self.orphan_dirs = []

    def _load(self, st: PodState) -> None:
        data = json.loads((st.dir / "state.json").read_text())
        st.phase = data["phase"]
        st.start_time = data["startTime"]
        st.conditions = {k: tuple(v) for k, v in data["conditions"].items()}
        st.containers = {c["name"]: CState.from_json(c) for c in data["containers"]}
        st.kwok_objects = data.get("kwokObjects", False)
        st.failed_init = data.get("failedInit", False)
        st.finished = data.get("finished", False)
        # a pod directory of an older runner: its containers ran without mounts
        st.mounted = data.get("mounted", bool(st.containers))
        st.volume_sync = data.get("volumeSync", {})

    # --- the pod's directory and kwok objects -----------------------------------------------

    def _prepare(self, st: PodState) -> None:
        for sub in ("home", "tmp", "work", "logs", "containers"):
            (st.dir / sub).mkdir(parents=True, exist_ok=True)
        spec = st.spec
        for c in spec.get("initContainers") or []:
            sidecar = c.get("restartPolicy") == "Always"
            st.containers[c["name"]] = CState(c["name"], init=True, sidecar=sidecar)
        for c in spec.get("containers") or []:
            st.containers[c["name"]] = CState(
                c["name"],
                waiting=("PodInitializing", "")
                if spec.get("initContainers")
                else ("ContainerCreating", ""),
            )
        for c in st.containers.values():
            for suffix in (".log", ".previous.log"):
                (st.dir / "logs" / f"{c.name}{suffix}").touch()
        st.start_time = now_iso()
        # True once the volumes are mounted (the kubelet creates the sandbox after them)
        self._cond(st, "PodReadyToStartContainers", "False")
        self._cond(
            st,
            "Initialized",
            "False" if spec.get("initContainers") else "True",
            "ContainersNotInitialized" if spec.get("initContainers") else "",
        )
        self._cond(st, "ContainersReady", "False", "ContainersNotReady")
        self._cond(st, "Ready", "False", "ContainersNotReady")
        st.save()

    def _base_env(self, st: PodState, container: str) -> dict[str, str]:
        spec = st.spec
        port = str(self.apiserver_port)
        return {
            "PATH": STANDARD_PATH,
            "HOSTNAME": (spec.get("hostname") or st.name)[:63],
            "HOME": str(st.dir / "home"),
            "TMPDIR": str(st.dir / "tmp"),
            "KUBERNETES_SERVICE_HOST": POD_IP,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{POD_IP}:{port}",
            f"KUBERNETES_PORT_{port}_TCP": f"tcp://{POD_IP}:{port}",
            f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": port,
            f"KUBERNETES_PORT_{port}_TCP_ADDR": POD_IP,
        }

    def _markers(self, st: PodState, container: str) -> dict[str, str]:
        return {ENV_RUN: str(self.run), ENV_POD: st.uid, ENV_CONTAINER: container}

    def _env(self, st: PodState, c: dict) -> dict[str, str]:
        node = self.nodes.get(st.spec.get("nodeName"), {})
        alloc = (node.get("status") or {}).get("allocatable") or {}
        env = container_env(
            st.pod,
            c,
            Lookups(self.api, st.namespace),
            base=self._base_env(st, c["name"]),
            allocatable=alloc,
        )
        env.update(self._markers(st, c["name"]))
        return env

    def _delete_kwok_objects(self, st: PodState) -> None:
        for plural in ("execs", "logs", "attaches", "portforwards"):
            with contextlib.suppress(Exception):
                self.api.request("DELETE", kwok_path(plural, st.namespace, st.name), ok404=True)

    # --- events and volumes --------------------------------------------------------------------

    def _event(
        self,
        involved: dict,
        typ: str,
        reason: str,
        message: str,
        component: str = "kubelet",
        host: str = "",
    ) -> None:
        """Record an Event as the kubelet's recorder does (a repeat counts up)."""
        key = (involved["uid"], reason, message)
        now = now_iso()
        ns = involved["namespace"]
        known = self.event_names.get(key)
        try:
            if known:
                name, count = known
                self.api.request(
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/events/{name}",
                    {"count": count + 1, "lastTimestamp": now},
                    content_type="application/merge-patch+json",
                )
                self.event_names[key] = (name, count + 1)
                return
            name = f"{involved['name']}.{time.time_ns():x}"
            source = {"component": component, **({"host": host} if host else {})}
            self.api.request(
                "POST",
                f"/api/v1/namespaces/{ns}/events",
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": name, "namespace": ns},
                    "involvedObject": involved,
                    "reason": reason,
                    "message": message,
                    "type": typ,
                    "source": source,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                    "reportingComponent": component,
                    "reportingInstance": host,
                },
            )
            self.event_names[key] = (name, 1)
        except (ApiError, OSError) as e:
            log(f"event {reason} for {ns}/{involved['name']}: {e}")
            self.event_names.pop(key, None)

    def _pod_event(self, st: PodState, typ: str, reason: str, message: str) -> None:
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": st.namespace,
            "name": st.name,
            "uid": st.uid,
        }
        self._event(involved, typ, reason, message, host=st.spec.get("nodeName", ""))

    def _mount(self, st: PodState) -> None:
        """Set up the pod's volumes in a mount namespace of its own (podvolumes.py), on a worker
        thread (API reads, a holder and a helper process: ~0.1 s) so that other pods go on; a
        volume that cannot be set up yet is a FailedMount Event and a retry with back-off."""
        if st.mount_job is None:
            if time.time() >= st.mount_next:
                st.mount_job = self.mounter.submit(self._mount_work, st)
            return
        if not st.mount_job.done():
            return
        job, st.mount_job = st.mount_job, None
        try:
            resolver, plan, proc = job.result()
        except podvolumes.MountFailures as e:
            self._drop_ns(st)
            for volume, message in e.failures:
                self._pod_event(
                    st,
                    "Warning",
                    "FailedMount",
                    f'MountVolume.SetUp failed for volume "{volume}" : {message}',
                )
            st.mount_delay = min(max(st.mount_delay * 2, MOUNT_BACKOFF_INITIAL), MOUNT_BACKOFF_MAX)
            st.mount_next = time.time() + st.mount_delay
            return
        except Exception as e:
            self._drop_ns(st)
            log(f"{st.namespace}/{st.name}: volumes: {type(e).__name__}: {e}")
            st.mount_next = time.time() + 2.0
            return
        if proc is not None:
            self._children.append(proc)
        if st.finished or st.terminating or st.deleted_api:
            self._drop_ns(st)  # the pod went while its volumes were being set up
            return
        st.mounted = True
        if proc is not None:
            st.volume_sync = resolver.sync_state(time.time())
            st.next_volume_sync = time.time() + VOLUME_SYNC
        self._cond(st, "PodReadyToStartContainers", "True")
        st.save()
        if proc is not None:
            log(f"{st.namespace}/{st.name}: {len(plan.binds)} mounts in its namespace")

    def _mount_work(self, st: PodState) -> tuple[podvolumes.Resolver, podvolumes.Plan, Any]:
        """The mounting itself (a worker thread): returns the holder process, if any."""
        node = self.nodes.get(st.spec.get("nodeName"), {})
        resolver = podvolumes.Resolver(
            self.api,
            st.pod,
            st.dir,
            allocatable=(node.get("status") or {}).get("allocatable") or {},
            env_of=lambda c: self._env(st, c),
        )
        plan = resolver.plan()
        if not plan.binds:
            for d in plan.dirs:
                Path(d).mkdir(mode=0o777, parents=True, exist_ok=True)
            return resolver, plan, None
        # not mounted yet: whatever namespace an earlier try left is dropped
        self._drop_ns(st)
        proc = podvolumes.start_holder(st.dir, {ENV_RUN: str(self.run), ENV_POD: st.uid})
        try:
            podvolumes.apply(proc.pid, plan)
        except BaseException:
            proc.kill()
            proc.wait()
            (st.dir / podvolumes.NS_FILE).unlink(missing_ok=True)
            raise
        return resolver, plan, proc

    def _sync_volumes(self, st: PodState) -> None:
        """Rewrite the file volumes whose ConfigMap/Secret changed or whose token is due, in
        the pod's namespace (the kubelet's AtomicWriter swap: readers never see half)."""
        now = time.time()
        st.next_volume_sync = now + VOLUME_SYNC
        holder = podvolumes.holder_alive(st.dir)
        if holder is None:
            return
        seen: dict[str, str] = {}
        due = set()
        for vol, info in st.volume_sync.items():
            if info.get("ttl") and now - info["at"] > 0.8 * info["ttl"]:
                due.add(vol)
                continue
            for ref, rv in info.get("refs", {}).items():
                if ref not in seen:
                    obj = self.api.get(f"/api/v1/namespaces/{st.namespace}/{ref}", ok404=True)
                    seen[ref] = ((obj or {}).get("metadata") or {}).get("resourceVersion", "")
                if seen[ref] != rv:
                    due.add(vol)
        if not due:
            return
        node = self.nodes.get(st.spec.get("nodeName"), {})
        resolver = podvolumes.Resolver(
            self.api,
            st.pod,
            st.dir,
            allocatable=(node.get("status") or {}).get("allocatable") or {},
            env_of=lambda c: self._env(st, c),
        )
        try:
            podvolumes.apply(holder, resolver.refresh_plan(due))
        except podvolumes.MountFailures as e:  # the old files stay, as with the kubelet
            for volume, message in e.failures:
                self._pod_event(
                    st,
                    "Warning",
                    "FailedMount",
                    f'MountVolume.SetUp failed for volume "{volume}" : {message}',
                )
            return
        st.volume_sync.update(resolver.sync_state(now))
        st.save()
        log(f"{st.namespace}/{st.name}: volumes updated: {', '.join(sorted(due))}")

    def _drop_ns(self, st: PodState) -> None:
        holder = podvolumes.holder_alive(st.dir)
        if holder:
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder, signal.SIGKILL)
        (st.dir / podvolumes.NS_FILE).unlink(missing_ok=True)

    def _ns_spec(self, st: PodState) -> dict | None:
        """Where a container of the pod enters its namespace: the holder's, or (the holder
        gone) any process still in it."""
        info = podvolumes.read_ns(st.dir)
        if not info:
            return None
        pid = podvolumes.holder_alive(st.dir)
        if pid is None:  # a process of this pod (its marker) still in the namespace
            uid = st.uid.encode()
            pid = next(
                (
                    p
                    for p, _s, marks, ns in scan_processes(True)
                    if ns == info["mnt"] and marks.get(ENV_POD.encode()) == uid
                ),
                None,
            )
        if pid is None:
            raise OSError(f"the pod's mount namespace {info['mnt']} is gone")
        return {"path": f"/proc/{pid}/ns/mnt", "mnt": info["mnt"]}

    # --- containers ---------------------------------------------------------------------------

    def _spec_of(self, st: PodState, name: str) -> dict:
        for c in (st.spec.get("initContainers") or []) + (st.spec.get("containers") or []):
            if c["name"] == name:
                return c
        raise KeyError(name)

    def _start(self, st: PodState, cs: CState) -> None:
        if st.terminating or st.pod["metadata"].get("deletionTimestamp"):
            return  # the kubelet starts no container of a terminating pod
        c = self._spec_of(st, cs.name)
        try:
            env = self._env(st, c)
        except (EnvError, ApiError) as e:
            cs.waiting = ("CreateContainerConfigError", str(e))
            cs.next_start = time.time() + 2.0
            # kuberuntime_container.go: recordContainerEvent(..., FailedToCreateContainer, ...)
            self._pod_event(st, "Warning", "Failed", f"Error: {e}")
            return
        try:
            ns = self._ns_spec(st)
        except OSError as e:
            cs.waiting = ("CreateContainerError", str(e))
            cs.next_start = time.time() + 2.0
            return
        argv = container_argv(c, env)
        logp = st.dir / "logs" / f"{cs.name}.log"
        if cs.attempt > 0:
            with contextlib.suppress(OSError):
                os.replace(logp, st.dir / "logs" / f"{cs.name}.previous.log")
            logp.touch()
        cs.attempt += 1
        rdir = st.dir / "containers" / f"{cs.name}-{cs.attempt}"
        rdir.mkdir(parents=True, exist_ok=True)
        spec = {"argv": argv, "env": env, "cwd": str(st.dir / "work"), "log": str(logp)}
        if ns:
            spec["ns"] = ns
        _atomic_write(rdir / "spec.json", json.dumps(spec))
        shim_env = {
            "PATH": os.environ.get("PATH", STANDARD_PATH),
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            ENV_SHIM: f"{self.run}:{st.uid}",
        }
        with open(rdir / "shim.log", "ab") as shim_log:
            proc = subprocess.Popen(
                [sys.executable, "-S", "-m", "devtools.realstack.podrunner", "shim", str(rdir)],
                cwd=str(Path(__file__).resolve().parents[2]),
                env=shim_env,
                stdin=subprocess.DEVNULL,
                stdout=shim_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (rdir / "shim.pid").write_text(str(proc.pid))
        self._children.append(proc)
        cs.run = Run(rdir)
        cs.waiting = None
        cs.terminated = None
        st.save()
        log(f"{st.namespace}/{st.name}: started {cs.name} (attempt {cs.attempt}): {argv}")

    def _wait_started(self, cs: CState, timeout: float = 5.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline and cs.run and not cs.run.pid and cs.run.result is None:
            cs.run.refresh()
            time.sleep(0.01)

    def _policy(self, st: PodState, cs: CState) -> str:
        if cs.sidecar:
            return "Always"
        if cs.init:
            rp = st.spec.get("restartPolicy", "Always")
            return "Never" if rp == "Never" else "OnFailure"
        return st.spec.get("restartPolicy", "Always")

    def _on_exit(self, st: PodState, cs: CState) -> None:
        r = cs.run.result
        term = {
            "exitCode": r["exitCode"],
            "reason": r["reason"],
            "startedAt": r.get("startedAt") or cs.run.started_at,
            "finishedAt": r["finishedAt"],
            "containerID": self._cid(st, cs),
        }
        if r.get("signal"):
            term["signal"] = r["signal"]
        if r.get("message"):
            term["message"] = r["message"]
        # the container's pid namespace ends: its exec'd processes go too
        sessions = {cs.run.pid} if cs.run.pid else set()
        sweep(self.run, st.uid, container=cs.name, sessions=sessions)
        log(f"{st.namespace}/{st.name}: {cs.name} exited {r['exitCode']} ({r['reason']})")
        policy = self._policy(st, cs)
        restart = not st.terminating and (
            policy == "Always" or (policy == "OnFailure" and r["exitCode"] != 0)
        )
        if cs.init and not cs.sidecar and r["exitCode"] == 0:
            cs.done_ok = True
            restart = False
        if restart:
            delay = (
                0.0
                if cs.restart_count == 0
                else min(BACKOFF_INITIAL * 2 ** (cs.restart_count - 1), BACKOFF_MAX)
            )
            ran = (parse_time(r["finishedAt"]) or 0) - (parse_time(term["startedAt"]) or 0)
            if ran > 600:
                delay = 0.0
            cs.last = term
            cs.terminated = None
            cs.restart_count += 1
            cs.next_start = time.time() + delay
            cs.waiting = (
                (
                    "CrashLoopBackOff",
                    f"back-off {int(delay)}s restarting failed container={cs.name} "
                    f"pod={st.name}_{st.namespace}({st.uid})",
                )
                if delay
                else ("ContainerCreating", "")
            )
            cs.run = None
        else:
            cs.terminated = term
            cs.run = None
            cs.waiting = None
            if cs.init and not cs.sidecar and r["exitCode"] != 0:
                st.failed_init = True
        st.save()

    def _cid(self, st: PodState, cs: CState) -> str:
        return f"realstack://{st.uid}-{cs.name}-{cs.attempt}"

    # --- the pod's life -----------------------------------------------------------------------

    def step(self, st: PodState) -> None:
        if st.finished:
            if st.mount_job is not None:
                self._mount(st)  # collects it and drops the namespace it made
            return
        if st.pod["metadata"].get("deletionTimestamp") and not st.terminating:
            # before the exits below are recorded: no restart for a terminating pod
            st.terminating = True
            log(f"{st.namespace}/{st.name}: deletion requested: stopping its containers")
        self._refresh_runs(st)
        if st.deleted_api:
            self._kill_now(st)
            st.finished = True
            st.save()
            log(f"{st.namespace}/{st.name}: removed from the API: processes ended")
            return
        meta = st.pod["metadata"]
        if meta.get("deletionTimestamp"):
            self._terminate(st)
            return
        if st.phase in ("Succeeded", "Failed"):
            self._publish(st)
            return
        if not st.containers:
            self._prepare(st)
        if not st.mounted:
            self._mount(st)
            if not st.mounted:
                self._publish(st)
                return
        if st.volume_sync and time.time() >= st.next_volume_sync and not st.terminating:
            try:
                self._sync_volumes(st)
            except (ApiError, OSError, subprocess.SubprocessError) as e:
                log(f"{st.namespace}/{st.name}: volume sync: {e}")
        now = time.time()
        # init containers, in order
        inits = [cs for cs in st.containers.values() if cs.init]
        initialized = True
        if not st.failed_init:
            for cs in inits:
                if cs.done_ok:
                    continue
                if cs.sidecar and (cs.run is not None or cs.restart_count > 0):
                    if cs.run is None and now >= cs.next_start and cs.terminated is None:
                        self._start(st, cs)
                    continue
                if cs.run is None and cs.terminated is None and now >= cs.next_start:
                    self._start(st, cs)
                    if cs.sidecar:
                        continue
                initialized = False
                break
        else:
            initialized = False
        if initialized:
            self._cond(st, "Initialized", "True")
            for cs in st.containers.values():
                if cs.init:
                    if (
                        cs.sidecar
                        and cs.run is None
                        and cs.terminated is None
                        and now >= cs.next_start
                    ):
                        self._start(st, cs)
                    continue
                if cs.run is None and cs.terminated is None and now >= cs.next_start:
                    self._start(st, cs)
        self._phase(st)
        self._publish(st)

    def _phase(self, st: PodState) -> None:
        before = st.phase
        self._compute_phase(st)
        if st.phase != before:
            st.save()

    def _compute_phase(self, st: PodState) -> None:
        mains = [cs for cs in st.containers.values() if not cs.init]
        policy = st.spec.get("restartPolicy", "Always")
        if st.failed_init:
            st.phase = "Failed"
        elif mains and all(cs.terminated is not None for cs in mains):
            st.phase = (
                "Succeeded" if all(cs.terminated["exitCode"] == 0 for cs in mains) else "Failed"
            )
        elif any(
            cs.run is not None or cs.terminated is not None or cs.restart_count for cs in mains
        ):
            st.phase = "Running"
        else:
            st.phase = "Pending"
        if policy == "Always" and st.phase in ("Succeeded", "Failed") and not st.failed_init:
            st.phase = "Running"  # cannot happen (they restart), kept for safety
        ready = st.phase == "Running" and all(cs.run is not None for cs in mains)
        ready = ready and all(cs.run is not None for cs in st.containers.values() if cs.sidecar)
        if st.phase in ("Succeeded", "Failed"):
            self._cond(st, "ContainersReady", "False", "PodCompleted")
            self._cond(st, "Ready", "False", "PodCompleted")
            self._cond(st, "PodReadyToStartContainers", "False")
            self._end_sidecars(st)
        else:
            self._cond(
                st,
                "ContainersReady",
                "True" if ready else "False",
                "" if ready else "ContainersNotReady",
            )
            self._cond(
                st, "Ready", "True" if ready else "False", "" if ready else "ContainersNotReady"
            )

    def _end_sidecars(self, st: PodState) -> None:
        for cs in st.containers.values():
            if cs.run is not None and (cs.sidecar or st.failed_init):
                self._signal_main(cs, signal.SIGTERM)
        if not any(cs.run is not None for cs in st.containers.values()) and not st.killed:
            sweep(self.run, st.uid)
            st.killed = True

    def _cond(
        self, st: PodState, typ: str, status: str, reason: str = "", message: str = ""
    ) -> None:
        old = st.conditions.get(typ)
        if old and old[0] == status and old[2] == reason:
            return
        st.conditions[typ] = (status, now_iso(), reason, message)

    def _signal_main(self, cs: CState, sig: int) -> None:
        if cs.run and cs.run.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(cs.run.pid, sig)

    def _grace_deadline(self, st: PodState) -> float:
        meta = st.pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = st.spec.get("terminationGracePeriodSeconds", 30)
        ts = parse_time(meta.get("deletionTimestamp"))
        if not hasattr(st, "_term_start"):
            st._term_start = time.time()  # type: ignore[attr-defined]
        return min(ts if ts is not None else math.inf, st._term_start + grace)  # type: ignore[attr-defined]

    def _refresh_runs(self, st: PodState) -> None:
        """Read what the supervisors wrote (pids, exits); record the exits."""
        for cs in st.containers.values():
            if cs.run is not None:
                cs.run.refresh()
                if cs.run.result is not None:
                    self._on_exit(st, cs)

    def _terminate(self, st: PodState) -> None:
        """The kubelet's killPod for a pod with a deletionTimestamp. No container starts any
        more (pod_workers.go: a terminating pod goes to SyncTerminatingPod, never SyncPod
        again). Each container's main process gets the stop signal as soon as its pid is known,
        also one whose start was in flight when the deletion came (its supervisor spawned, the
        pid not yet written): called every loop, this signals it the moment the pid appears
        (kuberuntime_container.go killContainer: StopContainer with the grace period). At the
        end of the grace period, SIGKILL to every process of the pod."""
        st.terminating = True
        self._refresh_runs(st)
        running = [cs for cs in st.containers.values() if cs.run is not None]
        for cs in running:
            cs.run.stop(signal.SIGTERM)
        if running and time.time() < self._grace_deadline(st):
            self._publish(st)
            return
        if running:
            for cs in running:
                sessions = {cs.run.pid} if cs.run.pid else set()
                sweep(self.run, st.uid, sessions=sessions)
            # let the supervisors record the exits
            deadline = time.time() + 2.0
            while time.time() < deadline and any(
                cs.run is not None and (cs.run.refresh() or cs.run.result is None) for cs in running
            ):
                time.sleep(0.02)
            for cs in running:
                if cs.run is not None:
                    cs.run.refresh()
                    if cs.run.result is None:
                        # its supervisor recorded no exit (it may not have started the process
                        # yet): it goes too, so that it cannot start one after the sweep below
                        with contextlib.suppress(OSError, ValueError):
                            os.kill(int((cs.run.dir / "shim.pid").read_text()), signal.SIGKILL)
                        cs.run.result = {
                            "exitCode": 137,
                            "reason": "Error",
                            "finishedAt": now_iso(),
                            "startedAt": cs.run.started_at,
                        }
                    self._on_exit(st, cs)
        sweep(self.run, st.uid)
        for cs in st.containers.values():
            if cs.run is None and cs.terminated is None and cs.waiting is not None and not cs.init:
                pass  # never started: stays waiting
        mains = [cs for cs in st.containers.values() if not cs.init]
        if st.phase not in ("Succeeded", "Failed"):
            ok = mains and all(
                cs.terminated is not None and cs.terminated["exitCode"] == 0 for cs in mains
            )
            st.phase = "Succeeded" if ok else "Failed"
        self._cond(
            st,
            "ContainersReady",
            "False",
            "PodCompleted" if st.phase == "Succeeded" else "ContainersNotReady",
        )
        self._cond(
            st,
            "Ready",
            "False",
            "PodCompleted" if st.phase == "Succeeded" else "ContainersNotReady",
        )
        self._cond(st, "PodReadyToStartContainers", "False")
        self._publish(st)
        if not self._final_delete(st.namespace, st.name, st.uid):
            return
        if st.kwok_objects:  # made by an older runner
            self._delete_kwok_objects(st)
        st.finished = True
        st.save()
        log(f"{st.namespace}/{st.name}: terminated ({st.phase}) and deleted")

    def _final_delete(self, namespace: str, name: str, uid: str) -> bool:
        """Delete with grace 0 and a UID precondition (the kubelet's status manager)."""
        try:
            self.api.request(
                "DELETE",
                pod_path(namespace, name),
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": uid},
                },
                ok404=True,
            )
        except ApiError as e:
            if e.status != 409:  # 409: a pod of the same name with another uid
                log(f"{namespace}/{name}: final delete: {e}")
                return False
        except OSError as e:
            log(f"{namespace}/{name}: final delete: {e}")
            return False
        return True

    def _kill_now(self, st: PodState) -> None:
        sessions = {cs.run.pid for cs in st.containers.values() if cs.run and cs.run.pid}
        sweep(self.run, st.uid, sessions=sessions)
        deadline = time.time() + 2.0
        while time.time() < deadline and shims_of(self.run, st.uid):
            time.sleep(0.02)
        kill_all(shims_of(self.run, st.uid), signal.SIGKILL)

    # --- status -----------------------------------------------------------------------------

    def _cstatus(self, st: PodState, cs: CState) -> dict:
        c = self._spec_of(st, cs.name)
        out: dict[str, Any] = {
            "name": cs.name,
            "image": c.get("image", ""),
            "imageID": "",
            "restartCount": cs.restart_count,
            "ready": False,
            "started": False,
            "lastState": {"terminated": cs.last} if cs.last else {},
        }
        if cs.run is not None:
            started = cs.run.started_at or now_iso()
            if not cs.run.started_at:
                cs.run.refresh()
                started = cs.run.started_at or started
            out["state"] = {"running": {"startedAt": started}}
            out["ready"] = not st.terminating
            out["started"] = True
            out["containerID"] = self._cid(st, cs)
        elif cs.terminated is not None:
            out["state"] = {"terminated": cs.terminated}
            out["containerID"] = cs.terminated.get("containerID", "")
        else:
            reason, msg = cs.waiting or ("ContainerCreating", "")
            w = {"reason": reason}
            if msg:
                w["message"] = msg
            out["state"] = {"waiting": w}
        if cs.init and not cs.sidecar:
            out["ready"] = cs.terminated is not None and cs.terminated["exitCode"] == 0
            out["started"] = cs.run is not None
        if cs.sidecar:
            out["restartPolicy"] = "Always"
        return out

    def _publish(self, st: PodState) -> None:
        spec = st.spec
        conds = []
        for typ, (status, ts, reason, msg) in st.conditions.items():
            cnd = {"type": typ, "status": status, "lastTransitionTime": ts, "lastProbeTime": None}
            if reason:
                cnd["reason"] = reason
            if msg:
                cnd["message"] = msg
            conds.append(cnd)
        status = {
            "phase": st.phase,
            "conditions": conds,
            "hostIP": POD_IP,
            "hostIPs": [{"ip": POD_IP}],
            "podIP": POD_IP,
            "podIPs": [{"ip": POD_IP}],
            "startTime": st.start_time or now_iso(),
            "containerStatuses": [
                self._cstatus(st, st.containers[c["name"]])
                for c in spec.get("containers") or []
                if c["name"] in st.containers
            ],
        }
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                self._cstatus(st, st.containers[c["name"]])
                for c in spec["initContainers"]
                if c["name"] in st.containers
            ]
        body = json.dumps({"status": status}, sort_keys=True)
        if body == st.last_status:
            return
        try:
            self.api.request(
                "PATCH",
                pod_path(st.namespace, st.name, "status"),
                body.encode(),
                content_type="application/strategic-merge-patch+json",
            )
            st.last_status = body
        except ApiError as e:
            if e.status == 404:
                st.deleted_api = True
            else:
                log(f"{st.namespace}/{st.name}: status: {e}")
        except OSError as e:
            log(f"{st.namespace}/{st.name}: status: {e}")

    # --- main loop ----------------------------------------------------------------------------

    def _handle_events(self, wait: float) -> None:
        """Handle the queued watch events, waiting up to ``wait`` seconds for more."""
        deadline = time.time() + wait
        queued = self.events.qsize()  # without a wait: those only (a flood cannot hold it)
        while True:
            timeout = deadline - time.time()
            if timeout <= 0 and queued <= 0:
                return
            queued -= 1
            try:
                kind, typ, obj = self.events.get(timeout=max(timeout, 0.0))
            except queue.Empty:
                return
            try:
                self.handle(kind, typ, obj)
            except Exception:
                log(f"event {kind} {typ}: {traceback.format_exc()}")

    def serve(self, ready_file: Path | None) -> None:
        self.start_watches()
        announced = False
        while not self.stop.is_set():
            self._handle_events(0.1)
            if not announced and all(self.synced.values()):
                announced = True
                self._orphans()
                if ready_file:
                    _atomic_write(ready_file, str(os.getpid()))
                log(f"synced: {len(self.nodes)} nodes, {len(self.pods)} pods here")
            for uid, st in list(self.pods.items()):
                # what came while the pods before it were stepped: a deletion is seen before
                # the step would start a container of the pod
                self._handle_events(0.0)
                try:
                    self.step(st)
                except Exception:
                    log(f"{st.namespace}/{st.name}: {traceback.format_exc()}")
                if st.finished and uid not in self.all_pods and st.mount_job is None:
                    del self.pods[uid]
            self._children = [p for p in self._children if p.poll() is None]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["shim"]:
        return shim_main(Path(argv[1]))
    parser = argparse.ArgumentParser(prog="python -m devtools.realstack.podrunner")
    parser.add_argument("--run", required=True, type=Path, help="the stack's run directory")
    parser.add_argument("--kubeconfig", type=Path, help="default: RUN/admin.kubeconfig")
    args = parser.parse_args(argv)
    run = args.run.resolve()
    runner = Runner(run, args.kubeconfig or run / "admin.kubeconfig")
    signal.signal(signal.SIGTERM, lambda *_: runner.stop.set())
    signal.signal(signal.SIGINT, lambda *_: runner.stop.set())
    log(f"podrunner for {run} (apiserver {runner.api.server})")
    (run / "podrunner").mkdir(exist_ok=True)
    ready = run / "podrunner" / "ready"
    ready.unlink(missing_ok=True)
    runner.serve(ready)
    log("podrunner stopping (pods keep running; `nodes.stop` ends them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
