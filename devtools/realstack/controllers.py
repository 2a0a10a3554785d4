"""The JobSet, Trainer and Kueue controller-managers, built from their release modules and run
out of cluster as local processes against the stack's kube-apiserver.

What each gets, read from its own module in the Go module cache (never copied here):
- its release kustomization built by ``manifests.build`` (JobSet and Kueue ``config/default``,
  Trainer ``manifests/overlays/manager`` and ``overlays/runtimes``): CRDs, RBAC, webhook
  configurations, Kueue's APIServices, with the name prefixes, namespaces and selectors
  kustomize adds;
- its Configuration from the module's own ``controller_manager_config.yaml``, changed only where
  running out of cluster needs it: leader election off, built-in cert management off, ports of
  its own on 127.0.0.1, webhook certificate folder;
- an identity of its own: its upstream ServiceAccount, with a TokenRequest token, so the
  upstream (Cluster)RoleBindings authorise it exactly as in a cluster. ``TRAINJOB_MAGICS_REALSTACK_
  CONTROLLER_IDENTITY=admin`` runs them with the admin kubeconfig instead;
- serving certificates from the stack's CA with SAN ``<service>.<namespace>.svc``; every
  ``service`` reference (webhooks, CRD conversion, APIService) goes to an ExternalName Service
  ``externalName: 127.0.0.1`` and the controller's port. kube-apiserver resolves an ExternalName
  Service to ``externalName:port`` (k8s.io/apiserver/pkg/util/proxy/proxy.go ``ResolveCluster``,
  v0.36.3) with TLS server name ``<service>.<namespace>.svc``; ``127.0.0.1`` passes Service
  validation (a DNS-1123 subdomain, pkg/apis/core/validation/validation.go at v1.36.3).

Hard-coded paths, and how two stacks on one machine are kept apart:
- Kueue reads its metrics certificate from ``/etc/kueue/metrics/certs`` and the visibility
  server's from ``/visibility`` when internal cert management is off (cmd/kueue/main.go,
  pkg/visibility/server.go). Kueue runs in a private mount namespace (``unshare -m``) with the
  stack's folder bind-mounted on each, so nothing of one stack is visible to another. Without
  ``unshare`` (not root, no CAP_SYS_ADMIN) the files are written to those paths: then two stacks
  on one machine overwrite each other's Kueue certificates.
- Kueue v0.14 binds the visibility server to the fixed port 8082 (pkg/visibility/server.go at
  v0.14.8) and builds its delegated authentication from the in-cluster config (no
  ``--kubeconfig`` lookup before v0.17): the stack gives it ``KUBERNETES_SERVICE_HOST/PORT`` and
  a ServiceAccount token (TokenRequest) mounted at /run/secrets/kubernetes.io/serviceaccount
  inside its mount namespace. Two v0.14 stacks cannot run at once (port 8082).
- Trainer's webhook server uses controller-runtime's default ``$TMPDIR/k8s-webhook-server/
  serving-certs`` (sigs.k8s.io/controller-runtime pkg/webhook/server.go); the stack gives it a
  TMPDIR of its own. Only its status server (gate TrainJobStatus, off) hard-codes /tmp/...
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devtools.realstack import gobuild, manifests, procs
from devtools.realstack.context import StackContext
from devtools.realstack.manifests import Obj
from devtools.realstack.procs import StackError

ENV_IDENTITY = "TRAINJOB_MAGICS_REALSTACK_CONTROLLER_IDENTITY"
FIELD_MANAGER = "trainjob-magics-realstack"
EXTERNAL_NAME = "127.0.0.1"

MODULES = {
    "jobset": "sigs.k8s.io/jobset",
    "trainer": "github.com/kubeflow/trainer/v2",
    "kueue": "sigs.k8s.io/kueue",
}
# Kueue integrations the stack turns on (the upstream config also lists frameworks whose CRDs
# are not installed here: Ray, MPIJob, AppWrapper, LWS, and plain pods/deployments/statefulsets)
KUEUE_FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob")
KUEUE_HARDCODED = ("/etc/kueue/metrics/certs", "/visibility")
SA_MOUNT = "/run/secrets/kubernetes.io/serviceaccount"

APPLY_KINDS = (
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
)
WIRED_KINDS = (*manifests.WEBHOOK_KINDS, "APIService")


@dataclass
class Controller:
    """One controller-manager: where its manifests are, what it is called, its ports."""

    name: str  # jobset | trainer | kueue
    version: str
    namespace: str
    service_account: str
    objects: list[Obj] = field(default_factory=list)
    runtimes: list[Obj] = field(default_factory=list)
    # (namespace, service) -> port, for every service a webhook / APIService / CRD refers to
    services: dict[tuple[str, str], int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    @property
    def module(self) -> str:
        return MODULES[self.name]


def _log(ctx: StackContext) -> Path:
    return ctx.run / "logs" / "controllers-setup.log"


def _dir(ctx: StackContext, name: str) -> Path:
    path = ctx.run / "controllers" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


_MODULE_DIRS: dict[tuple[str, str], Path] = {}


def module_dir(ctx: StackContext, name: str, version: str) -> Path:
    """The module's read-only folder in the Go module cache (one ``go mod download`` each)."""
    key = (name, version)
    if key not in _MODULE_DIRS:
        _MODULE_DIRS[key] = gobuild.module_dir(MODULES[name], version, _log(ctx))
    return _MODULE_DIRS[key]


