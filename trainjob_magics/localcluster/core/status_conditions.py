"""Status conditions: build one, upsert one, test one."""

from __future__ import annotations

from typing import Any

from .store import now_rfc3339


def condition(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_rfc3339(),
    }


def set_condition(status: dict[str, Any], cond: dict[str, Any]) -> None:
    """Upsert a condition; keep lastTransitionTime when the status did not change."""
    conds = status.setdefault("conditions", [])
    for i, c in enumerate(conds):
        if c.get("type") == cond["type"]:
            if c.get("status") == cond["status"]:
                cond = {**cond, "lastTransitionTime": c.get("lastTransitionTime")}
            if c != cond:
                conds[i] = cond
            return
    conds.append(cond)


def has_condition(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )
