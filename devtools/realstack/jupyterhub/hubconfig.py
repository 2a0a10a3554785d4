"""The hub's ``jupyterhub_config.py``, written at ``up`` from these settings.

Laid out as Zero to JupyterHub lays it out: the hub and configurable-http-proxy apart (the proxy
is not the hub's child), KubeSpawner starting one pod per user in the user's namespace,
jupyterhub-idle-culler as a hub-managed service, one shared password for any user name
(``SharedPasswordAuthenticator``, JupyterHub 5.3+; since 5.0 a hub admits nobody unless an allow
setting says who). Both run in the real node's network namespace: the proxy reaches the pods'
addresses and the pods reach the hub at the pods' gateway."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

HUB_PORT = 8081  # the hub's API, on the pods' gateway
PROXY_PORT = 8000  # the proxy's public side, in the node's namespace
PROXY_API_PORT = 8001
CULL_TIMEOUT = 3600  # Zero to JupyterHub's default: an hour without activity


@dataclass
class HubSettings:
    hub_ip: str  # the pods' gateway: where the pods reach the hub
    proxy_api_token_file: str
    admin_token_file: str
    password_file: str
    db_file: str
    cookie_secret_file: str
    image: str
    no_widgets_image: str
    namespace_template: str
    service_account: str
    user_objects_file: str
    kubeconfig: str
    kubectl: str
    python: str
    cull_timeout: int = CULL_TIMEOUT


TEMPLATE = r'''# Written by `python -m devtools.realstack up --jupyterhub`
import asyncio
import json
import pathlib

S = json.loads(SETTINGS_JSON)
c = get_config()  # noqa: F821


def _read(path):
    return pathlib.Path(path).read_text().strip()


c.JupyterHub.bind_url = "http://0.0.0.0:PROXY_PORT/"
c.JupyterHub.hub_bind_url = f"http://{S['hub_ip']}:HUB_PORT"
c.JupyterHub.hub_connect_url = f"http://{S['hub_ip']}:HUB_PORT"
c.JupyterHub.db_url = "sqlite:///" + S["db_file"]
c.JupyterHub.cookie_secret_file = S["cookie_secret_file"]
c.JupyterHub.cleanup_servers = False  # as Zero to JupyterHub: a hub restart keeps the servers
c.ConfigurableHTTPProxy.should_start = False  # its own process, as the chart's proxy pod
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:PROXY_API_PORT"
c.ConfigurableHTTPProxy.auth_token = _read(S["proxy_api_token_file"])

c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = _read(S["password_file"])
c.Authenticator.allow_all = True

c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.KubeSpawner.enable_user_namespaces = True
c.KubeSpawner.user_namespace_template = S["namespace_template"]
c.KubeSpawner.service_account = S["service_account"]
c.KubeSpawner.automount_service_account_token = True
c.KubeSpawner.image = S["image"]
c.KubeSpawner.image_pull_policy = "Never"  # built here, no registry
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.KubeSpawner.default_url = "/lab"
c.KubeSpawner.start_timeout = 300
c.KubeSpawner.http_timeout = 120
c.KubeSpawner.uid = 1000
c.KubeSpawner.environment = {"JUPYTER_PREFER_ENV_PATH": "1"}


async def _user_objects(spawner):
    """The user's namespace, ServiceAccount, docs/rbac.md's Role bound to it, the LocalQueue."""
    namespace = spawner.namespace
    text = pathlib.Path(S["user_objects_file"]).read_text().replace("@@NAMESPACE@@", namespace)
    proc = await asyncio.create_subprocess_exec(
        S["kubectl"], "--kubeconfig", S["kubeconfig"], "apply", "--server-side",
        "--field-manager=trainjob-magics-hub", "-f", "-",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(text.encode())
    if proc.returncode != 0:
        raise RuntimeError(f"the user's objects in {namespace}: {err.decode().strip()}")
    spawner.log.info("user objects in %s: %s", namespace, out.decode().strip().replace("\n", "; "))
    # a user's image without a package the project needs (the bad set-ups' test)
    if spawner.user.name.startswith("nowidgets"):
        spawner.image = S["no_widgets_image"]


c.KubeSpawner.pre_spawn_hook = _user_objects

c.JupyterHub.services = [
    {
        "name": "idle-culler",
        "command": [
            S["python"], "-m", "jupyterhub_idle_culler", f"--timeout={S['cull_timeout']}",
        ],
    },
    # the real stack's own admin (tests: stop a server through the API, run a culler)
    {"name": "realstack-admin", "api_token": _read(S["admin_token_file"])},
]
c.JupyterHub.load_roles = [
    {
        "name": "jupyterhub-idle-culler-role",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    },
    {"name": "admin", "services": ["realstack-admin"]},
]
'''


def render(settings: HubSettings) -> str:
    text = TEMPLATE.replace("SETTINGS_JSON", repr(json.dumps(asdict(settings))))
    for name, value in (
        ("PROXY_API_PORT", PROXY_API_PORT),
        ("PROXY_PORT", PROXY_PORT),
        ("HUB_PORT", HUB_PORT),
    ):
        text = text.replace(name, str(value))
    return text