# --- manifests -----------------------------------------------------------------------------------


def plan(ctx: StackContext) -> list[Controller]:
    """The three controllers with their manifests built from the modules (no cluster needed)."""
    v = ctx.versions.resolved()
    out = [_jobset(ctx, v.jobset), _trainer(ctx, v.trainer)]
    if v.kueue:
        out.append(_kueue(ctx, v.kueue))
    return out


def _jobset(ctx: StackContext, version: str) -> Controller:
    b = manifests.build(module_dir(ctx, "jobset", version) / "config" / "default")
    c = Controller(
        "jobset",
        version,
        "jobset-system",
        "jobset-controller-manager",
        b.objects,
        skipped=b.skipped,
    )
    return _ports(ctx, c)


def _trainer(ctx: StackContext, version: str) -> Controller:
    root = module_dir(ctx, "trainer", version) / "manifests"
    b = manifests.build(root / "overlays" / "manager")
    runtimes_dir = root / "overlays" / "runtimes"
    rt = manifests.build(runtimes_dir if runtimes_dir.is_dir() else root / "base" / "runtimes")
    c = Controller(
        "trainer",
        version,
        "kubeflow-system",
        "kubeflow-trainer-controller-manager",
        b.objects,
        rt.of_kind("ClusterTrainingRuntime"),
        skipped=b.skipped + rt.skipped,
    )
    return _ports(ctx, c)


def _kueue(ctx: StackContext, version: str) -> Controller:
    b = manifests.build(module_dir(ctx, "kueue", version) / "config" / "default")
    c = Controller(
        "kueue", version, "kueue-system", "kueue-controller-manager", b.objects, skipped=b.skipped
    )
    return _ports(ctx, c)


def _ports(ctx: StackContext, c: Controller) -> Controller:
    """Give every referenced Service a port: the webhook port, or Kueue's visibility port."""
    for o in c.objects:
        for ref in _service_refs(o):
            key = (ref["namespace"], ref["name"])
            if key not in c.services:
                if o["kind"] == "APIService":
                    c.services[key] = visibility_port(ctx, c)
                else:
                    c.services[key] = ctx.port(f"{c.name}-webhook")
    return c


def visibility_port(ctx: StackContext, c: Controller) -> int:
    if c.name == "kueue" and not _kueue_has(ctx, c.version, 'json:"visibilityServer'):
        return 8082  # hard-coded before v0.17 (pkg/visibility/server.go at v0.14.8)
    return ctx.port("kueue-visibility")


def _service_refs(o: Obj) -> list[dict]:
    kind = o.get("kind")
    if kind in manifests.WEBHOOK_KINDS:
        refs = [wh.get("clientConfig", {}).get("service") for wh in o.get("webhooks", []) or []]
    elif kind == "APIService":
        refs = [o.get("spec", {}).get("service")]
    elif kind == "CustomResourceDefinition":
        refs = [
            o.get("spec", {})
            .get("conversion", {})
            .get("webhook", {})
            .get("clientConfig", {})
            .get("service")
        ]
    else:
        refs = []
    return [r for r in refs if r]


