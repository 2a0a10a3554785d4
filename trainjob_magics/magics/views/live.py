"""The MIME type our panels carry beside their HTML and text: where the lab extension runs it
renders the panel live from the Jupyter server extension (the job's real state, by name and
uid, after a kernel restart, a reload or a deletion); elsewhere (nbconvert, VS Code, GitHub)
the front end picks the HTML or the text as before."""

from __future__ import annotations

from typing import Any

PANEL_MIME = "application/vnd.trainjob-magics.panel+json"


def panel_ref(kind: str, name: str, namespace: str, uid: str = "", **extra: Any) -> dict[str, Any]:
    """What a panel of ``kind`` (connect, status, forward, cell) refers to."""
    ref: dict[str, Any] = {"kind": kind, "name": name, "namespace": namespace}
    if uid:
        ref["uid"] = uid
    ref.update({k: v for k, v in extra.items() if v is not None})
    return ref
