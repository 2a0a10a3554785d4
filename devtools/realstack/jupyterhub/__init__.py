"""JupyterHub on the real stack (``python -m devtools.realstack up --jupyterhub``): the notebook
runs in a pod on the real node, as on a user's cluster.

``start(ctx)`` installs the hub's software (``install``), builds and imports the single-user
image (``image``), writes the hub's configuration (``hubconfig``, with the per-user objects of
``users``) and starts three processes: configurable-http-proxy and the hub in the node's network
namespace, and a relay from ``127.0.0.1:PORT`` on this machine to the proxy, the one address a
browser or a shell here uses. ``stop(ctx)`` stops them; the users' pods and namespaces go with
the stack."""

from __future__ import annotations

import json
import secrets
import shutil
import socket
from pathlib import Path

from devtools.realstack import controllers, gobuild, images, procs
from devtools.realstack.context import StackContext
from devtools.realstack.control_plane import kubeconfig
from devtools.realstack.jupyterhub import hubconfig, install, users
from devtools.realstack.jupyterhub import image as singleuser
from devtools.realstack.realnode import containerd, host
from devtools.realstack.realnode.kubelet import relay_url

__all__ = ["COMPONENTS", "Hub", "hub", "start", "status_line", "stop"]

COMPONENTS = ("hub-proxy", "jupyterhub", "hub-relay")


class Hub:
    """Where a running hub keeps its state (``RUN/jupyterhub``) and how it is reached."""

    def __init__(self, ctx: StackContext) -> None:
        self.ctx = ctx
        self.dir = ctx.run / "jupyterhub"

    @property
    def enabled(self) -> bool:
        return (self.dir / "settings.json").is_file()

    @property
    def port(self) -> int:
        return self.ctx.port("jupyterhub")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def api_url(self) -> str:
        return f"{self.url}hub/api"

    @property
    def password(self) -> str:
        return (self.dir / "password").read_text().strip()

    @property
    def admin_token(self) -> str:
        """The ``realstack-admin`` service's API token (tests only; never printed)."""
        return (self.dir / "admin-token").read_text().strip()

    def namespace(self, user: str) -> str:
        return users.NAMESPACE_PREFIX + user


def hub(ctx: StackContext) -> Hub:
    return Hub(ctx)


def _secret(path: Path, nbytes: int = 24) -> None:
    if not path.is_file():
        path.write_text(secrets.token_hex(nbytes) + "\n")
        path.chmod(0o600)


def _reachable(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return True


def start(ctx: StackContext) -> Hub:
    """Start the hub beside the running stack (a running hub is kept)."""
    h = Hub(ctx)
    log = ctx.run / "logs" / "jupyterhub-build.log"
    h.dir.mkdir(parents=True, exist_ok=True)
    venv = install.hub_venv(log)
    chp = install.proxy_bin(log)
    # the image of this checkout (cached by content): a running hub's next spawn takes it
    tars = singleuser.build(log)
    ctr = gobuild.build("containerd", ctx.versions.containerd, ctx.run / "logs" / "build.log")
    images.import_images(ctr / "ctr", containerd.socket(ctx), tars, log)
    if all(procs.pid_of(ctx.run, name) for name in COMPONENTS) and _health(h):
        return h

    for name in ("password", "proxy-token", "admin-token"):
        _secret(h.dir / name)
    pair = ctx.pki.issue("jupyterhub", "jupyterhub", orgs=("system:masters",), client=True)
    kcfg = kubeconfig(ctx, h.dir / "hub.kubeconfig", "jupyterhub", pair, server=relay_url(ctx))
    kueue = controllers.kueue_api_version(ctx) if ctx.versions.kueue else None
    (h.dir / "user-objects.json").write_text(users.render(users.user_objects(kueue), users.NS_MARK))
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise procs.StackError("the hub's pre-spawn hook needs kubectl on PATH")
    settings = hubconfig.HubSettings(
        hub_ip=host.POD_GATEWAY,
        proxy_api_token_file=str(h.dir / "proxy-token"),
        admin_token_file=str(h.dir / "admin-token"),
        password_file=str(h.dir / "password"),
        db_file=str(h.dir / "jupyterhub.sqlite"),
        cookie_secret_file=str(h.dir / "cookie-secret"),
        image=singleuser.IMAGE,
        no_widgets_image=singleuser.NO_WIDGETS_IMAGE,
        namespace_template=users.namespace_template(),
        service_account=users.SERVICE_ACCOUNT,
        user_objects_file=str(h.dir / "user-objects.json"),
        kubeconfig=str(kcfg),
        kubectl=kubectl,
        python=str(venv / "bin" / "python"),
    )
    (h.dir / "settings.json").write_text(json.dumps(settings.__dict__, indent=1))
    cfg = h.dir / "jupyterhub_config.py"
    cfg.write_text(hubconfig.render(settings))

    slot = ctx.node_slot
    env = {
        "PATH": f"{venv / 'bin'}:{chp}:/usr/local/bin:/usr/bin:/bin",
        "KUBECONFIG": str(kcfg),
        "CONFIGPROXY_AUTH_TOKEN": (h.dir / "proxy-token").read_text().strip(),
    }
    hub_url = f"http://{host.POD_GATEWAY}:{hubconfig.HUB_PORT}"
    proxy = [
        str(chp / "configurable-http-proxy"),
        "--ip=0.0.0.0",
        f"--port={hubconfig.PROXY_PORT}",
        "--api-ip=127.0.0.1",
        f"--api-port={hubconfig.PROXY_API_PORT}",
        f"--default-target={hub_url}",
        f"--error-target={hub_url}/hub/error",
        "--log-level=warn",
    ]
    procs.start(ctx.run, "hub-proxy", host.in_node(slot, proxy), env=env, cwd=h.dir)
    hub_argv = [str(venv / "bin" / "jupyterhub"), "-f", str(cfg)]
    procs.start(ctx.run, "jupyterhub", host.in_node(slot, hub_argv), env=env, cwd=h.dir)
    # from this machine only the node's address is reachable: through the proxy
    through_proxy = f"http://{host.node_ip(slot)}:{hubconfig.PROXY_PORT}/hub/api/"
    procs.wait_for(
        "the hub's API (through its proxy)",
        lambda: procs.http_ok(through_proxy),
        timeout=120,
        run=ctx.run,
        name="jupyterhub",
    )
    socat = shutil.which("socat")
    if socat is None:
        raise procs.StackError("the hub's relay needs socat: apt-get install socat")
    relay = [
        socat,
        f"TCP-LISTEN:{h.port},bind=127.0.0.1,fork,reuseaddr",
        f"TCP:{host.node_ip(slot)}:{hubconfig.PROXY_PORT}",
    ]
    procs.start(ctx.run, "hub-relay", relay)
    procs.wait_for(
        "the hub through its proxy", lambda: _health(h), timeout=60, run=ctx.run, name="hub-relay"
    )
    return h


def _health(h: Hub) -> bool:
    return procs.http_ok(f"{h.api_url}/")


def status_line(ctx: StackContext) -> str | None:
    """``jupyterhub: URL (any user name, password: PASSWORD)``, or None without a hub."""
    h = Hub(ctx)
    if not h.enabled or "jupyterhub" not in ctx.ports:
        return None
    return f"jupyterhub: {h.url} (any user name, password: {h.password})"


def stop(ctx: StackContext) -> None:
    for name in ("hub-relay", "jupyterhub", "hub-proxy"):
        procs.stop(ctx.run, name)