def _wire(o: Obj, c: Controller, ca_b64: str) -> Obj:
    """Point the object's service references at our ports, with the stack CA as caBundle."""
    o = manifests.clean(o)
    kind = o["kind"]
    if kind in manifests.WEBHOOK_KINDS:
        for wh in o.get("webhooks", []) or []:
            cc = wh.setdefault("clientConfig", {})
            if "service" in cc:
                cc["service"]["port"] = c.services[
                    (cc["service"]["namespace"], cc["service"]["name"])
                ]
            cc["caBundle"] = ca_b64
    elif kind == "APIService":
        spec = o["spec"]
        spec["service"]["port"] = c.services[
            (spec["service"]["namespace"], spec["service"]["name"])
        ]
        spec.pop(
            "insecureSkipTLSVerify", None
        )  # as config/default/apiservice_insecure_removal.yaml
        spec["caBundle"] = ca_b64
    elif kind == "CustomResourceDefinition":
        cc = o.get("spec", {}).get("conversion", {}).get("webhook", {}).get("clientConfig")
        if cc and "service" in cc:
            cc["service"]["port"] = c.services[(cc["service"]["namespace"], cc["service"]["name"])]
            cc["caBundle"] = ca_b64
    return o


def external_services(c: Controller) -> list[Obj]:
    """An ExternalName Service for each referenced service, in place of the upstream ones."""
    out = []
    for (ns, name), port in sorted(c.services.items()):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
                    "annotations": {
                        "trainjob-magics.dev/realstack": f"{c.name} {c.version}, out of cluster"
                    },
                },
                "spec": {
                    "type": "ExternalName",
                    "externalName": EXTERNAL_NAME,
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                },
            }
        )
    return out


def setup_objects(c: Controller, ca_b64: str) -> list[Obj]:
    """Phase 1: namespaces, CRDs (conversion wired), RBAC, ExternalName Services."""
    objs = [_wire(o, c, ca_b64) for o in c.objects if o.get("kind") in APPLY_KINDS]
    objs.sort(key=lambda o: APPLY_KINDS.index(o["kind"]))
    return objs + external_services(c)


def wired_objects(c: Controller, ca_b64: str) -> list[Obj]:
    """Phase 2, once the controller serves: its webhook configurations and APIServices."""
    return [_wire(o, c, ca_b64) for o in c.objects if o.get("kind") in WIRED_KINDS]


# --- configuration -------------------------------------------------------------------------------


def _kueue_has(ctx: StackContext, version: str, needle: str) -> bool:
    apis = module_dir(ctx, "kueue", version) / "apis" / "config"
    return any(needle in p.read_text() for p in apis.glob("*/configuration_types.go"))


