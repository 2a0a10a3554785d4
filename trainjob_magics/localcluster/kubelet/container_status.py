"""containerStatuses entries: readiness, image references, the waiting state."""

from __future__ import annotations

import hashlib
from typing import Any


def pod_ready(pod: dict[str, Any]) -> bool:
    css = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(css) and all(cs.get("ready") for cs in css)


def container_image(pod: dict[str, Any], cname: str) -> str:
    for c in pod["spec"].get("containers") or []:
        if c.get("name") == cname:
            return c.get("image", "")
    return ""


def image_ref(image: str) -> str:
    """The fully qualified reference containerd reports in containerStatuses[].image:
    `busybox` -> `docker.io/library/busybox:latest`."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = "" if digest or ":" in last else ":latest"
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}"
    return name + tag + (f"@{digest}" if digest else "")


def image_id(image: str) -> str:
    """containerStatuses[].imageID: `<repository>@sha256:<digest>` (a stand-in digest)."""
    ref = image_ref(image).split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    repo = ref[: len(ref) - len(last)] + last.split(":", 1)[0]
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def waiting_status(pod: dict[str, Any], cname: str, reason: str, message: str) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {
        "name": cname,
        "image": container_image(pod, cname),
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {"waiting": state},
        "lastState": {},
    }
