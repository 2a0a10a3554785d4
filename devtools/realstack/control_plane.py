"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler, set up as kubeadm would:
RBAC, service accounts with the token controller, admission webhooks, the aggregation layer,
a client CA with an admin user (system:masters) and a restricted user (``tjm-user``)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from devtools.realstack import gates, procs
from devtools.realstack.context import StackContext
from devtools.realstack.gobuild import build
from devtools.realstack.pki import KeyPair, Pki

RESTRICTED_USER = "tjm-user"
RESTRICTED_GROUP = "tjm-users"
SERVICE_CIDR = "10.96.0.0/16"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def _log(ctx: StackContext) -> Path:
    return ctx.run / "logs" / "build.log"


def kubeconfig(
    ctx: StackContext, path: Path, user: str, pair: KeyPair, *, server: str = ""
) -> Path:
    """A kubeconfig for ``user`` with its client certificate embedded (``server``: another
    address of the API server than 127.0.0.1)."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "realstack",
                "cluster": {
                    "server": server or ctx.apiserver_url,
                    "certificate-authority-data": b64(ctx.pki.ca.cert),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pair.cert),
                    "client-key-data": b64(pair.key),
                },
            }
        ],
        "contexts": [{"name": user, "context": {"cluster": "realstack", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def _certs(ctx: StackContext) -> dict[str, KeyPair]:
    pki = ctx.pki
    front = Pki(ctx.run / "pki" / "front-proxy", ca_name="front-proxy-ca")
    return {
        "apiserver": pki.issue(
            "apiserver",
            "kube-apiserver",
            dns=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            # 10.250.N.1: the relay the real node reaches the API server through
            ips=("127.0.0.1", "10.96.0.1", f"10.250.{ctx.node_slot}.1"),
            server=True,
        ),
        "kubelet-client": pki.issue(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            orgs=("kubeadm:cluster-admins",),
            client=True,
        ),
        "front-proxy-client": front.issue("front-proxy-client", "front-proxy-client", client=True),
        "admin": pki.issue("admin", "kubernetes-admin", orgs=("system:masters",), client=True),
        "kcm": pki.issue("controller-manager", "system:kube-controller-manager", client=True),
        "scheduler": pki.issue("scheduler", "system:kube-scheduler", client=True),
        "restricted": pki.issue(
            "restricted", RESTRICTED_USER, orgs=(RESTRICTED_GROUP,), client=True
        ),
    }


def start(ctx: StackContext) -> None:
    """Build what is missing, start the four components and wait until the API is ready."""
    v = ctx.versions
    kube = build("kubernetes", v.kubernetes, _log(ctx))
    etcd = build("etcd", v.etcd, _log(ctx))
    certs = _certs(ctx)
    pki = ctx.pki
    front_ca = ctx.run / "pki" / "front-proxy" / "front-proxy-ca.crt"
    sa_key, sa_pub = pki.rsa_key("sa")
    run = ctx.run

    etcd_port, etcd_peer = ctx.port("etcd"), ctx.port("etcd-peer")
    client_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{etcd_peer}"
    procs.start(
        run,
        "etcd",
        [
            etcd / "etcd",
            "--name=realstack",
            f"--data-dir={run / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=realstack={peer_url}",
            "--listen-metrics-urls=",
            "--unsafe-no-fsync",  # a test cluster: losing the last writes on power loss is fine
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
    )
    procs.wait_for(
        "etcd health",
        lambda: _http_ok(f"{client_url}/health"),
        timeout=60,
        run=run,
        name="etcd",
    )

    port = ctx.port("apiserver")
    procs.start(
        run,
        "kube-apiserver",
        [
            kube / "kube-apiserver",
            f"--etcd-servers={client_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # the `kubernetes` Service's endpoint is the node's relay, written by the stack
            # (realnode/incluster.py): 127.0.0.1 would be each pod's own loopback. It is also
            # what lets 1.37 start with --advertise-address=127.0.0.1: 1.37 asks the reconciler
            # to ValidateIP the public address before starting (pkg/controlplane/instance.go,
            # "cannot use public IP ... with endpoint reconciler"); the lease and master-count
            # reconcilers refuse loopback (ValidateEndpointIP), the none reconciler accepts any
            # (pkg/controlplane/reconcilers/none.go, v1.37.2; checked up 2026-12-07)
            "--endpoint-reconciler-type=none",
            f"--secure-port={port}",
            f"--tls-cert-file={certs['apiserver'].cert}",
            f"--tls-private-key-file={certs['apiserver'].key}",
            f"--client-ca-file={pki.ca.cert}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--kubelet-client-certificate={certs['kubelet-client'].cert}",
            f"--kubelet-client-key={certs['kubelet-client'].key}",
            f"--kubelet-certificate-authority={pki.ca.cert}",
            "--kubelet-preferred-address-types=InternalIP",
            # the aggregation layer (Kueue's visibility API), as kubeadm sets it up
            f"--requestheader-client-ca-file={front_ca}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-username-headers=X-Remote-User",
            f"--proxy-client-cert-file={certs['front-proxy-client'].cert}",
            f"--proxy-client-key-file={certs['front-proxy-client'].key}",
            "--profiling=false",
            "--v=1",
            *gates.flags(ctx.feature_gates.get(gates.APISERVER, {})),
        ],
    )
    ca, admin = pki.ca.cert, certs["admin"]
    procs.wait_for(
        "kube-apiserver /readyz",
        lambda: procs.https_ok(
            f"{ctx.apiserver_url}/readyz", ca=ca, cert=admin.cert, key=admin.key
        ),
        timeout=120,
        run=run,
        name="kube-apiserver",
    )
    kubeconfig(ctx, ctx.admin_kubeconfig, "kubernetes-admin", admin)
    kubeconfig(ctx, ctx.restricted_kubeconfig, RESTRICTED_USER, certs["restricted"])
    kcm_config = kubeconfig(
        ctx, run / "controller-manager.kubeconfig", "system:kube-controller-manager", certs["kcm"]
    )
    sched_config = kubeconfig(
        ctx, run / "scheduler.kubeconfig", "system:kube-scheduler", certs["scheduler"]
    )
    procs.start(
        run,
        "kube-controller-manager",
        [
            kube / "kube-controller-manager",
            f"--kubeconfig={kcm_config}",
            f"--authentication-kubeconfig={kcm_config}",
            f"--authorization-kubeconfig={kcm_config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ctx.port('kube-controller-manager')}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            "--controllers=*,bootstrapsigner,tokencleaner",
            f"--service-account-private-key-file={sa_key}",
            f"--root-ca-file={pki.ca.cert}",
            f"--cluster-signing-cert-file={pki.ca.cert}",
            f"--cluster-signing-key-file={pki.ca.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--v=1",
        ],
    )
    procs.start(
        run,
        "kube-scheduler",
        [
            kube / "kube-scheduler",
            f"--kubeconfig={sched_config}",
            f"--authentication-kubeconfig={sched_config}",
            f"--authorization-kubeconfig={sched_config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ctx.port('kube-scheduler')}",
            "--leader-elect=false",
            "--v=1",
        ],
    )
    for name in ("kube-controller-manager", "kube-scheduler"):
        url = f"https://127.0.0.1:{ctx.port(name)}/healthz"
        procs.wait_for(
            f"{name} /healthz",
            lambda url=url: _https_insecure_ok(url),
            timeout=60,
            run=run,
            name=name,
        )
    procs.wait_for(
        "the default service account",
        lambda: _get_ok(ctx, "/api/v1/namespaces/default/serviceaccounts/default"),
        timeout=60,
    )


def stop(ctx: StackContext) -> None:
    for name in reversed(COMPONENTS):
        procs.stop(ctx.run, name)


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status == 200


def _https_insecure_ok(url: str) -> bool:
    """A component's own /healthz (self-signed serving cert, anonymous access allowed)."""
    import ssl
    import urllib.request

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, context=context, timeout=5) as resp:
        return resp.status == 200


def _get_ok(ctx: StackContext, path: str) -> bool:
    admin = ctx.pki.dir / "admin.crt", ctx.pki.dir / "admin.key"
    return procs.https_ok(ctx.apiserver_url + path, ca=ctx.pki.ca.cert, cert=admin[0], key=admin[1])