def _upstream_config(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def jobset_config(ctx: StackContext, c: Controller, certs: Path) -> dict:
    src = (
        module_dir(ctx, "jobset", c.version)
        / "config"
        / "components"
        / "manager"
        / "controller_manager_config.yaml"
    )
    cfg = _upstream_config(src)
    cfg.setdefault("leaderElection", {})["leaderElect"] = False
    cfg["internalCertManagement"] = {"enable": False}
    cfg["webhook"] = {
        **(cfg.get("webhook") or {}),
        "port": ctx.port("jobset-webhook"),
        "host": "127.0.0.1",
        "certDir": str(certs),
    }
    cfg["metrics"] = {
        **(cfg.get("metrics") or {}),
        "bindAddress": f"127.0.0.1:{ctx.port('jobset-metrics')}",
        "certDir": str(certs),
    }
    cfg["health"] = {
        **(cfg.get("health") or {}),
        "healthProbeBindAddress": f"127.0.0.1:{ctx.port('jobset-health')}",
    }
    return cfg


def trainer_config(ctx: StackContext, c: Controller) -> dict:
    src = (
        module_dir(ctx, "trainer", c.version)
        / "manifests"
        / "base"
        / "manager"
        / "controller_manager_config.yaml"
    )
    cfg = _upstream_config(src)
    cfg.setdefault("leaderElection", {})["leaderElect"] = False
    cfg.setdefault("certManagement", {})["enable"] = False
    cfg.setdefault("webhook", {}).update(port=ctx.port("trainer-webhook"), host="127.0.0.1")
    cfg.setdefault("metrics", {})["bindAddress"] = f"127.0.0.1:{ctx.port('trainer-metrics')}"
    cfg.setdefault("health", {})["healthProbeBindAddress"] = (
        f"127.0.0.1:{ctx.port('trainer-health')}"
    )
    if "statusServer" in cfg:
        cfg["statusServer"]["port"] = ctx.port("trainer-status")
    return cfg


def kueue_config(ctx: StackContext, c: Controller, certs: Path) -> dict:
    src = (
        module_dir(ctx, "kueue", c.version)
        / "config"
        / "components"
        / "manager"
        / "controller_manager_config.yaml"
    )
    cfg = _upstream_config(src)
    cfg["namespace"] = c.namespace
    cfg.setdefault("leaderElection", {})["leaderElect"] = False
    cfg["internalCertManagement"] = {"enable": False}
    cfg["webhook"] = {
        **(cfg.get("webhook") or {}),
        "port": ctx.port("kueue-webhook"),
        "host": "127.0.0.1",
        "certDir": str(certs),
    }
    cfg.setdefault("metrics", {})["bindAddress"] = f"127.0.0.1:{ctx.port('kueue-metrics')}"
    cfg.setdefault("health", {})["healthProbeBindAddress"] = f"127.0.0.1:{ctx.port('kueue-health')}"
    cfg.setdefault("integrations", {})["frameworks"] = list(KUEUE_FRAMEWORKS)
    if _kueue_has(ctx, c.version, 'json:"visibilityServer'):
        cfg["visibilityServer"] = {"bindPort": visibility_port(ctx, c), "bindAddress": "127.0.0.1"}
    # managedJobsNamespaceSelector and waitForPodsReady: left to the version's defaults
    # (apis/config/<v>/defaults.go: all namespaces but kube-system and kueue-system)
    return cfg


# --- cluster access ------------------------------------------------------------------------------


def kubectl(
    ctx: StackContext,
    *args: str,
    input: str | None = None,
    check: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    cmd = ["kubectl", f"--kubeconfig={ctx.admin_kubeconfig}", *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise StackError(
            f"{' '.join(cmd[:1] + cmd[2:])} failed: {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


def apply(ctx: StackContext, objs: list[Obj], name: str) -> None:
    """Server-side apply (CRDs are too large for the client-side last-applied annotation)."""
    if not objs:
        return
    path = _dir(ctx, "manifests") / f"{name}.yaml"
    path.write_text(
        yaml.dump_all(objs, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
    )
    kubectl(
        ctx,
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        str(path),
    )


def _admin(ctx: StackContext) -> dict:
    return yaml.safe_load(ctx.admin_kubeconfig.read_text())


def _cluster_ca(ctx: StackContext) -> bytes:
    cluster = _admin(ctx)["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        return base64.b64decode(cluster["certificate-authority-data"])
    if "certificate-authority" in cluster:
        return Path(cluster["certificate-authority"]).read_bytes()
    return ctx.pki.ca_pem


def _server(ctx: StackContext) -> str:
    return _admin(ctx)["clusters"][0]["cluster"]["server"]


def identity_kubeconfig(ctx: StackContext, c: Controller) -> Path:
    """A kubeconfig for the controller's own ServiceAccount (a TokenRequest token, as a pod's
    projected token would be), or the admin's with
    ``TRAINJOB_MAGICS_REALSTACK_CONTROLLER_IDENTITY=admin``.

    Not a client certificate: ``system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-
    manager`` is 73 characters, over X.509's 64 for a CN (RFC 5280 ub-common-name), which the
    ``cryptography`` package enforces. The token lasts 48 h (client-go re-reads ``tokenFile``)."""
    if os.environ.get(ENV_IDENTITY) == "admin":
        return ctx.admin_kubeconfig
    d = _dir(ctx, c.name)
    token = d / "token"
    token.write_text(
        kubectl(
            ctx, "create", "token", c.service_account, "-n", c.namespace, "--duration=48h"
        ).stdout.strip()
    )
    token.chmod(0o600)
    ca = d / "cluster-ca.crt"
    ca.write_bytes(_cluster_ca(ctx))
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "realstack",
                "cluster": {"server": _server(ctx), "certificate-authority": str(ca)},
            }
        ],
        "users": [{"name": c.service_account, "user": {"tokenFile": str(token)}}],
        "contexts": [
            {
                "name": c.name,
                "context": {
                    "cluster": "realstack",
                    "user": c.service_account,
                    "namespace": c.namespace,
                },
            }
        ],
        "current-context": c.name,
    }
    path = d / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def serving_certs(ctx: StackContext, c: Controller) -> Path:
    """tls.crt/tls.key with every referenced ``<svc>.<ns>.svc`` (and localhost) as SANs."""
    dns: list[str] = []
    for ns, svc in sorted(c.services):
        dns += [f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local", f"{svc}.{ns}"]
    pair = ctx.pki.issue(
        f"{c.name}-serving",
        dns[0] if dns else c.name,
        dns=(*dns, "localhost"),
        ips=("127.0.0.1",),
        server=True,
    )
    certs = _dir(ctx, c.name) / "certs"
    certs.mkdir(exist_ok=True)
    # atomically: a running controller's certwatcher re-reads these files when they change
    _write_atomic(certs / "tls.crt", pair.cert.read_bytes())
    _write_atomic(certs / "tls.key", pair.key.read_bytes(), 0o600)
    _write_atomic(certs / "ca.crt", ctx.pki.ca_pem)
    return certs


def _write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


# --- processes -----------------------------------------------------------------------------------


def _process_name(c: Controller) -> str:
    return {"jobset": "jobset", "trainer": "trainer", "kueue": "kueue"}[c.name]


def _binary(ctx: StackContext, c: Controller) -> Path:
    out = gobuild.build(c.name, c.version, ctx.run / "logs" / "build.log")
    exe = {"jobset": "jobset", "trainer": "trainer-controller-manager", "kueue": "kueue"}[c.name]
    return out / exe


def _private_mounts_ok() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


def _launch(ctx: StackContext, c: Controller) -> None:
    d = _dir(ctx, c.name)
    certs = serving_certs(ctx, c)
    kubeconfig = identity_kubeconfig(ctx, c)
    exe = _binary(ctx, c)
    env: dict[str, str] = {}
    if c.name == "jobset":
        cfg = jobset_config(ctx, c, certs)
        (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        argv = [
            exe,
            f"--config={d / 'config.yaml'}",
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--zap-log-level=info",
        ]
    elif c.name == "trainer":
        cfg = trainer_config(ctx, c)
        (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        tmp = d / "tmp"
        (tmp / "k8s-webhook-server").mkdir(parents=True, exist_ok=True)
        serving = tmp / "k8s-webhook-server" / "serving-certs"
        if serving.is_symlink() or serving.exists():
            serving.unlink() if serving.is_symlink() else shutil.rmtree(serving)
        serving.symlink_to(certs)
        env["TMPDIR"] = str(tmp)
        argv = [
            exe,
            f"--config={d / 'config.yaml'}",
            f"--kubeconfig={kubeconfig}",
            "--zap-log-level=info",
        ]
    else:
        cfg = kueue_config(ctx, c, certs)
        (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        inner = [
            str(exe),
            f"--config={d / 'config.yaml'}",
            f"--kubeconfig={kubeconfig}",
            "--zap-log-level=2",
        ]
        if not _kueue_has(ctx, c.version, 'json:"visibilityServer') and not _port_free(8082):
            raise StackError(
                "Kueue < v0.17 serves its visibility API on the fixed port 8082, which is taken "
                "(another stack's Kueue v0.14?)"
            )
        sa_dir = (
            None
            if _visibility_reads_kubeconfig(ctx, c)
            else _kueue_in_cluster_identity(ctx, c, env)
        )
        if _private_mounts_ok():
            for path in KUEUE_HARDCODED:
                Path(path).mkdir(parents=True, exist_ok=True)  # empty mount points
            script = ["set -e"] + [f"mount --bind '{certs}' '{p}'" for p in KUEUE_HARDCODED]
            if sa_dir is not None:
                script += [
                    "mount -t tmpfs tmpfs /run",
                    f"mkdir -p {SA_MOUNT}",
                    f"mount --bind '{sa_dir}' {SA_MOUNT}",
                ]
            script.append("exec " + " ".join(f"'{a}'" for a in inner))
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)]
        else:
            for path in KUEUE_HARDCODED:  # shared by every stack on this machine
                Path(path).mkdir(parents=True, exist_ok=True)
                for f in ("tls.crt", "tls.key"):
                    shutil.copyfile(certs / f, Path(path) / f)
            if sa_dir is not None:
                raise StackError(
                    "Kueue < v0.17 needs an in-cluster identity for its visibility server, "
                    "which the stack mounts with `unshare -m` (needs root)"
                )
            argv = inner
    procs.start(ctx.run, _process_name(c), argv, env=env, cwd=d)


def _visibility_reads_kubeconfig(ctx: StackContext, c: Controller) -> bool:
    server = module_dir(ctx, "kueue", c.version) / "pkg" / "visibility" / "server.go"
    return 'flag.Lookup("kubeconfig")' in server.read_text()


def _kueue_in_cluster_identity(ctx: StackContext, c: Controller, env: dict[str, str]) -> Path:
    """Kueue < v0.17's visibility server builds its delegated authn/authz client from the
    in-cluster config only: give it a ServiceAccount token and the apiserver's address."""
    sa_dir = _dir(ctx, c.name) / "serviceaccount"
    sa_dir.mkdir(exist_ok=True)
    token = kubectl(
        ctx, "create", "token", c.service_account, "-n", c.namespace, "--duration=48h"
    ).stdout.strip()
    (sa_dir / "token").write_text(token)
    (sa_dir / "ca.crt").write_bytes(_cluster_ca(ctx))
    (sa_dir / "namespace").write_text(c.namespace)
    server = _server(ctx).removeprefix("https://")
    host, _, port = server.rpartition(":")
    env["KUBERNETES_SERVICE_HOST"] = host.strip("[]")
    env["KUBERNETES_SERVICE_PORT"] = port
    return sa_dir


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _health_url(ctx: StackContext, c: Controller) -> str:
    return f"http://127.0.0.1:{ctx.port(c.name + '-health')}/readyz"


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=3) as resp:
        return resp.status == 200


# --- readiness through the apiserver -------------------------------------------------------------


def kueue_api_version(ctx: StackContext) -> str:
    """The preferred served version of kueue.x-k8s.io (v1beta2 from v0.15, v1beta1 before)."""
    group = json.loads(kubectl(ctx, "get", "--raw", "/apis/kueue.x-k8s.io").stdout)
    return group["preferredVersion"]["groupVersion"]


def _dry_run(ctx: StackContext, obj: Obj) -> None:
    kubectl(ctx, "create", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(obj))


def probe_objects(ctx: StackContext, c: Controller) -> list[Obj]:
    """Objects whose server-side dry-run create goes through the controller's webhooks."""
    if c.name == "jobset":
        return [
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "realstack-probe", "namespace": "default"},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "w",
                            "replicas": 1,
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "containers": [{"name": "c", "image": "busybox"}],
                                        }
                                    }
                                }
                            },
                        }
                    ]
                },
            }
        ]
    if c.name == "trainer":
        return [
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "realstack-probe", "namespace": "default"},
                "spec": {"runtimeRef": {"name": "torch-distributed"}},
            }
        ]
    return [
        {
            "apiVersion": kueue_api_version(ctx),
            "kind": "ResourceFlavor",
            "metadata": {"name": "realstack-probe"},
            "spec": {},
        }
    ]


