"""A JupyterHub user on the real stack's hub (``up --jupyterhub``), driven as the hub's own
admin service would: spawn and stop the user's server through the hub's REST API, and run code
in a real kernel of that server (the Jupyter server's REST API and its kernel WebSocket, through
the hub's proxy). The browser tests log in as the user instead; both reach the same pod."""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

import websocket

from devtools.realstack import controllers
from devtools.realstack.context import StackContext
from devtools.realstack.jupyterhub import Hub

STOP_BOUND = 60.0  # issue 34: a stopped server's TrainJobs are gone within a minute


def trainjobs(ctx: StackContext, namespace: str) -> dict[str, dict[str, Any]]:
    """The TrainJobs of ``namespace`` by name (admin's view; empty if it cannot list)."""
    out = controllers.kubectl(ctx, "get", "trainjobs", "-n", namespace, "-o", "json", check=False)
    if out.returncode != 0:
        return {}
    return {i["metadata"]["name"]: i for i in json.loads(out.stdout)["items"]}


@dataclass
class CellResult:
    """What one execute_request showed: its streams, rich outputs' text and the error."""

    stdout: str = ""
    stderr: str = ""
    texts: list[str] = field(default_factory=list)  # text/plain of display_data/execute_result
    htmls: list[str] = field(default_factory=list)
    error: str | None = None  # "ename: evalue"
    traceback: str = ""
    status: str = ""

    @property
    def shown(self) -> str:
        """Everything a person reads in the output area, as text."""
        return "\n".join([self.stdout, self.stderr, *self.texts, self.error or ""])


class HubUser:
    """One hub user: ``spawn()``, ``kernel()``, ``stop()``; ``name`` is a fresh lowercase name."""

    def __init__(self, hub: Hub, prefix: str = "u") -> None:
        self.hub = hub
        self.name = f"{prefix}{secrets.token_hex(3)}"

    # -- the hub's REST API (admin token) --------------------------------------------------

    def hub_api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        req = urllib.request.Request(
            f"{self.hub.api_url}{path}",
            method=method,
            headers={"Authorization": f"token {self.hub.admin_token}"},
            data=None if body is None else json.dumps(body).encode(),
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def model(self) -> dict[str, Any]:
        return self.hub_api(f"/users/{self.name}")

    def ready(self) -> bool:
        try:
            server = self.model().get("servers", {}).get("", {})
        except urllib.error.HTTPError:
            return False
        return bool(server.get("ready"))

    def spawn(self, timeout: float = 300) -> None:
        """Create the user and start their server; wait until the hub says it is ready."""
        try:
            self.hub_api(f"/users/{self.name}", "POST", {})
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
        try:
            self.hub_api(f"/users/{self.name}/server", "POST", {})
        except urllib.error.HTTPError as exc:
            if exc.code not in (201, 202, 400):
                raise
        until(f"{self.name}'s server ready", self.ready, timeout)

    def stop(self) -> None:
        """The hub's DELETE of the user's server (what "Stop My Server" sends)."""
        try:
            self.hub_api(f"/users/{self.name}/server", "DELETE")
        except urllib.error.HTTPError as exc:
            if exc.code not in (202, 204, 400):
                raise

    def stopped(self) -> bool:
        return not self.model().get("servers")

    # -- the user's Jupyter server -------------------------------------------------------------

    @property
    def base(self) -> str:
        return f"{self.hub.url}user/{self.name}/"

    def api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        req = urllib.request.Request(
            f"{self.base}{path.lstrip('/')}",
            method=method,
            headers={
                "Authorization": f"token {self.hub.admin_token}",
                "Content-Type": "application/json",
            },
            data=None if body is None else json.dumps(body).encode(),
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def put_notebook(self, path: str, notebook: dict[str, Any]) -> None:
        self.api(f"api/contents/{path}", "PUT", {"type": "notebook", "content": notebook})

    def kernel(self) -> HubKernel:
        model = self.api("api/kernels", "POST", {"name": "python3"})
        return HubKernel(self, model["id"])


class Kernel:
    """A kernel of a Jupyter server (``base``: its URL ending in /; a user's server behind the
    hub, or a JupyterLab), through its channels WebSocket (the JSON protocol)."""

    def __init__(self, base: str, token: str, kernel_id: str, username: str = "user") -> None:
        self.username = username
        self.id = kernel_id
        self.session = uuid.uuid4().hex
        url = base.replace("http://", "ws://") + f"api/kernels/{kernel_id}/channels"
        self.ws = websocket.create_connection(
            f"{url}?session_id={self.session}",
            header=[f"Authorization: token {token}"],
            timeout=30,
        )

    def run(self, code: str, timeout: float = 300) -> CellResult:
        """Execute ``code`` and collect what it shows until the kernel is idle again."""
        msg_id = uuid.uuid4().hex
        self.ws.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "session": self.session,
                        "username": self.username,
                        "version": "5.3",
                        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    },
                    "parent_header": {},
                    "metadata": {},
                    "channel": "shell",
                    "content": {
                        "code": code,
                        "silent": False,
                        "store_history": True,
                        "user_expressions": {},
                        "allow_stdin": False,
                        "stop_on_error": True,
                    },
                }
            )
        )
        result, idle, replied = CellResult(), False, False
        deadline = time.monotonic() + timeout
        while not (idle and replied):
            self.ws.settimeout(max(1.0, deadline - time.monotonic()))
            if time.monotonic() > deadline:
                raise AssertionError(f"no idle after {timeout:.0f} s running {code!r}: {result}")
            msg = json.loads(self.ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    result.stdout += content["text"]
                else:
                    result.stderr += content["text"]
            elif kind in ("display_data", "execute_result", "update_display_data"):
                data = content.get("data", {})
                if "text/plain" in data:
                    result.texts.append(data["text/plain"])
                if "text/html" in data:
                    result.htmls.append(data["text/html"])
            elif kind == "error":
                result.error = f"{content['ename']}: {content['evalue']}"
                result.traceback = "\n".join(content.get("traceback", []))
            elif kind == "status" and content.get("execution_state") == "idle":
                idle = True
            elif kind == "execute_reply":
                result.status = content.get("status", "")
                replied = True
        return result

    def close(self) -> None:
        self.ws.close()


class HubKernel(Kernel):
    """A kernel of a hub user's server."""

    def __init__(self, user: HubUser, kernel_id: str) -> None:
        super().__init__(user.base, user.hub.admin_token, kernel_id, user.name)
        self.user = user


def until(what: str, check: Any, timeout: float, interval: float = 0.5) -> Any:
    """Poll ``check`` until truthy; fail naming ``what`` and the last error after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception as exc:  # the last one is reported
            last, value = exc, None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last: {last})" if last else "")
    )