def _visibility_ok(ctx: StackContext) -> bool:
    out = kubectl(ctx, "get", "apiservices", "-o", "json", check=False)
    if out.returncode != 0:
        return False
    services = [
        s
        for s in json.loads(out.stdout)["items"]
        if s["spec"].get("group") == "visibility.kueue.x-k8s.io"
    ]
    ok = bool(services) and all(
        any(
            cond["type"] == "Available" and cond["status"] == "True"
            for cond in s.get("status", {}).get("conditions", [])
        )
        for s in services
    )
    return (
        ok
        and kubectl(
            ctx, "get", "--raw", "/apis/visibility.kueue.x-k8s.io/v1beta1", check=False
        ).returncode
        == 0
    )


def _wait_established(ctx: StackContext, crds: list[str]) -> None:
    """Poll (``kubectl wait`` fails at once while a new CRD has no conditions yet)."""

    def established() -> bool:
        out = kubectl(ctx, "get", "crd", *crds, "-o", "json", check=False)
        if out.returncode != 0:
            return False
        data = json.loads(out.stdout)
        items = data.get("items", [data])  # one name: the object itself
        return len(items) == len(crds) and all(
            any(
                cond["type"] == "Established" and cond["status"] == "True"
                for cond in i.get("status", {}).get("conditions") or []
            )
            for i in items
        )

    if crds:
        procs.wait_for(f"{len(crds)} CRDs Established", established, timeout=120)


# --- entry points --------------------------------------------------------------------------------


def start(ctx: StackContext) -> None:
    """Apply the controllers' manifests, start them, and wait until each one serves its webhooks
    through the apiserver (and Kueue its visibility API)."""
    t0 = time.monotonic()
    log = _log(ctx)
    log.parent.mkdir(parents=True, exist_ok=True)
    controllers = plan(ctx)
    ca_b64 = base64.b64encode(ctx.pki.ca_pem).decode()
    with open(log, "w") as out:
        for c in controllers:
            for s in c.skipped:
                out.write(f"{c.name} {c.version}: not applied: {s}\n")
    for c in controllers:
        _binary(ctx, c)  # build before touching the cluster
    for c in controllers:
        objs = setup_objects(c, ca_b64)
        apply(ctx, objs, f"{c.name}-setup")
        _wait_established(
            ctx, [o["metadata"]["name"] for o in objs if o["kind"] == "CustomResourceDefinition"]
        )
    for c in controllers:
        _launch(ctx, c)
    for c in controllers:
        procs.wait_for(
            f"{c.name} {c.version} ready ({_health_url(ctx, c)})",
            lambda c=c: _http_ok(_health_url(ctx, c)),
            timeout=180,
            run=ctx.run,
            name=_process_name(c),
        )
    for c in controllers:
        apply(ctx, wired_objects(c, ca_b64), f"{c.name}-webhooks")
    for c in controllers:
        if c.name == "trainer":
            # applied through Trainer's own validating webhook: the first proof that it is reachable
            procs.wait_for(
                "Trainer's ClusterTrainingRuntimes applied through its webhook",
                lambda c=c: (
                    apply(ctx, [manifests.clean(r) for r in c.runtimes], "trainer-runtimes") or True
                ),
                timeout=120,
                run=ctx.run,
                name="trainer",
            )
    for c in controllers:
        for probe in probe_objects(ctx, c):
            procs.wait_for(
                f"{c.name}'s webhooks through the apiserver (dry-run create {probe['kind']})",
                lambda probe=probe: _dry_run(ctx, probe) is None,
                timeout=120,
                run=ctx.run,
                name=_process_name(c),
            )
        if c.name == "kueue":
            procs.wait_for(
                "Kueue's visibility API (APIService Available)",
                lambda: _visibility_ok(ctx),
                timeout=120,
                run=ctx.run,
                name="kueue",
            )
    with open(log, "a") as out:
        out.write(
            f"controllers ready in {time.monotonic() - t0:.1f} s: "
            + ", ".join(f"{c.name} {c.version}" for c in controllers)
            + "\n"
        )


def stop(ctx: StackContext, names: tuple[str, ...] = ("kueue", "trainer", "jobset")) -> None:
    """Stop controller processes (their cluster objects and webhook configurations stay, as
    after a crash: with Kueue stopped, creates its webhooks cover fail, as on a real cluster)."""
    for name in names:
        procs.stop(ctx.run, name)


def restart(ctx: StackContext, name: str) -> None:
    """Start one controller again (after ``stop(ctx, (name,))``) and wait until it is ready and
    its webhooks answer through the apiserver (for the fault tests)."""
    c = next(c for c in plan(ctx) if c.name == name)
    _launch(ctx, c)
    procs.wait_for(
        f"{c.name} {c.version} ready",
        lambda: _http_ok(_health_url(ctx, c)),
        timeout=180,
        run=ctx.run,
        name=_process_name(c),
    )
    for probe in probe_objects(ctx, c):
        procs.wait_for(
            f"{c.name}'s webhooks through the apiserver",
            lambda probe=probe: _dry_run(ctx, probe) is None,
            timeout=120,
            run=ctx.run,
            name=_process_name(c),
        )


def status(ctx: StackContext) -> dict[str, Any]:
    out = {}
    for name in ("jobset", "trainer", "kueue"):
        out[name] = procs.pid_of(ctx.run, name)
    return out
